"""The packaged sft_trainer.yaml composes with Hydra and validates; bad values name their dotted key."""

import pytest
from hydra import compose, initialize_config_module

from verl.base_config import ConfigError
from verl.trainer.sft.config import SFTConfig, build_sft_config
from verl.workers.config.model import HFModelConfig
from verl.workers.config.optimizer import OptimizerConfig


def _compose(*overrides):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="sft_trainer", overrides=list(overrides))


def test_packaged_yaml_builds_typed_config():
    cfg = build_sft_config(_compose("data.train_files=a.parquet", "trainer.experiment_name=warm"))
    assert isinstance(cfg, SFTConfig)
    assert isinstance(cfg.model, HFModelConfig) and isinstance(cfg.optim, OptimizerConfig)
    assert cfg.data.train_file_list == ["a.parquet"] and cfg.data.val_file_list == []
    assert cfg.data.prompt_key == "prompt" and cfg.data.response_key == "reward_model.ground_truth"
    assert cfg.trainer.default_local_dir == "checkpoints/verl_sft/warm"
    assert cfg.optim.lr_scheduler_type == "cosine" and cfg.optim.betas == (0.9, 0.95)


def test_file_lists_are_accepted():
    cfg = build_sft_config(_compose("data.train_files=[a.parquet,b.parquet]", "data.val_files=c.parquet"))
    assert cfg.data.train_file_list == ["a.parquet", "b.parquet"] and cfg.data.val_file_list == ["c.parquet"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (None, "data.train_files: is required"),
        ("data.truncation=middle", "data.truncation: must be one of ['error', 'left', 'right'], got 'middle'"),
        ("data.max_length=1", "data.max_length: must be >= 2, got 1"),
        ("trainer.logger=[console,nope]", "trainer.logger: unknown logger(s) ['nope']"),
        ("trainer.mixed_precision=fp8", "trainer.mixed_precision: must be one of ['auto', 'bf16', 'none']"),
        ("trainer.total_training_steps=0", "trainer.total_training_steps: must be >= 1 or null, got 0"),
        ("optim.lr_scheduler_type=linear", "optim.lr_scheduler_type: must be one of ['constant', 'cosine']"),
        ("data.train_batch_size=abc", "data.train_batch_size: expected int, got 'abc'"),
    ],
)
def test_bad_values_name_the_key(override, message):
    overrides = [] if override is None else ["data.train_files=a.parquet", override]
    with pytest.raises(ConfigError) as info:
        build_sft_config(_compose(*overrides))
    assert message in str(info.value)


def test_unknown_key_in_a_user_tree_is_named():
    tree = {"data": {"train_files": "a.parquet", "prompt_column": "q"}}
    with pytest.raises(
        ConfigError,
        match=r"data.prompt_column: unknown key for SFTDataConfig \(did you mean "
        r"'prompt_key'\?\)",
    ):
        build_sft_config(tree)
