"""SingleTurnAgentLoop: one prompt, one model turn; the default loop (``single_turn_agent``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.registry import register

__all__ = ["SingleTurnAgentLoop", "prompt_ids_of"]


async def prompt_ids_of(tokenizer: Any, sample: dict[str, Any]) -> list[int]:
    """The sample's prompt tokens: ``raw_prompt_ids`` when present, else ``raw_prompt`` (chat messages) through
    the tokenizer's chat template with the generation prompt."""
    ids = sample.get("raw_prompt_ids")
    if ids is not None:
        return [int(t) for t in ids]
    messages = sample.get("raw_prompt")
    if messages is None:
        raise KeyError("agent loop sample has neither 'raw_prompt_ids' nor 'raw_prompt'; keep them in the batch")
    messages = list(messages)
    return await asyncio.to_thread(
        tokenizer.apply_chat_template, messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """Send the prompt once and return the model's answer (every response token is a model token)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids = await prompt_ids_of(self.tokenizer, kwargs)
        request_id = uuid.uuid4().hex
        start = time.perf_counter()
        output = await self.server_manager.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        elapsed = time.perf_counter() - start
        response_ids = list(output.token_ids[: self.response_length])
        log_probs = output.log_probs[: self.response_length] if output.log_probs is not None else None
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            response_logprobs=log_probs,
            num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=elapsed),
            extra_fields={"stop_reason": output.stop_reason},
        )
