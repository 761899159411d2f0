"""Chat-message schema of verl's multi-turn rollouts (``verl.workers.rollout.schemas.Message``).

A message as the agent loops and tools exchange it: ``role``, ``content`` (text, a content dict or list of content
parts, or a tool's :class:`~verl.tools.schemas.ToolResponse`) and the assistant's ``tool_calls``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from verl.tools.schemas import OpenAIFunctionToolCall, ToolResponse

__all__ = ["Message"]


class Message(BaseModel):
    role: str
    content: str | dict[str, Any] | list[dict[str, Any]] | ToolResponse
    tool_calls: list[OpenAIFunctionToolCall] | None = None
