"""verl's trainer-level BaseModelConfig and its bridge to the workers' HFModelConfig."""

from __future__ import annotations

import pytest

from verl.base_config import ConfigError
from verl.trainer.config import BaseModelConfig
from verl.workers.config import HFModelConfig


def test_defaults_and_recipe_subclass():
    from dataclasses import dataclass

    @dataclass
    class TeacherModelConfig(BaseModelConfig):
        temperature: float = 1.0

    config = TeacherModelConfig(path="/models/teacher", trust_remote_code=True)
    assert config["tokenizer_path"] is None and config.override_config == {} and config.temperature == 1.0
    with pytest.raises(ConfigError, match="path"):
        BaseModelConfig(path="")


def test_to_hf_model_config_maps_lora_and_takes_overrides():
    config = BaseModelConfig(
        path="/models/policy", external_lib="my_arch", lora={"rank": 8, "alpha": 32, "target_modules": ["q_proj"]}
    )
    hf = config.to_hf_model_config(use_remove_padding=True)
    assert isinstance(hf, HFModelConfig)
    assert (hf.path, hf.tokenizer_path, hf.external_lib) == ("/models/policy", "/models/policy", "my_arch")
    assert (hf.lora_rank, hf.lora_alpha, hf.target_modules, hf.use_remove_padding) == (8, 32, ["q_proj"], True)
    assert BaseModelConfig(path="/m").to_hf_model_config().lora_rank == 0
