"""verl 0.7-0.8 kept the chat-template probes in ``verl.utils.chat_template``; they now live in
:mod:`verl.utils.tokenizer.chat_template`. This module keeps the old import path working."""

from verl.utils.tokenizer.chat_template import (
    apply_chat_template,
    extract_system_prompt_and_generation,
    initialize_system_prompt,
    initialize_turn_separator,
)

__all__ = [
    "apply_chat_template",
    "extract_system_prompt_and_generation",
    "initialize_system_prompt",
    "initialize_turn_separator",
]
