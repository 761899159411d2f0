"""Small helpers of verl's agent-loop package: config file paths, and gpt-oss tool-response formatting.

gpt-oss's chat template can only render a tool response after the assistant message holding its call, so a loop that
appends tool responses on their own writes them in harmony format itself (:func:`build_gpt_oss_tool_response_text`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "add_generation_prompt_for_gpt_oss",
    "build_gpt_oss_tool_response_text",
    "format_gpt_oss_tool_response_manually",
    "resolve_config_path",
]


def resolve_config_path(config_path: str | os.PathLike, must_exist: bool = True) -> str:
    """An existing absolute path for ``config_path``: itself when absolute, else the first of the working directory
    and the project root (the folder holding the ``verl`` package) that has it. Ray workers on other nodes may run
    in another directory, so a path relative to the checkout still resolves there. With ``must_exist=False`` a path
    found nowhere comes back unchanged (for the caller's own error, naming its config key)."""
    path = Path(os.fspath(config_path)).expanduser()
    if path.is_absolute():
        return str(path)
    project_root = Path(__file__).resolve().parents[3]
    candidates = [Path.cwd() / path, project_root / path]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate.resolve())
    if not must_exist:
        return os.fspath(config_path)
    raise FileNotFoundError(
        f"config file {os.fspath(config_path)!r} not found; looked in {', '.join(str(c) for c in candidates)}"
    )


def format_gpt_oss_tool_response_manually(tool_response: str, tool_call_name: str) -> str:
    """One tool response as gpt-oss's harmony format writes it (from the function to the assistant)."""
    return f"<|start|>functions.{tool_call_name} to=assistant<|channel|>commentary<|message|>{tool_response}<|end|>"


def add_generation_prompt_for_gpt_oss(message_content: str) -> str:
    """``message_content`` followed by the start of the assistant's next message."""
    return f"{message_content}<|start|>assistant"


def build_gpt_oss_tool_response_text(messages: Sequence[dict[str, Any]], tool_call_names: Sequence[str]) -> str:
    """Tool messages (answering the calls named ``tool_call_names``, in order) in harmony format, then the
    generation prompt."""
    if len(messages) != len(tool_call_names):
        raise ValueError(f"{len(messages)} tool messages for {len(tool_call_names)} tool call names")
    body = "".join(
        format_gpt_oss_tool_response_manually(message["content"], name)
        for message, name in zip(messages, tool_call_names)
    )
    return add_generation_prompt_for_gpt_oss(body)
