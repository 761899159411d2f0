"""NaiveRewardManager (reward loop): one rule-based score per sample, from ``compute_score`` or
:func:`verl.utils.reward_score.default_compute_score`."""

from __future__ import annotations

from typing import Any

from verl.experimental.reward_loop.reward_manager.base import RawRewardFn, RewardManagerBase, split_score
from verl.experimental.reward_loop.reward_manager.registry import register
from verl.protocol import DataProto
from verl.utils.reward_score import default_compute_score

__all__ = ["NaiveRewardManager"]


@register("naive")
class NaiveRewardManager(RewardManagerBase):
    """Score = ``compute_score(data_source, solution_str, ground_truth, extra_info)``.

    ``reward_router_address``/``reward_model_tokenizer`` (a served reward model a custom function may query) are
    passed on to ``compute_score`` when an address is given.
    """

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: RawRewardFn = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        self.compute_score = compute_score or default_compute_score
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer

    def router_kwargs(self) -> dict[str, Any]:
        """Extra ``compute_score`` arguments for a custom function that queries a served reward model."""
        if self.reward_router_address is None:
            return {}
        return {
            "reward_router_address": self.reward_router_address,
            "reward_model_tokenizer": self.reward_model_tokenizer,
        }

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        sample = await self.read_sample(data)
        result = await self.call_compute_score(sample, **self.router_kwargs())
        score, extra = split_score(result)
        return {"reward_score": score, "reward_extra_info": extra}
