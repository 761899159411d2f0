"""verl 0.6's get_reward_model_class: reward-model classes by name."""

from __future__ import annotations

import pytest

from verl.utils.extras import MissingExtraError
from verl.workers.reward_model import HFRewardModel
from verl.workers.roles.reward_model_engine import get_reward_model_class


def test_known_names_resolve_and_unknown_ones_are_listed():
    assert get_reward_model_class("hf") is HFRewardModel
    with pytest.raises(
        ValueError,
        match=r"reward_model.name='vllm' is not a known reward model; known: \['hf', "
        r"'sglang'\]",
    ):
        get_reward_model_class("vllm")


def test_sglang_reward_model_imports_and_refuses_to_build():
    cls = get_reward_model_class("sglang")
    with pytest.raises(MissingExtraError, match="sglang"):
        cls(config=None, model_config=None, device_mesh=None)
