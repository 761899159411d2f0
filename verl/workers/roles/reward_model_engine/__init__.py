"""verl 0.6's ``verl.workers.roles.reward_model_engine``: the reward-model class behind ``reward_model.name``.

``hf`` is this package's transformers scorer (:class:`~verl.workers.reward_model.HFRewardModel`, built with
``HFRewardModel.from_config(reward.reward_model)``); ``sglang`` is verl's SGLang-served reward model, which imports
and raises ``MissingExtraError`` when built.
"""

from __future__ import annotations

import importlib

__all__ = ["get_reward_model_class"]

# reward_model.name -> "module:class"
_REWARD_MODEL_CLASSES = {
    "hf": "verl.workers.reward_model.hf_reward_model:HFRewardModel",
    "sglang": "verl.workers.reward_model.sglang_reward_model:SGLangRewardModel",
}


def get_reward_model_class(reward_model_name: str) -> type:
    """The reward-model class registered for ``reward_model_name``; an unknown name is a ``ValueError`` listing the
    known ones."""
    target = _REWARD_MODEL_CLASSES.get(reward_model_name)
    if target is None:
        raise ValueError(
            f"reward_model.name={reward_model_name!r} is not a known reward model; known: "
            f"{sorted(_REWARD_MODEL_CLASSES)}"
        )
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
