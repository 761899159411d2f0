"""SingleTurnAgentLoop: one prompt, one model turn; the default loop (``single_turn_agent``)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.registry import register
from verl.experimental.agent_loop.weight_versions import merge_version_tags

__all__ = ["SingleTurnAgentLoop", "prompt_ids_of"]


async def prompt_ids_of(
    loop: AgentLoopBase,
    sample: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """The sample's prompt tokens: ``raw_prompt_ids`` when present (the dataset's own rendering, which the
    prompt-length filter measured), else ``raw_prompt`` (chat messages) through the chat template."""
    ids = sample.get("raw_prompt_ids")
    if ids is not None:
        return [int(t) for t in ids]
    messages = sample.get("raw_prompt")
    if messages is None:
        raise KeyError("agent loop sample has neither 'raw_prompt_ids' nor 'raw_prompt'; keep them in the batch")
    return await loop.ct_build_initial_tokens(list(messages), tools=tools)


def request_id_for(loop: AgentLoopBase, priority: Any) -> str:
    """A fresh id per trajectory; under ``rollout.full_determinism`` a stable one derived from the sample."""
    if loop.rollout_config.full_determinism:
        return f"det-{int(priority)}"
    return uuid.uuid4().hex


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """Send the prompt once and return the model's answer (every response token is a model token)."""

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        if kwargs.get("raw_prompt") is not None and self.processor is not None:
            self._assert_mm_supported(bool(await self.process_multi_modal_info(list(kwargs["raw_prompt"]))))
        prompt_ids = await prompt_ids_of(self, kwargs)
        start = time.perf_counter()
        output = await self.server_manager.generate(
            request_id_for(self, priority), prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        elapsed = time.perf_counter() - start
        response_ids = [int(t) for t in output.token_ids[: self.response_length]]
        log_probs = output.log_probs[: self.response_length] if output.log_probs is not None else None
        preempted = getattr(output, "num_preempted", None)
        # turn_scores / tool_rewards keep the columns of a mixed single-turn / tool batch the same
        extra = {"stop_reason": getattr(output, "stop_reason", None), "turn_scores": [], "tool_rewards": []}
        merge_version_tags(extra, getattr(output, "extra", None))
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            response_logprobs=log_probs,
            num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=elapsed, num_preempted=-1 if preempted is None else preempted),
            extra_fields=extra,
        )
