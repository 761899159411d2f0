"""The recipe's agent loop: one model turn, tagged so the trainer can tell its rows apart."""

from __future__ import annotations

import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

AGENT_NAME = "digit_agent"


@register(AGENT_NAME)
class DigitAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids = list(kwargs["raw_prompt_ids"])
        output = await self.server_manager.generate(
            request_id=uuid.uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        response_ids = list(output.token_ids)[: self.response_length]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            response_logprobs=output.log_probs[: len(response_ids)] if output.log_probs else None,
            num_turns=2,
            extra_fields={"recipe_agent": AGENT_NAME},
        )
