"""Trainer-side reward wiring: build the configured reward manager, load a user scoring function, score a batch.

Config (group ``reward``; verl's legacy ``reward_model.reward_manager`` / ``custom_reward_function`` keys are mapped
there by the config layer, and are also read here when a raw legacy config comes in):

    reward.reward_manager: naive | batch | dapo | <registered name>
    reward.reward_kwargs: extra constructor arguments of the manager (e.g. dapo's overlong_buffer_cfg)
    reward.custom_reward_function.{path, name, reward_kwargs}: a user function replacing default_compute_score
    reward.num_workers / reward.timeout_s: scoring processes and the per-sample limit
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.import_utils import load_extern_object
from verl.workers.reward_manager import get_reward_manager_cls

__all__ = ["CustomRewardFn", "compute_reward", "get_custom_reward_fn", "load_reward_manager"]

logger = logging.getLogger(__name__)

DEFAULT_NUM_WORKERS = 2
DEFAULT_TIMEOUT_S = 300.0


class CustomRewardFn:
    """A scoring function defined in a user file, callable like the function itself.

    It pickles as ``(path, name, kwargs)`` and re-imports the file on first use, so it can be sent to the scoring
    processes (a function object from a file loaded by path would not unpickle there). ``kwargs`` are bound like
    ``functools.partial``: ``reward.custom_reward_function.reward_kwargs``.
    """

    def __init__(self, path: str, name: str, kwargs: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.name = name
        self.kwargs = dict(kwargs or {})
        self._fn: Any = None

    @property
    def fn(self) -> Any:
        if self._fn is None:
            fn = load_extern_object(
                self.path, self.name, config_key="reward.custom_reward_function.path", what="reward function"
            )
            if not callable(fn):
                raise TypeError(
                    f"reward function {self.name!r} in {self.path!r} (reward.custom_reward_function.name) is not "
                    f"callable: {fn!r}"
                )
            self._fn = fn
        return self._fn

    def warm_up(self) -> None:
        """Import the file now (scoring processes call this before taking work)."""
        self.fn  # noqa: B018

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **{**self.kwargs, **kwargs})

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "kwargs": self.kwargs, "_fn": None}

    def __repr__(self) -> str:
        return f"CustomRewardFn(path={self.path!r}, name={self.name!r})"


def _section(config: Any, key: str) -> Any:
    if config is None:
        return None
    try:
        return config.get(key)
    except AttributeError:
        return getattr(config, key, None)


def _reward_config(config: Any) -> Any:
    """The ``reward`` group of a full trainer config, or ``config`` itself when it is that group."""
    reward = _section(config, "reward")
    if reward is not None:
        return reward
    if _section(config, "reward_manager") is not None:
        return config
    legacy = _section(config, "reward_model")
    return legacy if legacy is not None else {}


def get_custom_reward_fn(config: Any) -> CustomRewardFn | None:
    """The function ``reward.custom_reward_function.path``/``name`` names, or ``None`` when no path is set.

    The file is imported here, in the driver, so a wrong path or name fails at start-up with the culprit named.
    """
    section = _section(_reward_config(config), "custom_reward_function")
    if section is None:
        section = _section(config, "custom_reward_function")  # legacy top-level group
    path = _section(section, "path")
    if not path:
        return None
    name = _section(section, "name") or "compute_score"
    kwargs = _section(section, "reward_kwargs") or {}
    path = str(path)
    if os.path.isfile(os.path.expanduser(path)):
        # Absolute, so scoring processes find it even if the driver changes directory later.
        path = os.path.abspath(os.path.expanduser(path))
    fn = CustomRewardFn(path, str(name), dict(kwargs))
    fn.warm_up()  # import now: errors belong at start-up, not in a scoring process
    logger.info("using custom reward function %r from %s", name, path)
    return fn


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int = 0, **reward_kwargs: Any) -> Any:
    """Build the manager ``reward.reward_manager`` names.

    Constructor arguments: the custom function (if any) as ``compute_score``, ``data.reward_fn_key``,
    ``reward.num_workers``/``timeout_s``, ``reward.reward_kwargs`` and then ``reward_kwargs`` given here (these win).
    A manager that takes ``max_resp_len`` (dapo) gets ``data.max_response_length`` unless it is given.
    """
    reward_cfg = _reward_config(config)
    name = _section(reward_cfg, "reward_manager") or "naive"
    cls = get_reward_manager_cls(name)
    kwargs: dict[str, Any] = dict(_section(reward_cfg, "reward_kwargs") or {})
    kwargs.update(reward_kwargs)
    compute_score = get_custom_reward_fn(config)
    if compute_score is not None:
        kwargs.setdefault("compute_score", compute_score)
    data_cfg = _section(config, "data")
    reward_fn_key = _section(data_cfg, "reward_fn_key") or "data_source"
    kwargs.setdefault("reward_fn_key", reward_fn_key)
    num_workers = _section(reward_cfg, "num_workers")
    timeout_s = _section(reward_cfg, "timeout_s")
    kwargs.setdefault("num_workers", DEFAULT_NUM_WORKERS if num_workers is None else int(num_workers))
    kwargs.setdefault("timeout_s", DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s))
    params = inspect.signature(cls).parameters
    if "max_resp_len" in params and kwargs.get("max_resp_len") is None:
        max_len = _section(data_cfg, "max_response_length")
        if max_len is not None:
            kwargs["max_resp_len"] = int(max_len)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            raise TypeError(
                f"reward manager {name!r} does not accept {unknown} (reward.reward_kwargs); "
                f"it takes {sorted(k for k in params if k not in ('self', 'tokenizer'))}"
            )
    return cls(tokenizer=tokenizer, num_examine=num_examine, **kwargs)


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
