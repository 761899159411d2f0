"""``python -m verl.model_merger``: PPO actor and SFT checkpoints become loadable Hugging Face folders; ``test``
compares against a reference; bad input fails with the flag and the reason."""

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from verl.model_merger.__main__ import main
from verl.model_merger.output_validation import validate_hf_model_output
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager
from verl.workers.fsdp.model_loader import export_config


def _changed_model(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    return model


@pytest.fixture
def actor_checkpoint(tiny_model_dir, tmp_path):
    """A PPO actor checkpoint (global_step_1/actor) in the layout the FSDP workers write, and its model."""
    torch.manual_seed(0)
    model = _changed_model(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    manager = FSDPCheckpointManager(
        model, optimizer, processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), hf_config=export_config(model)
    )
    folder = tmp_path / "global_step_1" / "actor"
    manager.save_checkpoint(str(folder), global_step=1)
    return folder, model


def test_merge_ppo_actor_checkpoint_loads_with_from_pretrained(actor_checkpoint, tiny_model_dir, tmp_path):
    folder, model = actor_checkpoint
    main(["merge", "--backend", "fsdp", "--local_dir", str(folder), "--target_dir", str(tmp_path / "hf")])
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    want = model.state_dict()
    assert merged.state_dict().keys() == want.keys()
    assert all(torch.equal(merged.state_dict()[k], want[k]) for k in want)
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (tmp_path / "hf" / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(tiny_model_dir).chat_template


def test_test_subcommand_compares_with_a_reference(actor_checkpoint, tiny_model_dir, tmp_path, capsys):
    folder, model = actor_checkpoint
    model.save_pretrained(tmp_path / "ref")
    main(["test", "--backend", "fsdp", "--local_dir", str(folder), "--test_hf_dir", str(tmp_path / "ref")])
    assert "test passed: 21 tensors match" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["test", "--backend", "fsdp", "--local_dir", str(folder), "--test_hf_dir", str(tiny_model_dir)])
    assert info.value.code == 2
    assert "values differ from" in capsys.readouterr().err


def test_lora_sft_checkpoint_gives_base_weights_and_an_adapter(tiny_model_dir, tmp_path):
    """As verl does: target_dir holds the base model, lora_adapter/ the trained adapter (alpha from the run)."""
    from peft import PeftModel

    from verl.trainer.sft.config import build_sft_config
    from verl.trainer.sft.trainer import SFTTrainer
    from verl.utils.synthetic_tasks import make_rows, write_rows

    train = write_rows(make_rows("arith_seq", 32), tmp_path / "train.parquet")
    cfg = build_sft_config(
        {
            "data": {
                "train_files": str(train),
                "max_length": 32,
                "train_batch_size": 16,
                "micro_batch_size_per_gpu": 16,
            },
            "model": {"path": str(tiny_model_dir), "lora_rank": 4, "lora_alpha": 8},
            "optim": {"lr": 1e-2},
            "checkpoint": {"save_contents": ["model"]},
            "trainer": {
                "default_local_dir": str(tmp_path / "sft"),
                "logger": [],
                "total_training_steps": 2,
                "final_export": False,
                "device": "cpu",
            },
        }
    )
    trainer = SFTTrainer(cfg)
    step_dir = trainer.fit()
    assert json.loads((step_dir / "lora_train_meta.json").read_text())["lora_alpha"] == 8
    main(["merge", "--backend", "fsdp", "--local_dir", str(step_dir), "--target_dir", str(tmp_path / "hf")])
    adapter_config = json.loads((tmp_path / "hf" / "lora_adapter" / "adapter_config.json").read_text())
    assert (adapter_config["r"], adapter_config["lora_alpha"]) == (4, 8)
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert all(torch.equal(base.state_dict()[k], v) for k, v in original.state_dict().items())
    tuned = PeftModel.from_pretrained(base, tmp_path / "hf" / "lora_adapter").eval()
    trainer.model.eval()
    ids = torch.tensor([[1, 5, 30, 31, 32, 6, 40]])
    with torch.no_grad():
        assert torch.allclose(tuned(input_ids=ids).logits, trainer.model(input_ids=ids).logits, atol=1e-5)


def test_bad_checkpoints_fail_naming_the_flag(actor_checkpoint, tmp_path, capsys):
    folder, _ = actor_checkpoint

    def error(*argv):
        with pytest.raises(SystemExit) as info:
            main(list(argv))
        assert info.value.code == 2
        return capsys.readouterr().err

    err = error("merge", "--backend", "megatron", "--local_dir", str(folder), "--target_dir", str(tmp_path / "m"))
    assert "--backend megatron" in err and "pip install verl[megatron]" in err
    assert "--local_dir is required" in error("merge", "--backend", "fsdp", "--target_dir", str(tmp_path / "x"))
    err = error("merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "none"), "--target_dir", str(tmp_path))
    assert f"--local_dir {tmp_path / 'none'}: no Hugging Face config" in err

    source = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder / "huggingface"))
    optimizer = torch.optim.AdamW(source.parameters(), lr=1e-3)
    source(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    optim_only = FSDPCheckpointManager(
        source, optimizer, hf_config=source.config, checkpoint_config=SimpleNamespace(save_contents=["optimizer"])
    )
    optim_only.save_checkpoint(str(tmp_path / "optim_only"))
    err = error(
        "merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "optim_only"), "--target_dir", str(tmp_path / "y")
    )
    assert "the checkpoint holds no model weights (it was saved with save_contents=['optimizer'])" in err
    (tmp_path / "bare" / "huggingface").mkdir(parents=True)
    source.config.save_pretrained(tmp_path / "bare" / "huggingface")
    err = error("merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "bare"), "--target_dir", str(tmp_path))
    assert "no dcp/ folder of model shards" in err


def test_validate_hf_model_output_names_what_is_missing(tmp_path):
    with pytest.raises(RuntimeError, match="config.json is missing or empty; no weights"):
        validate_hf_model_output(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "part-1.safetensors"}}))
    with pytest.raises(RuntimeError, match="names a missing or empty shard 'part-1.safetensors'"):
        validate_hf_model_output(tmp_path)
    (tmp_path / "part-1.safetensors").write_bytes(b"x")
    validate_hf_model_output(tmp_path)
