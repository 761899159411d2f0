"""RewardManagerBase: verl's reward-loop manager API, which scores ONE sample per ``await run_single(data)``.

Why one sample at a time: in the reward loop a sample is scored as soon as its rollout ends, and slow scorers (LLM
judges, sandboxes, remote verifiers) overlap through asyncio instead of occupying a process each. ``run_single``
gets a one-row :class:`~verl.protocol.DataProto` and returns ``{"reward_score": float, "reward_extra_info": dict}``;
:meth:`RewardManagerBase.assemble_rm_scores` then places the scores of a batch at each row's last response token.

A manager also works where the trainer expects a batch manager (``manager(data, return_dict=True)``): the rows are
scored concurrently on the shared reward loop (:mod:`verl.experimental.reward_loop.adapter`). That is how
``reward.reward_manager=<name registered here>`` runs in ``main_ppo``.

The helpers :meth:`~RewardManagerBase.read_sample`, :meth:`~RewardManagerBase.call_compute_score` and
:func:`split_score` hold what every rule-based manager needs; subclasses combine them in ``run_single``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.ray_utils import get_event_loop

__all__ = ["RawRewardFn", "RewardManagerBase", "SampleInput", "split_score"]

RawRewardFn = Callable[..., Any] | None


@dataclass
class SampleInput:
    """What a scoring function is called with for one sample, plus the valid response length."""

    response_str: str
    response_length: int
    data_source: Any
    ground_truth: Any
    extra_info: dict[str, Any]


def split_score(result: Any) -> tuple[float, dict[str, Any]]:
    """A scoring function's return as ``(score, reward_extra_info)``, the way verl's reward loop reports it.

    A dict must hold ``"score"`` and all its keys (``score`` included) become extra info; a number is the score and
    is reported as ``acc`` as well.
    """
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a reward function returning a dict must include 'score'; got keys {sorted(result)}")
        return float(result["score"]), dict(result)
    score = float(result)
    return score, {"acc": score}


def _is_async(fn: Any) -> bool:
    call = type(fn).__call__ if not inspect.isroutine(fn) and callable(fn) else None
    return inspect.iscoroutinefunction(fn) or (call is not None and inspect.iscoroutinefunction(call))


class RewardManagerBase(ABC):
    """Base of reward-loop managers (register subclasses with
    :func:`verl.experimental.reward_loop.reward_manager.register`).

    Args:
        config: the trainer config (a DictConfig or this package's config), kept as ``self.config``; its typed
            ``reward`` and ``data`` groups are ``self.settings`` (:func:`verl.trainer.ppo.reward.reward_settings`).
        tokenizer: decodes responses.
        compute_score: the scoring function (sync or ``async def``), ``None`` for the manager's default.

    ``init_class`` runs once per class (not per instance) for state all instances share, such as rate limiters.
    """

    _class_initialized: bool = False

    def __init__(self, config: Any, tokenizer: Any, compute_score: RawRewardFn = None) -> None:
        from verl.trainer.ppo.reward import reward_settings

        self.config = config
        self.settings = reward_settings(config)
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        self.reward_fn_key = self.settings.data.reward_fn_key
        self.loop = get_event_loop()
        self.init_class(config, tokenizer)

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        """Set up class-wide state; runs on the first instance of each class (subclasses have their own flag)."""
        if cls.__dict__.get("_class_initialized", False):
            return
        cls._class_initialized = True

    @abstractmethod
    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """Score one sample: ``{"reward_score": float, "reward_extra_info": dict}``."""

    # ------------------------------------------------------------------------------------------------ helpers

    async def read_sample(self, data: DataProto) -> SampleInput:
        """Decode the last row of ``data`` (a multi-sequence output is scored on its last sequence).

        ``extra_info`` is a copy of the row's ``extra_info`` with the agent loop's ``tool_extra_fields`` merged in,
        ``num_turns`` (``__num_turns__``) and ``rollout_reward_scores`` (``reward_scores``) added.
        """
        if len(data) == 0:
            raise ValueError(f"{type(self).__name__}.run_single got an empty batch")
        present = list(data.batch.keys()) if data.batch is not None else []
        for key in ("responses", "attention_mask"):
            if key not in present:
                raise KeyError(f"{type(self).__name__} needs batch key {key!r}; the batch has {present}")
        item = data[len(data) - 1]
        responses = item.batch["responses"]
        length = int(item.batch["attention_mask"][-responses.shape[-1] :].sum())
        ids = responses[:length].tolist()
        non_tensor = item.non_tensor_batch
        if self.reward_fn_key not in non_tensor:
            raise KeyError(
                f"{type(self).__name__} needs non-tensor key {self.reward_fn_key!r} (data.reward_fn_key); "
                f"the row has {sorted(non_tensor)}"
            )
        reward_model = non_tensor.get("reward_model")
        ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        extra_info = dict(non_tensor.get("extra_info") or {})
        tool_fields = non_tensor.get("tool_extra_fields")
        if tool_fields:
            extra_info.update(dict(tool_fields))
        extra_info["num_turns"] = non_tensor.get("__num_turns__")
        extra_info["rollout_reward_scores"] = non_tensor.get("reward_scores") or {}
        decode = functools.partial(self.tokenizer.decode, ids, skip_special_tokens=True)
        response_str = await asyncio.get_running_loop().run_in_executor(None, decode)
        return SampleInput(response_str, length, non_tensor[self.reward_fn_key], ground_truth, extra_info)

    async def call_compute_score(self, sample: SampleInput, **extra_kwargs: Any) -> Any:
        """Call ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``: awaited when it is
        ``async def``, else in a thread so a slow function does not stall the other samples."""
        fn = self.compute_score
        if fn is None:
            raise ValueError(f"{type(self).__name__} has no compute_score")
        kwargs = {
            "data_source": sample.data_source,
            "solution_str": sample.response_str,
            "ground_truth": sample.ground_truth,
            "extra_info": sample.extra_info,
            **extra_kwargs,
        }
        if _is_async(fn):
            return await fn(**kwargs)
        result = await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, **kwargs))
        if inspect.isawaitable(result):  # a sync wrapper around an async function
            result = await result
        return result

    @classmethod
    def assemble_rm_scores(cls, data: DataProto, scores: list[float]) -> torch.Tensor:
        """``[N, response_length]`` float zeros with ``scores[i]`` at row ``i``'s last valid response token."""
        responses = data.batch["responses"]
        if len(scores) != responses.shape[0]:
            raise ValueError(f"assemble_rm_scores: {len(scores)} scores for a batch of {responses.shape[0]} rows")
        prompt_length = data.batch["prompts"].shape[-1] if "prompts" in data.batch.keys() else None
        mask = data.batch["attention_mask"]
        response_mask = mask[:, prompt_length:] if prompt_length is not None else mask[:, -responses.shape[-1] :]
        last = (response_mask.sum(-1) - 1).clamp(min=0).long()
        rm_scores = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        rm_scores[torch.arange(rm_scores.shape[0], device=rm_scores.device), last] = torch.tensor(
            [float(s) for s in scores], dtype=torch.float32, device=rm_scores.device
        )
        return rm_scores

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """Score a whole batch like a batch manager (see :class:`~verl.experimental.reward_loop.adapter.
        RewardLoopAdapter`)."""
        from verl.experimental.reward_loop.adapter import RewardLoopAdapter

        adapter = self.__dict__.get("_batch_adapter")
        if adapter is None:
            adapter = RewardLoopAdapter(self)
            self._batch_adapter = adapter
        return adapter(data, return_dict=return_dict)
