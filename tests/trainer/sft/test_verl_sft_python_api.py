"""verl's SFT Python API: SFTDataset / MultiTurnSFTDataset from a legacy data block, create_sft_dataset,
collate_sft_batch and FSDPSFTTrainer driving this package's SFT trainer."""

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer, collate_sft_batch, create_sft_dataset
from verl.utils.dataset import MultiTurnSFTDataset, SFTDataset
from verl.utils.extras import MissingExtraError
from verl.utils.synthetic_tasks import write_rows


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def struct_rows_file(tmp_path):
    rows = [{"extra_info": {"qa": {"question": f"{i}+1=", "answer": str(i + 1)}}} for i in range(6)]
    return str(write_rows(rows, tmp_path / "struct.parquet"))


def data_block(**overrides):
    block = {
        "prompt_key": "extra_info",
        "prompt_dict_keys": ["qa", "question"],
        "response_key": "extra_info",
        "response_dict_keys": ["qa", "answer"],
        "max_length": 24,
        "truncation": "error",
    }
    block.update(overrides)
    return OmegaConf.create(block)


def test_sft_dataset_reads_nested_struct_fields(struct_rows_file, tokenizer):
    dataset = SFTDataset(struct_rows_file, tokenizer, data_block())
    assert len(dataset) == 6 and dataset.prompts[2] == "2+1=" and dataset.responses[2] == "3"
    item = dataset[2]
    assert {k: tuple(v.shape) for k, v in item.items()} == {
        k: (24,) for k in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    }
    learned = item["input_ids"][item["loss_mask"].bool()].tolist()
    assert learned == tokenizer("3", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_max_samples_keeps_first_rows_or_a_seeded_draw(struct_rows_file, tokenizer):
    first = SFTDataset(struct_rows_file, tokenizer, data_block(), max_samples=2)
    assert first.responses == ["1", "2"]
    drawn = [
        SFTDataset(struct_rows_file, tokenizer, data_block(shuffle=True, seed=7), max_samples=3).responses
        for _ in range(2)
    ]
    assert drawn[0] == drawn[1] and len(drawn[0]) == 3


@pytest.fixture
def conversation_file(tmp_path):
    rows = [
        {"conv": [{"role": "user", "content": f"{i}+1="}, {"role": "assistant", "content": str(i + 1)}]}
        for i in range(4)
    ]
    return str(write_rows(rows, tmp_path / "conv.parquet"))


def test_multiturn_dataset_key_layouts_and_no_padding(conversation_file, tokenizer):
    flat = MultiTurnSFTDataset([conversation_file], tokenizer, {"messages_key": "conv", "max_length": 64})
    nested = MultiTurnSFTDataset(
        conversation_file, tokenizer, {"multiturn": {"messages_key": "conv"}, "max_length": 64}, max_samples=2
    )
    assert len(flat) == 4 and len(nested) == 2
    assert torch.equal(flat[1]["input_ids"], nested[1]["input_ids"]) and flat[1]["input_ids"].shape == (64,)
    packed = MultiTurnSFTDataset(
        conversation_file, tokenizer, {"messages_key": "conv", "max_length": 64, "pad_mode": "no_padding"}
    )[1]
    length = int(flat[1]["attention_mask"].sum())
    assert set(packed) == {"input_ids", "position_ids", "loss_mask"}
    assert torch.equal(packed["input_ids"], flat[1]["input_ids"][:length])
    assert torch.equal(packed["loss_mask"], flat[1]["loss_mask"][:length])
    with pytest.raises(MissingExtraError, match="text-only"):
        MultiTurnSFTDataset(conversation_file, tokenizer, {"messages_key": "conv"}, processor=object())
    with pytest.raises(ValueError, match="data.pad_mode: must be one of .* got 'left'"):
        MultiTurnSFTDataset(conversation_file, tokenizer, {"messages_key": "conv", "pad_mode": "left"})


CUSTOM_DATASET = """
from verl.utils.dataset import SFTDataset


class Doubled(SFTDataset):
    def __len__(self):
        return 2 * super().__len__()

    def __getitem__(self, index):
        return super().__getitem__(index % super().__len__())
"""


def test_create_sft_dataset_picks_the_class(struct_rows_file, conversation_file, tokenizer, tmp_path):
    assert type(create_sft_dataset(struct_rows_file, data_block(), tokenizer)) is SFTDataset
    multiturn = OmegaConf.create({"multiturn": {"enable": True, "messages_key": "conv"}, "max_length": 64})
    assert isinstance(create_sft_dataset(conversation_file, multiturn, tokenizer, max_samples=3), MultiTurnSFTDataset)
    (tmp_path / "custom.py").write_text(CUSTOM_DATASET)
    custom = data_block(custom_cls={"path": str(tmp_path / "custom.py"), "name": "Doubled"})
    dataset = create_sft_dataset(struct_rows_file, custom, tokenizer, max_samples=2)
    assert type(dataset).__name__ == "Doubled" and len(dataset) == 4


# verl 0.9.1's sft_trainer_engine.yaml data group, reading the fixture's "conv" column
ENGINE_DATA = {
    "train_batch_size": 256,
    "micro_batch_size_per_gpu": 4,
    "max_token_len_per_gpu": 8192,
    "use_dynamic_bsz": True,
    "train_files": None,
    "val_files": None,
    "train_max_samples": -1,
    "val_max_samples": -1,
    "messages_key": "conv",
    "tools_key": "tools",
    "enable_thinking_key": "enable_thinking",
    "enable_thinking_default": "none",
    "pad_mode": "no_padding",
    "max_length": 64,
    "truncation": "error",
    "balance_dp_token": False,
    "custom_cls": {"path": None, "name": None},
    "use_shm": False,
    "apply_chat_template_kwargs": {},
    "num_workers": 8,
    "ignore_input_ids_mismatch": False,
}


def test_engine_create_sft_dataset_reads_the_typed_data_block(struct_rows_file, conversation_file, tokenizer, tmp_path):
    from verl.base_config import ConfigError
    from verl.trainer import sft_trainer
    from verl.trainer.sft.config import SFTDataConfig, SFTMultiturnConfig
    from verl.trainer.sft.dataset import SFTDataset as TrainerSFTDataset
    from verl.utils.config_builder import as_config
    from verl.utils.dataset.config import SFTDatasetConfig

    direct = TrainerSFTDataset(
        conversation_file,
        tokenizer,
        SFTDataConfig(
            train_files=[conversation_file],
            max_length=64,
            multiturn=SFTMultiturnConfig(enable=True, messages_key="conv"),
        ),
    )
    forms = [
        OmegaConf.create(ENGINE_DATA),
        dict(ENGINE_DATA),
        as_config(OmegaConf.create(ENGINE_DATA), SFTDatasetConfig, "data"),
    ]
    for form in forms:
        dataset = sft_trainer.create_sft_dataset(conversation_file, form, tokenizer)
        assert len(dataset) == len(direct) == 4
        for index in range(4):
            assert torch.equal(dataset[index]["input_ids"], direct[index]["input_ids"])
            assert torch.equal(dataset[index]["loss_mask"], direct[index]["loss_mask"])
    first = sft_trainer.create_sft_dataset(conversation_file, OmegaConf.create(ENGINE_DATA), tokenizer, max_samples=2)
    assert list(first.indices) == [0, 1]
    shuffled = OmegaConf.create({**ENGINE_DATA, "shuffle": True, "seed": 7})
    draws = [sft_trainer.create_sft_dataset(conversation_file, shuffled, tokenizer, max_samples=2) for _ in range(2)]
    assert list(draws[0].indices) == list(draws[1].indices) and len(draws[0]) == 2
    with pytest.raises(ConfigError, match=r"data\.mesages_key: unknown key for SFTDatasetConfig \(did you mean"):
        sft_trainer.create_sft_dataset(conversation_file, {**ENGINE_DATA, "mesages_key": "conv"}, tokenizer)
    with pytest.raises(ValueError, match="processor=None"):
        sft_trainer.create_sft_dataset(conversation_file, ENGINE_DATA, tokenizer, processor=object())
    (tmp_path / "custom.py").write_text(CUSTOM_DATASET)
    custom = data_block(custom_cls={"path": str(tmp_path / "custom.py"), "name": "Doubled"})
    dataset = sft_trainer.create_sft_dataset(struct_rows_file, custom, tokenizer, max_samples=2)
    assert type(dataset).__name__ == "Doubled" and len(dataset) == 4  # the class got the block as given


def test_collate_sft_batch_pads_variable_length_items():
    fixed = [{"input_ids": torch.tensor([1, 2]), "loss_mask": torch.tensor([0, 1])}] * 2
    assert collate_sft_batch(fixed)["input_ids"].shape == (2, 2)
    ragged = [
        {"input_ids": torch.tensor([5, 6, 7]), "loss_mask": torch.tensor([0, 1, 1])},
        {"input_ids": torch.tensor([8]), "loss_mask": torch.tensor([1])},
    ]
    batch = collate_sft_batch(ragged, pad_token_id=9)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 9]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


