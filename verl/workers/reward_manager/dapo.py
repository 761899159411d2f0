"""DAPORewardManager: the naive manager plus DAPO's soft overlong punishment.

Responses that run into the last ``overlong_buffer.len`` tokens before ``max_resp_len`` lose reward linearly:

    expected_len = max_resp_len - buffer_len
    exceed_len   = response_length - expected_len
    penalty      = min(-exceed_len / buffer_len * penalty_factor, 0)
    reward       = score + penalty

so a response of ``expected_len`` tokens or fewer is untouched and one of exactly ``max_resp_len`` tokens loses
``penalty_factor``. This discourages truncated answers without the cliff of a hard length penalty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.base_config import BaseConfig
from verl.protocol import DataProto
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register

__all__ = ["DAPORewardManager", "OverlongBufferConfig", "overlong_penalty"]


@dataclass
class OverlongBufferConfig(BaseConfig):
    """DAPO's ``overlong_buffer``: the penalty of the module docstring when ``enable``; ``log`` adds per-sample
    ``overlong_reward`` and ``overlong`` to ``reward_extra_info``."""

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0
    log: bool = False


def overlong_penalty(response_length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """The (non-positive) length penalty of the module docstring."""
    exceed_len = response_length - (max_resp_len - buffer_len)
    return min(-exceed_len / buffer_len * penalty_factor, 0.0)


@register("dapo")
class DAPORewardManager(NaiveRewardManager):
    """``overlong_buffer_cfg``: an :class:`OverlongBufferConfig` or a mapping of its keys (an unknown key is refused
    by name). ``max_resp_len`` is ``data.max_response_length``."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Any = None,
        *,
        num_workers: int = 0,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(
            tokenizer, num_examine, compute_score, reward_fn_key, num_workers=num_workers, timeout_s=timeout_s
        )
        cfg = overlong_buffer_cfg
        if not isinstance(cfg, OverlongBufferConfig):
            from verl.utils.config import omega_conf_to_dataclass

            cfg = omega_conf_to_dataclass(cfg or {}, OverlongBufferConfig, path="overlong_buffer_cfg")
        self.overlong_enable = cfg.enable
        self.overlong_len = cfg.len
        self.overlong_penalty_factor = cfg.penalty_factor
        self.overlong_log = cfg.log
        self.max_resp_len = max_resp_len
        if self.overlong_enable:
            if max_resp_len is None:
                raise ValueError(
                    "dapo reward manager: max_resp_len must be set when overlong_buffer_cfg.enable is true"
                )
            if not 0 < self.overlong_len <= max_resp_len:
                raise ValueError(
                    f"dapo reward manager: overlong_buffer_cfg.len must be in (0, max_resp_len={max_resp_len}], "
                    f"got {self.overlong_len}"
                )

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = self.from_rm_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        samples = self.decode(data)
        scores, extras, outcomes = self.score_samples(samples)
        if self.overlong_enable:
            for i, (sample, extra) in enumerate(zip(samples, extras)):
                penalty = overlong_penalty(
                    sample.response_length, self.max_resp_len, self.overlong_len, self.overlong_penalty_factor
                )
                scores[i] += penalty
                if self.overlong_log:
                    extra["overlong_reward"] = penalty
                    extra["overlong"] = penalty < 0
        reward_tensor = self.place_scores(samples, scores, data.batch["responses"].shape[-1])
        self.examine(samples, scores)
        return self.result(reward_tensor, self.collect_extra(extras), self.failure_metrics(outcomes), return_dict)
