"""Trainer-side reward wiring: build the configured reward manager, load a user scoring function, score a batch.

Config (group ``reward``; verl's legacy ``reward_model.reward_manager`` / ``custom_reward_function`` keys are mapped
there by the config layer, and are also read here when a raw legacy config comes in):

    reward.reward_manager: naive | batch | dapo | prime | <registered name>
                           (verl's {name, source: register | importlib, module.path} mapping is read as well)
    reward.reward_kwargs: extra constructor arguments of the manager (e.g. dapo's overlong_buffer_cfg)
    reward.custom_reward_function.{path, name, reward_kwargs}: a user function replacing default_compute_score
    reward.num_workers / reward.timeout_s: scoring processes and the per-sample limit

A name is looked up among the batch managers (:mod:`verl.workers.reward_manager`) first, then among verl's
reward-loop managers (:mod:`verl.experimental.reward_loop.reward_manager`, ``run_single`` per sample), which the
trainer drives through :class:`~verl.experimental.reward_loop.adapter.RewardLoopAdapter`. The custom reward function's
file is imported before the lookup, so a manager registered in that file is found.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, overload

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict

from verl.base_config import BaseConfig
from verl.protocol import DataProto
from verl.trainer.config.compose import flattened_config
from verl.trainer.config.data_config import DataConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.import_utils import load_extern_object
from verl.utils.reward_runner import CustomRewardFn
from verl.workers.config import RewardConfig
from verl.workers.config.reward import RewardManagerConfig
from verl.workers.reward_manager import REWARD_MANAGER_REGISTRY, AbstractRewardManager

__all__ = [
    "AbstractRewardManager",
    "CustomRewardFn",
    "RewardSettings",
    "build_reward_loop_manager",
    "compute_reward",
    "compute_reward_async",
    "extract_reward",
    "scored_batch",
    "get_custom_reward_fn",
    "load_reward_manager",
    "resolve_reward_manager_cls",
    "reward_settings",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardSettings:
    """The typed groups the reward code reads, built once from whatever config form it receives
    (:func:`reward_settings`). ``manager`` is ``reward.reward_manager`` as verl's ``{source, name, module}`` block;
    ``rate_limit`` the options of the ``rate_limited`` manager."""

    reward: RewardConfig
    manager: RewardManagerConfig
    data: DataConfig
    rate_limit: Any


def reward_settings(config: Any) -> RewardSettings:
    """:class:`RewardSettings` of a trainer config (typed, or a DictConfig/dict in this package's or verl's layout,
    translated first), of a ``reward`` group alone (data defaults), or of ``None`` (all defaults)."""
    if config is None:
        config = {}
    elif isinstance(config, RewardConfig):
        config = {"reward": config}
    elif isinstance(config, DictConfig):
        config = flattened_config(config)
    elif "reward" not in config and not isinstance(config, BaseConfig):  # verl's top-level reward keys
        config = flattened_config(OmegaConf.create(dict(config)))
    if "reward" in config:
        node = config["reward"]
    else:
        node = config if "reward_manager" in config else {}
    reward, manager, rate = _typed_reward(node)
    data = config["data"] if "data" in config else {}
    return RewardSettings(
        reward, manager, omega_conf_to_dataclass(data, DataConfig, path="data", keep_unknown=True), rate
    )


def _typed_reward(node: Any) -> tuple[RewardConfig, RewardManagerConfig, Any]:
    """The ``reward`` group split into :class:`RewardConfig`, its manager block and the ``rate_limited`` manager's
    options (verl keeps those in the same group)."""
    from verl.experimental.reward_loop.reward_manager.limited import RateLimitConfig

    rate_keys = {f.name for f in dataclasses.fields(RateLimitConfig) if not f.name.startswith("_")}
    if isinstance(node, BaseConfig):
        reward = omega_conf_to_dataclass(node, RewardConfig, path="reward", keep_unknown=True)
        rate = {key: value for key, value in reward.to_dict().items() if key in rate_keys}
        manager = RewardManagerConfig(name=reward.reward_manager)
    else:
        raw = (
            cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))
            if isinstance(node, DictConfig)
            else dict(node or {})
        )
        rate = {key: raw.pop(key) for key in rate_keys & set(raw)}
        block = raw.pop("reward_manager", None)
        if isinstance(block, Mapping):
            manager = omega_conf_to_dataclass(block, RewardManagerConfig, path="reward.reward_manager")
        else:
            manager = RewardManagerConfig(name=block) if block else RewardManagerConfig()
        reward = omega_conf_to_dataclass(
            {**raw, "reward_manager": manager.name}, RewardConfig, path="reward", keep_unknown=True
        )
    return reward, manager, omega_conf_to_dataclass(rate, RateLimitConfig, path="reward")


def get_custom_reward_fn(config: Any) -> CustomRewardFn | None:
    """The function ``reward.custom_reward_function.path``/``name`` names, or ``None`` when no path is set.

    The file is imported here, in the driver, so a wrong path or name fails at start-up with the culprit named.
    """
    custom = _settings(config).reward.custom_reward_function
    if not custom.path:
        return None
    path = str(custom.path)
    if os.path.isfile(os.path.expanduser(path)):
        # Absolute, so scoring processes find it even if the driver changes directory later.
        path = os.path.abspath(os.path.expanduser(path))
    fn = CustomRewardFn(path, str(custom.name), dict(custom.reward_kwargs))
    fn.warm_up()  # import now: errors belong at start-up, not in a scoring process
    logger.info("using custom reward function %r from %s", custom.name, path)
    return fn


def _settings(config: Any) -> RewardSettings:
    return config if isinstance(config, RewardSettings) else reward_settings(config)


def resolve_reward_manager_cls(config: Any) -> type:
    """The reward-loop manager class ``reward.reward_manager`` names, not instantiated (verl's resolution).

    ``source: register`` looks the name up in the reward-loop registry; ``source: importlib`` loads the class from
    ``reward.reward_manager.module.path``. A name that only a batch manager has (``batch``, ``prime``) is refused
    here: the callers of this function need ``run_single``/``assemble_rm_scores``.
    """
    from verl.experimental.reward_loop.reward_manager import REWARD_LOOP_MANAGER_REGISTRY

    manager = _settings(config).manager
    name = manager.name
    if manager.source == "importlib":
        module_path = manager.module.path if manager.module is not None else None
        if not module_path:
            raise ValueError("reward.reward_manager.source=importlib needs reward.reward_manager.module.path")
        return load_extern_object(
            module_path, name, config_key="reward.reward_manager.module.path", what="reward manager class"
        )
    if name in REWARD_LOOP_MANAGER_REGISTRY:
        return REWARD_LOOP_MANAGER_REGISTRY[name]
    batch_only = " (a batch manager: load it with load_reward_manager)" if name in REWARD_MANAGER_REGISTRY else ""
    raise ValueError(
        f"unknown reward-loop manager {name!r}{batch_only} (reward.reward_manager); registered: "
        f"{sorted(REWARD_LOOP_MANAGER_REGISTRY)}"
    )


def build_reward_loop_manager(config: Any, tokenizer: Any, **reward_kwargs: Any) -> Any:
    """Instantiate the reward-loop manager of :func:`resolve_reward_manager_cls` as verl does:
    ``cls(config=, tokenizer=, compute_score=<custom function or default_compute_score>, **reward_kwargs)``."""
    from verl.utils.reward_score import default_compute_score

    settings = _settings(config)
    compute_score = get_custom_reward_fn(settings) or default_compute_score
    cls = resolve_reward_manager_cls(settings)
    return cls(config=config, tokenizer=tokenizer, compute_score=compute_score, **reward_kwargs)


def _build_batch_manager(
    cls: type,
    settings: RewardSettings,
    tokenizer: Any,
    num_examine: int,
    compute_score: Any,
    reward_kwargs: dict,
) -> Any:
    reward = settings.reward
    kwargs: dict[str, Any] = {**reward.reward_kwargs, **reward_kwargs}
    if compute_score is not None:
        kwargs.setdefault("compute_score", compute_score)
    kwargs.setdefault("reward_fn_key", settings.data.reward_fn_key)
    kwargs.setdefault("num_workers", reward.num_workers)
    kwargs.setdefault("timeout_s", reward.timeout_s)
    params = inspect.signature(cls).parameters
    if "max_resp_len" in params and kwargs.get("max_resp_len") is None:
        kwargs["max_resp_len"] = settings.data.max_response_length
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            raise TypeError(
                f"reward manager {settings.manager.name!r} does not accept {unknown} (reward.reward_kwargs); "
                f"it takes {sorted(k for k in params if k not in ('self', 'tokenizer'))}"
            )
    return cls(tokenizer=tokenizer, num_examine=num_examine, **kwargs)


def _build_loop_adapter(
    cls: type,
    config: Any,
    settings: RewardSettings,
    tokenizer: Any,
    num_examine: int,
    compute_score: Any,
    reward_kwargs: dict,
) -> Any:
    from verl.experimental.reward_loop.adapter import RewardLoopAdapter, build_on_reward_loop
    from verl.utils.reward_score import default_compute_score

    manager = build_on_reward_loop(
        cls, config=config, tokenizer=tokenizer, compute_score=compute_score or default_compute_score, **reward_kwargs
    )
    return RewardLoopAdapter(manager, num_examine=num_examine, timeout_s=settings.reward.timeout_s)


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int = 0, **reward_kwargs: Any) -> Any:
    """Build the manager ``reward.reward_manager`` names, as a callable ``manager(data, return_dict=False)``.

    A batch manager gets: the custom function (if any) as ``compute_score``, ``data.reward_fn_key``,
    ``reward.num_workers``/``timeout_s``, ``reward.reward_kwargs`` and then ``reward_kwargs`` given here (these win);
    one that takes ``max_resp_len`` (dapo) gets ``data.max_response_length`` unless it is given. A reward-loop manager
    is built as verl builds it (``config``, ``tokenizer``, ``compute_score``, ``reward_kwargs``) and wrapped in a
    :class:`~verl.experimental.reward_loop.adapter.RewardLoopAdapter` (``reward.timeout_s`` per sample).
    """
    from verl.experimental.reward_loop.reward_manager import RewardManagerBase

    settings = _settings(config)  # once here: the readers below take the typed groups
    compute_score = get_custom_reward_fn(settings)  # first: the user's file may register the manager
    name, source = settings.manager.name, settings.manager.source
    if source == "register" and name in REWARD_MANAGER_REGISTRY:
        cls = REWARD_MANAGER_REGISTRY[name]
    else:
        try:
            cls = resolve_reward_manager_cls(settings)
        except ValueError:
            if source != "register":
                raise
            raise ValueError(
                f"unknown reward manager {name!r} (reward.reward_manager); registered batch managers: "
                f"{sorted(REWARD_MANAGER_REGISTRY)}, registered reward-loop managers: {_loop_names()}"
            ) from None
    if isinstance(cls, type) and issubclass(cls, RewardManagerBase):
        return _build_loop_adapter(cls, config, settings, tokenizer, num_examine, compute_score, reward_kwargs)
    return _build_batch_manager(cls, settings, tokenizer, num_examine, compute_score, reward_kwargs)


def _loop_names() -> list[str]:
    from verl.experimental.reward_loop.reward_manager import REWARD_LOOP_MANAGER_REGISTRY

    return sorted(REWARD_LOOP_MANAGER_REGISTRY)


@overload
def compute_reward(
    data: DataProto, reward_fn: Any, return_metrics: Literal[False] = ...
) -> tuple[torch.Tensor, dict[str, list]]: ...


@overload
def compute_reward(
    data: DataProto, reward_fn: Any, return_metrics: Literal[True]
) -> tuple[torch.Tensor, dict[str, list], dict[str, float]]: ...


@overload
def compute_reward(
    data: DataProto, reward_fn: Any, return_metrics: bool
) -> tuple[torch.Tensor, dict[str, list]] | tuple[torch.Tensor, dict[str, list], dict[str, float]]: ...


def compute_reward(
    data: DataProto, reward_fn: Any, return_metrics: bool = False
) -> tuple[torch.Tensor, dict[str, list]] | tuple[torch.Tensor, dict[str, list], dict[str, float]]:
    """Score ``data`` with a reward manager: ``(reward_tensor, reward_extra_infos)`` and, with ``return_metrics``,
    the manager's ``reward/*`` metrics (failed and timed-out sample counts) as a third element.

    A plain callable that does not take ``return_dict`` is called as ``reward_fn(data)`` and returns the tensor.
    """
    try:
        result = reward_fn(data, return_dict=True)
    except TypeError as err:
        if "return_dict" not in str(err):
            raise
        result = {"reward_tensor": reward_fn(data)}
    if isinstance(result, torch.Tensor):
        result = {"reward_tensor": result}
    reward_tensor = result["reward_tensor"]
    extra = dict(result.get("reward_extra_info") or {})
    if return_metrics:
        return reward_tensor, extra, dict(result.get("reward_metrics") or {})
    return reward_tensor, extra


class _LazyRayTask:
    """A Ray remote function created on first use: this module is imported by every scoring process (it unpickles
    :class:`CustomRewardFn`), which should not pay for importing Ray."""

    def __init__(self, fn: Callable[..., Any], name: str, **options: Any) -> None:
        functools.update_wrapper(self, fn)
        self.__name__ = self.__qualname__ = name
        self._fn = fn
        self._options = options
        self._task: Any = None

    def _remote_function(self) -> Any:
        if self._task is None:
            import ray

            self._task = ray.remote(**self._options)(self._fn)
        return self._task

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote_function().remote(*args, **kwargs)

    def options(self, **options: Any) -> Any:
        return self._remote_function().options(**options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__name__} is a Ray task; call {self.__name__}.remote(...)")


def _compute_reward_task(
    data: DataProto, config: Any = None, tokenizer: Any = None, reward_fn: Any = None
) -> tuple[torch.Tensor, dict[str, list]]:
    """:func:`compute_reward` as a Ray task (``compute_reward_async.remote(data, reward_fn=...)``), so scoring
    overlaps with the next stage of the step. Without ``reward_fn`` the manager is built from ``config`` and
    ``tokenizer`` (verl deprecated that form)."""
    if reward_fn is None:
        if config is None or tokenizer is None:
            raise ValueError("compute_reward_async: pass reward_fn, or both config and tokenizer")
        logger.warning("compute_reward_async(config=..., tokenizer=...) is deprecated in verl; pass reward_fn")
        reward_fn = load_reward_manager(config, tokenizer, num_examine=0)
    return compute_reward(data, reward_fn)


compute_reward_async = _LazyRayTask(_compute_reward_task, "compute_reward_async", num_cpus=1)


def scored_batch(rm_scores: torch.Tensor, extra_columns: dict[str, Any]) -> DataProto:
    """What a reward loop returns and :func:`extract_reward` reads: ``rm_scores`` and one object column per
    reward-extra key, the keys listed in ``meta_info["reward_extra_keys"]``."""
    columns = {}
    for key, values in extra_columns.items():
        column = np.empty(len(values), dtype=object)
        column[:] = list(values)
        columns[key] = column
    return DataProto(
        batch=TensorDict({"rm_scores": rm_scores}, batch_size=rm_scores.shape[0]),
        non_tensor_batch=columns,
        meta_info={"reward_extra_keys": list(columns)},
    )


def extract_reward(batch: DataProto) -> tuple[torch.Tensor, dict[str, Any]]:
    """``(rm_scores, {key: column})`` of a batch the reward loop already scored: the extra-info columns are the
    non-tensor keys listed in ``meta_info["reward_extra_keys"]``."""
    if batch.batch is None or "rm_scores" not in batch.batch.keys():
        present = [] if batch.batch is None else list(batch.batch.keys())
        raise KeyError(f"extract_reward: the batch has no 'rm_scores' (it has {present}); score it first")
    keys = batch.meta_info.get("reward_extra_keys", []) or []
    missing = [key for key in keys if key not in batch.non_tensor_batch]
    if missing:
        raise KeyError(f"extract_reward: meta_info['reward_extra_keys'] lists {missing}, absent from the batch")
    return batch.batch["rm_scores"], {key: batch.non_tensor_batch[key] for key in keys}