class FakeMesh:
    def __init__(self, names, sizes):
        self.mesh_dim_names, self.sizes = names, sizes

    def size(self, dim=None):
        return self.sizes[dim] if dim is not None else int(torch.tensor(self.sizes).prod())


def legacy_tree(train_file, model_dir, out_dir):
    overrides = [
        f"data.train_files={train_file}",
        "data.prompt_key=extra_info",
        "data.response_key=extra_info",
        "data.prompt_dict_keys=[qa]",
        "+data.response_dict_keys=[qa]",
        "data.max_length=24",
        "data.train_batch_size=2",
        "data.micro_batch_size_per_gpu=1",
        f"model.partial_pretrain={model_dir}",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out_dir}",
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="sft_trainer_legacy", overrides=overrides)


def test_fsdp_sft_trainer_trains_on_given_datasets(tmp_path, tiny_model_dir, tokenizer):
    rows = [{"extra_info": {"qa": {"question": f"{i}+1=", "answer": str(i + 1)}}} for i in range(4)]
    train_file = str(write_rows(rows, tmp_path / "train.parquet"))
    config = legacy_tree(train_file, tiny_model_dir, tmp_path / "run")
    # the config's data keys are only validated: the trainer trains on the data set given to it
    train = SFTDataset(train_file, tokenizer, data_block())
    with pytest.raises(ValueError, match="sp size 2"):
        FSDPSFTTrainer(config, None, FakeMesh(("dp", "sp"), [1, 2]), tokenizer, train, None)
    with pytest.raises(ValueError, match="device_mesh has 4 devices"):
        FSDPSFTTrainer(config, FakeMesh(("fsdp",), [4]), None, tokenizer, train, None)
    trainer = FSDPSFTTrainer(config, FakeMesh(("fsdp",), [1]), FakeMesh(("dp", "sp"), [1, 1]), tokenizer, train, None)
    assert trainer.total_steps == 2 and trainer.train_dataloader.dataset is train
    assert trainer.fsdp_model is trainer.trainer.model
    last = trainer.fit()
    assert last.name == "global_step_2" and last.is_dir()
    assert [h["step"] for h in trainer.trainer.history] == [1, 2] and trainer.trainer.history[-1]["train/loss"] > 0
