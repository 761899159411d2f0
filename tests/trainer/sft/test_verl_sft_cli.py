"""verl's SFT command lines (``verl.trainer.sft_trainer``, ``verl.trainer.fsdp_sft_trainer``): their keys map onto the
SFT trainer, unsupported values fail naming the key, and runs write verl-layout checkpoints that resume exactly."""

import sys

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.trainer.sft.config import build_sft_config
from verl.trainer.sft.engine_keys import engine_tree_to_sft_config
from verl.trainer.sft.legacy_keys import legacy_tree_to_sft_config
from verl.trainer.sft.trainer import SFTTrainer


def _tree(config_name, overrides):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return OmegaConf.to_container(compose(config_name=config_name, overrides=overrides), resolve=True)


def _engine(files, model_dir, out, *extra):
    return [
        f"data.train_files={files['train']}",
        f"data.val_files={files['test']}",
        "data.max_length=32",
        "data.train_batch_size=16",
        "data.micro_batch_size_per_gpu=8",
        f"model.path={model_dir}",
        "trainer.device=cpu",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out}",
        *extra,
    ]


def test_engine_keys_map_onto_the_trainer(conversation_files, tiny_model_dir, tmp_path):
    tree = _tree(
        "sft_trainer_engine",
        _engine(
            conversation_files,
            tiny_model_dir,
            tmp_path,
            "engine=fsdp",
            "optim=fsdp",
            "optim.lr=2e-5",
            "optim.lr_warmup_steps_ratio=0.2",
            "optim.betas=[0.9,0.95]",
            "optim.min_lr_ratio=0.1",
            "optim.lr_scheduler_type=cosine",
            "engine.strategy=fsdp2",
            "data.messages_key=conv",
            "data.pad_mode=right",
            "trainer.test_freq=after_each_epoch",
            "trainer.total_training_steps=7",
            "data.enable_thinking_default=false",
            "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        ),
    )
    cfg = engine_tree_to_sft_config(tree)
    assert cfg.data.multiturn.enable and cfg.data.multiturn.messages_key == "conv"
    assert cfg.data.multiturn.enable_thinking_default is False
    assert (cfg.optim.lr, cfg.optim.lr_scheduler_type, tuple(cfg.optim.betas)) == (2e-5, "cosine", (0.9, 0.95))
    assert cfg.optim.min_lr_ratio == 0.1 and cfg.optim.lr_warmup_steps_ratio == 0.2
    assert cfg.checkpoint.save_contents == ["model", "optimizer", "extra", "hf_model"]
    assert cfg.checkpoint.load_contents == cfg.checkpoint.save_contents
    assert cfg.trainer.test_freq == "after_each_epoch" and cfg.trainer.total_training_steps == 7
    # verl's behaviour: resume automatically, save the last step as global_step_{k}, no extra HF export
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.final_export is False
    assert cfg.trainer.nnodes is None and cfg.trainer.mixed_precision == "auto"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine=megatron", "optim=megatron"], r"engine: the Megatron engine is not part.*verl\[megatron\]"),
        (["optim=megatron"], r"optim: is Megatron's optimizer group"),
        (["engine.ulysses_sequence_parallel_size=2"], r"engine.ulysses_sequence_parallel_size: is 2: sequence paral"),
        (["engine.fsdp_size=4"], r"engine.fsdp_size: is 4 but 1 process\(es\) run"),
        (["optim.optimizer=SGD"], r"optim.optimizer: is torch.optim.SGD: this trainer uses torch.optim.AdamW"),
        (["data.pad_mode=left"], r"data.pad_mode: is 'left'"),
        (["engine.dtype=float16"], r"engine.dtype: is 'float16'"),
        (["trainer.device=npu"], r"trainer.device: is 'npu'"),
    ],
)
def test_engine_keys_refuse_what_this_trainer_cannot_do(
    conversation_files, tiny_model_dir, tmp_path, overrides, message
):
    tree = _tree("sft_trainer_engine", _engine(conversation_files, tiny_model_dir, tmp_path, *overrides))
    with pytest.raises(ConfigError, match=message):
        engine_tree_to_sft_config(tree)


def test_engine_keys_reject_unknown_yaml_keys_and_warn_on_ignored_ones(
    conversation_files, tiny_model_dir, tmp_path, caplog
):
    tree = _tree(
        "sft_trainer_engine",
        _engine(
            conversation_files, tiny_model_dir, tmp_path, "data.use_dynamic_bsz=false", "engine.param_offload=true"
        ),
    )
    with caplog.at_level("WARNING"):
        engine_tree_to_sft_config(tree)
    assert "data.use_dynamic_bsz=False" in caplog.text and "engine.param_offload=True" in caplog.text
    tree["trainer"]["save_interval"] = 3  # what a user YAML with a misspelt key delivers
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['trainer.save_interval'\]"):
        engine_tree_to_sft_config(tree)


