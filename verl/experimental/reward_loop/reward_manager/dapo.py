"""DAPORewardManager (reward loop): the naive score plus DAPO's soft overlong punishment.

Options come from ``reward.reward_kwargs`` as in verl: ``overlong_buffer_cfg`` (``enable``, ``len``,
``penalty_factor``, ``log``) and ``max_resp_len`` (default here: ``data.max_response_length``). The penalty is
:func:`verl.workers.reward_manager.dapo.overlong_penalty`, shared with the batch DAPO manager.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.reward_loop.reward_manager.base import RawRewardFn, split_score
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.reward_manager.dapo import OverlongBufferConfig, overlong_penalty

__all__ = ["DAPORewardManager"]


@register("dapo")
class DAPORewardManager(NaiveRewardManager):
    """See the module docstring; a misconfigured buffer is refused at construction, naming the key."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
    ) -> None:
        super().__init__(config, tokenizer, compute_score, reward_router_address, reward_model_tokenizer)
        kwargs = self.settings.reward.reward_kwargs
        buffer = omega_conf_to_dataclass(
            kwargs.get("overlong_buffer_cfg") or {},
            OverlongBufferConfig,
            path="reward.reward_kwargs.overlong_buffer_cfg",
        )
        self.overlong_enable = buffer.enable
        self.overlong_len = buffer.len
        self.overlong_penalty_factor = buffer.penalty_factor
        self.overlong_log = buffer.log
        max_resp_len = kwargs.get("max_resp_len")
        if max_resp_len is None:
            max_resp_len = self.settings.data.max_response_length
        self.max_resp_len = int(max_resp_len)
        if self.overlong_enable:
            if not 0 < self.overlong_len <= self.max_resp_len:
                raise ValueError(
                    f"reward.reward_kwargs.overlong_buffer_cfg.len must be in (0, max_resp_len={self.max_resp_len}], "
                    f"got {self.overlong_len}"
                )

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        sample = await self.read_sample(data)
        result = await self.call_compute_score(sample, **self.router_kwargs())
        score, extra = split_score(result)
        if self.overlong_enable:
            penalty = overlong_penalty(
                sample.response_length, self.max_resp_len, self.overlong_len, self.overlong_penalty_factor
            )
            score += penalty
            if self.overlong_log:
                extra["overlong_reward"] = penalty
                extra["overlong"] = penalty < 0
        return {"reward_score": score, "reward_extra_info": extra}
