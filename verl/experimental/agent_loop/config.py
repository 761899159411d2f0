"""How the agent-loop layer reads the trainer config: only the ``rollout``, ``model``, ``data`` and ``reward``
groups, each converted to its typed dataclass so a bad value fails with its dotted key.

The flattened layout (``rollout``, ``model`` at the top) is this project's; a config in verl's nesting
(``actor_rollout_ref.rollout``, ``actor_rollout_ref.model``), as verl-style agent loops and tests build it, is read
the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from verl.trainer.config.data_config import DataConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RewardConfig, RolloutConfig
from verl.workers.fsdp.worker_config import has_group, read_group

__all__ = [
    "SAMPLING_META_KEYS",
    "as_data_config",
    "data_group",
    "derived_once",
    "model_group",
    "reward_group",
    "reward_in_loop_enabled",
    "rollout_group",
    "sampling_params_for",
]

# meta_info keys the trainer sets (validation) that override the configured sampling parameters
SAMPLING_META_KEYS = ("temperature", "top_p", "top_k", "do_sample")

T = TypeVar("T")


# (config object, what) -> a value derived from it. Every agent-loop instance (one per sample) reads the config,
# and a DictConfig read costs tens of microseconds (converting a group, milliseconds): at hundreds of samples that
# was most of the layer's overhead. Configs are not changed once a run has built them.
_DERIVED: dict[tuple[int, str], tuple[Any, Any]] = {}
_DERIVED_CACHE_SIZE = 64


def derived_once(config: Any, what: str, build: Callable[[Any], T]) -> T:
    """``build(config)``, computed once per config object (and ``what``, which names the derived value)."""
    key = (id(config), what)
    cached = _DERIVED.get(key)
    if cached is not None and cached[0] is config:
        return cached[1]
    value = build(config)
    if len(_DERIVED) >= _DERIVED_CACHE_SIZE:
        _DERIVED.clear()
    _DERIVED[key] = (config, value)  # holding config keeps its id from being reused
    return value


def rollout_group(config: Any) -> RolloutConfig:
    """The typed ``rollout`` group of ``config`` (converted once per config object)."""
    if isinstance(config, RolloutConfig):
        return config
    return derived_once(config, "rollout", _read_rollout)


def _read_rollout(config: Any) -> RolloutConfig:
    return read_group(_holder(config, "rollout"), "rollout", RolloutConfig, required=True)


def _holder(config: Any, name: str) -> Any:
    """The mapping that holds group ``name``: ``config`` itself, or its ``actor_rollout_ref`` (verl's nesting)."""
    if has_group(config, name) or not has_group(config, "actor_rollout_ref"):
        return config
    nested = config["actor_rollout_ref"] if hasattr(config, "keys") else config.actor_rollout_ref
    return nested if has_group(nested, name) else config


def model_group(config: Any) -> HFModelConfig:
    return read_group(_holder(config, "model"), "model", HFModelConfig, required=True)


def data_group(config: Any) -> DataConfig:
    """The typed ``data`` group of ``config`` (defaults when it has none; converted once per config object)."""
    return derived_once(config, "data", lambda c: read_group(c, "data", DataConfig))


def as_data_config(data: Any) -> DataConfig:
    """A ``data`` group given on its own (a DictConfig or dict) as its dataclass (converted once per object)."""
    if isinstance(data, DataConfig):
        return data
    return derived_once(
        data, "data_config", lambda d: omega_conf_to_dataclass(d, DataConfig, path="data", keep_unknown=True)
    )


def reward_group(config: Any) -> RewardConfig:
    return read_group(config, "reward", RewardConfig)


def reward_in_loop_enabled(config: Any, override: bool | None = None) -> bool:
    """Whether each trajectory is scored in the agent loop as it finishes.

    ``override`` (the manager's ``reward_in_loop`` argument) wins; otherwise ``reward.launch_reward_fn_async`` turns
    it on, unless a reward model is enabled (its worker writes ``rm_scores`` later in the step).
    """
    if override is not None:
        return bool(override)
    if not has_group(config, "reward"):
        return False
    reward = reward_group(config)
    return bool(reward.launch_reward_fn_async) and not bool(reward.reward_model.enable)


def sampling_params_for(rollout: RolloutConfig, meta_info: dict[str, Any]) -> dict[str, Any]:
    """Per-request sampling parameters: the rollout config's, ``val_kwargs`` when ``meta_info['validate']``, then
    explicit meta_info values (temperature, top_p, top_k, do_sample) as the trainer sets them."""
    source = rollout.val_kwargs if meta_info.get("validate") else rollout
    params: dict[str, Any] = {
        "temperature": float(source.temperature),
        "top_p": float(source.top_p),
        "top_k": int(source.top_k),
        "do_sample": bool(source.do_sample),
        "max_tokens": int(rollout.response_length),
        "logprobs": bool(rollout.calculate_log_probs),
        "ignore_eos": bool(rollout.ignore_eos),
    }
    for key in SAMPLING_META_KEYS:
        if meta_info.get(key) is not None:
            params[key] = meta_info[key]
    return params