def test_legacy_keys_map_onto_the_trainer(plain_rows_file, tiny_model_dir, tmp_path):
    tree = _tree(
        "sft_trainer_legacy",
        [
            f"data.train_files={plain_rows_file}",
            "data.prompt_key=extra_info",
            "data.prompt_dict_keys=[question]",
            "data.response_key=extra_info",
            "+data.response_dict_keys=[answer]",
            "data.micro_batch_size_per_gpu=2",
            f"model.partial_pretrain={tiny_model_dir}",
            "optim.lr=1e-4",
            "optim.lr_scheduler=constant",
            "model.lora_rank=4",
            "use_remove_padding=true",
            "trainer.checkpoint.save_contents=[model,hf_model]",
            f"trainer.default_local_dir={tmp_path}",
            "data.chat_template='{{ messages[0].content }}'",
        ],
    )
    cfg = legacy_tree_to_sft_config(tree)
    assert (cfg.data.prompt_key, cfg.data.response_key) == ("extra_info.question", "extra_info.answer")
    assert not cfg.data.multiturn.enable and cfg.model.path == str(tiny_model_dir) and cfg.model.lora_rank == 4
    assert cfg.model.custom_chat_template == "{{ messages[0].content }}"
    assert (cfg.optim.lr, cfg.optim.lr_scheduler_type, cfg.optim.lr_warmup_steps_ratio) == (1e-4, "constant", 0.1)
    assert cfg.checkpoint.save_contents == ["model", "hf_model"] and cfg.trainer.final_export is False

    tree = _tree("sft_trainer_legacy", [f"data.train_files={plain_rows_file}", "ulysses_sequence_parallel_size=2"])
    with pytest.raises(ConfigError, match="ulysses_sequence_parallel_size: is 2"):
        legacy_tree_to_sft_config(tree)
    tree = _tree("sft_trainer_legacy", [f"data.train_files={plain_rows_file}", "data.prompt_dict_keys=[a,b]"])
    with pytest.raises(ConfigError, match=r"data.prompt_dict_keys: is \['a', 'b'\]: name exactly one field"):
        legacy_tree_to_sft_config(tree)


@pytest.mark.parametrize("module", ["sft_trainer", "fsdp_sft_trainer"])
def test_cli_reports_a_missing_file_with_the_key(module, tiny_model_dir, tmp_path, monkeypatch, capsys):
    import importlib

    cli = importlib.import_module(f"verl.trainer.{module}")
    model_key = "model.path" if module == "sft_trainer" else "model.partial_pretrain"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            module,
            f"data.train_files={tmp_path}/missing.parquet",
            "trainer.device=cpu",
            f"{model_key}={tiny_model_dir}",
            "hydra.run.dir=.",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={tmp_path}/ckpt",
        ],
    )
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 2
    assert f"error: data.train_files: parquet file {tmp_path}/missing.parquet does not exist" in capsys.readouterr().err


def _resumable(model_dir, files, out, steps):
    return build_sft_config(
        {
            "data": {
                "train_files": str(files["train"]),
                "max_length": 32,
                "train_batch_size": 16,
                "micro_batch_size_per_gpu": 8,
                "multiturn": {"enable": True},
            },
            "model": {"path": str(model_dir)},
            "optim": {"lr": 1e-3, "lr_scheduler_type": "cosine", "lr_warmup_steps": 1},
            "checkpoint": {"save_contents": ["model", "optimizer", "extra"]},
            "trainer": {
                "default_local_dir": str(out),
                "logger": [],
                "total_training_steps": steps,
                "save_freq": 2,
                "final_export": False,
                "resume_mode": "auto",
                "max_ckpt_to_keep": 1,
                "device": "cpu",
            },
        }
    )


def test_interrupted_run_resumes_to_the_same_weights(conversation_files, tiny_model_dir, tmp_path):
    straight = SFTTrainer(_resumable(tiny_model_dir, conversation_files, tmp_path / "a", 4))
    last = straight.fit()
    assert last == tmp_path / "a" / "global_step_4"
    assert sorted(p.name for p in (tmp_path / "a").glob("global_step_*")) == ["global_step_4"]  # max_ckpt_to_keep
    assert (tmp_path / "a" / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert (last / "dcp").is_dir() and (last / "huggingface" / "config.json").is_file()

    interrupted = SFTTrainer(_resumable(tiny_model_dir, conversation_files, tmp_path / "b", 4))
    log = interrupted._log

    def crash_after_step_2(metrics):
        log(metrics)
        if interrupted.global_step == 2:
            raise RuntimeError("simulated crash")

    interrupted._log = crash_after_step_2
    with pytest.raises(RuntimeError, match="simulated crash"):
        interrupted.fit()
    resumed = SFTTrainer(_resumable(tiny_model_dir, conversation_files, tmp_path / "b", 4))
    assert resumed.global_step == 2
    resumed.fit()
    assert [m["step"] for m in resumed.history] == [3, 4]
    assert resumed.history[-1]["train/loss"] == pytest.approx(straight.history[-1]["train/loss"], rel=1e-5)
    want, got = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.allclose(want[k], got[k], atol=1e-6) for k in want)


def test_resume_needs_model_shards(conversation_files, tiny_model_dir, tmp_path):
    cfg = _resumable(tiny_model_dir, conversation_files, tmp_path, 2)
    SFTTrainer(cfg).fit()
    hf_only = build_sft_config({**cfg.to_dict(), "checkpoint": {"save_contents": ["hf_model"]}})
    with pytest.raises(ConfigError, match=r"checkpoint.load_contents: is \['hf_model'\]: resuming from .* needs"):
        SFTTrainer(hf_only)


def test_verl_s_deprecated_grad_clip_sets_clip_grad():
    from verl.trainer.sft.engine_keys import read_optim
    from verl.trainer.sft.key_reader import KeyReader

    keys = KeyReader({"optim": {"lr": 1e-4, "clip_grad": 1.0, "grad_clip": 0.25}})
    assert read_optim(keys)["clip_grad"] == 0.25
    assert read_optim(KeyReader({"optim": {"lr": 1e-4, "clip_grad": 0.5}}))["clip_grad"] == 0.5
