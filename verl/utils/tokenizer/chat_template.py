"""What a chat template adds around messages, measured by rendering probe conversations.

Agent loops build a trajectory turn by turn, so they need the template's fixed pieces as token ids: the prefix it
renders before any message (a default system prompt, ``<bos>``), the generation prompt it appends for the model's
turn, and the separator it writes after a turn's closing token. Each is found by rendering small conversations
that differ in one respect and taking the difference, which works for any template without parsing it.
"""

from __future__ import annotations

from typing import Any

from verl.utils.tokenizer.tokenizer import normalize_token_ids

__all__ = [
    "apply_chat_template",
    "extract_system_prompt_and_generation",
    "initialize_system_prompt",
    "initialize_turn_separator",
]


def _ids(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs
    )
    return normalize_token_ids(rendered)


def initialize_system_prompt(tokenizer: Any, **apply_chat_template_kwargs: Any) -> list[int]:
    """The ids a template renders before the first message (e.g. Qwen's default system turn); [] if none.

    One empty user turn renders as ``prefix + turn``; two render as ``prefix + turn + turn``. Their length
    difference is one turn, and cutting one turn off the first rendering leaves the prefix.
    """
    user = {"role": "user", "content": ""}
    one = _ids(tokenizer, [user], False, **apply_chat_template_kwargs)
    two = _ids(tokenizer, [user, user], False, **apply_chat_template_kwargs)
    turn = len(two) - len(one)
    if turn <= 0:
        return []
    return one[:-turn]


def extract_system_prompt_and_generation(
    tokenizer: Any, **apply_chat_template_kwargs: Any
) -> tuple[list[int], list[int]]:
    """``(prefix, generation_prompt)``: :func:`initialize_system_prompt`, and the ids
    ``add_generation_prompt=True`` appends after the last message (e.g. ``<|im_start|>assistant\\n``)."""
    prefix = initialize_system_prompt(tokenizer, **apply_chat_template_kwargs)
    user = [{"role": "user", "content": ""}]
    plain = _ids(tokenizer, user, False, **apply_chat_template_kwargs)
    with_prompt = _ids(tokenizer, user, True, **apply_chat_template_kwargs)
    return prefix, with_prompt[len(plain) :]


def _eos_ids(tokenizer: Any) -> set[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:  # a processor wraps the tokenizer that knows its EOS
        eos = getattr(getattr(tokenizer, "tokenizer", None), "eos_token_id", None)
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def initialize_turn_separator(tokenizer: Any, **apply_chat_template_kwargs: Any) -> list[int]:
    """The ids a template writes after a turn's closing token and before the next turn (Qwen: ``"\\n"``).

    The model stops at the closing token and never generates the separator, so an agent loop appending the next
    turn must add it back. Two user turns with different bodies share their trailing run (closing token +
    separator); the separator is what follows the last EOS-like token in it. A user turn is used because an
    assistant turn may carry reasoning scaffolding. Returns [] when the template cannot be probed.
    """
    rendered = None
    for body_empty, body_full in (("", "x"), ([{"type": "text", "text": ""}], [{"type": "text", "text": "x"}])):
        try:  # some processors only accept content as a list of typed parts
            rendered = (
                _ids(tokenizer, [{"role": "user", "content": body_empty}], False, **apply_chat_template_kwargs),
                _ids(tokenizer, [{"role": "user", "content": body_full}], False, **apply_chat_template_kwargs),
            )
            break
        except Exception:  # noqa: BLE001 - any template failure means "try the other content form"
            continue
    if rendered is None:
        return []
    empty, full = rendered
    common = 0
    while common < min(len(empty), len(full)) and empty[-1 - common] == full[-1 - common]:
        common += 1
    tail = empty[len(empty) - common :]
    if not tail:
        return []
    eos = _eos_ids(tokenizer)
    closing = [i for i, token in enumerate(tail) if token in eos]
    return tail[closing[-1] + 1 :] if closing else tail[1:]


def _strip_prefix(output: Any, prefix: Any, tokenize: bool, return_dict: bool) -> Any:
    if not tokenize:
        return output[len(prefix) :]
    if not return_dict:
        nested = bool(output) and isinstance(output[0], list)
        out, pre = (output[0], prefix[0]) if nested else (output, prefix)
        return out[len(pre) :]
    out = dict(output)
    cut = dict(prefix)["input_ids"].shape[1]
    for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
        if key in out:
            out[key] = out[key][:, cut:]
    return out


def apply_chat_template(
    processor: Any,
    messages: list[dict[str, Any]],
    *,
    tokenize: bool = True,
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    return_dict: bool = False,
    **kwargs: Any,
) -> Any:
    """``processor.apply_chat_template(messages, ...)``, also for templates that refuse a conversation without a
    user message (Qwen3.5 rendering a lone tool result): such a conversation is rendered after an empty user turn,
    and that turn's rendering is cut off the result."""
    common = {"tokenize": tokenize, "tools": tools, "return_dict": return_dict, **kwargs}
    try:
        return processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **common)
    except Exception:
        if any(m.get("role") == "user" for m in messages):
            raise
    dummy = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
    prefix = processor.apply_chat_template(dummy, add_generation_prompt=False, **common)
    output = processor.apply_chat_template(
        dummy + list(messages), add_generation_prompt=add_generation_prompt, **common
    )
    return _strip_prefix(output, prefix, tokenize, return_dict)
