"""The tool agent loop's tokenization sanity check (``rollout.multi_turn.tokenization_sanity_check_mode``).

The loop builds a trajectory token by token: the model's turns exactly as the engine produced them, and every tool or
user turn rendered by the chat template on its own and appended. A model served by an inference server, and the
same model after training, reads the conversation rendered by the chat template as a whole. Where the two differ
(a template whose turns depend on their neighbours, a separator after the end-of-turn token that the model never
generates, a custom loop that renders a turn without its markup), the policy is trained on sequences it will never
see. The check finds such differences; it never changes the trajectory.

What it compares, for each inserted block: the ids the loop appended after a model turn, against what the template
puts after that model turn when it renders the conversation up to and including the block. The model's own tokens
are left out on purpose: the engine may tokenize its text differently from the tokenizer (merges, special tokens),
which is legitimate. Only the end of the model turn counts: the template closes an assistant turn with some markup
(e.g. ``<|im_end|>\\n``); the part of it the model generated itself (its stop token) is matched against the model's
last tokens, and the part it did not generate must be in the appended block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MISMATCH_COUNTER",
    "SANITY_CHECK_MODES",
    "TemplateMismatch",
    "check_inserted_turn",
    "describe",
    "expected_inserted_ids",
    "render_ids",
]

SANITY_CHECK_MODES = ("strict", "ignore_strippable", "disable")
MISMATCH_COUNTER = "tokenization_mismatches"


def render_ids(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    """Token ids of ``messages`` rendered by the tokenizer's chat template."""
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    return [int(t) for t in ids]


class _NotAPrefix(ValueError):
    """Rendering more messages changed the rendering of the earlier ones (``prefix`` vs ``full``)."""

    def __init__(self, message: str, prefix: list[int], full: list[int]) -> None:
        super().__init__(message)
        self.prefix, self.full = prefix, full


@dataclass
class TemplateMismatch:
    """Where the appended ids first differ from the template's (``position``: offset into the appended block)."""

    position: int
    appended: list[int]
    expected: list[int]
    reason: str = ""


def _after(prefix: list[int], full: list[int], what: str) -> list[int]:
    if full[: len(prefix)] != prefix:
        at = next((i for i, (a, b) in enumerate(zip(prefix, full)) if a != b), min(len(prefix), len(full)))
        raise _NotAPrefix(
            f"the chat template renders the earlier conversation differently once {what} follows it "
            f"(from token {at} of the rendering; e.g. it drops earlier turns' reasoning)",
            prefix,
            full,
        )
    return full[len(prefix) :]


def _stop_tokens_supplied(model_ids: list[int], closing: list[int]) -> int:
    """How many leading tokens of the template's turn closing the model generated itself (at the end of its turn)."""
    for k in range(min(len(closing), len(model_ids)), 0, -1):
        if model_ids[-k:] == closing[:k]:
            return k
    return 0


def expected_inserted_ids(
    render: Callable[..., list[int]],
    history: list[dict[str, Any]],
    new_messages: list[dict[str, Any]],
    model_ids: list[int],
) -> list[int]:
    """What the chat template puts between the model's tokens of ``history[-1]`` (an assistant turn, generated as
    ``model_ids``) and the next generation when it renders ``history + new_messages`` as a whole.

    ``render(messages, add_generation_prompt=...)`` renders with the loop's own template arguments (tools).
    Raises ``ValueError`` when rendering later messages changes the rendering of earlier ones.
    """
    earlier = history[:-1]
    opened = render(earlier, add_generation_prompt=True)
    # the template's closing of an assistant turn: what an empty turn renders after the generation prompt
    closing = _after(
        opened,
        render([*earlier, {"role": "assistant", "content": ""}], add_generation_prompt=False),
        "an assistant turn",
    )
    with_turn = render(history, add_generation_prompt=False)
    block = _after(with_turn, render([*history, *new_messages], add_generation_prompt=True), "the inserted turn")
    return closing[_stop_tokens_supplied(model_ids, closing) :] + block


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _squeeze(tokenizer: Any, ids: list[int]) -> str:
    return "".join(tokenizer.decode(ids, skip_special_tokens=False).split())


def _only_whitespace_differs(tokenizer: Any, a: list[int], b: list[int]) -> bool:
    return _squeeze(tokenizer, a) == _squeeze(tokenizer, b)


def check_inserted_turn(
    tokenizer: Any,
    mode: str,
    render: Callable[..., list[int]],
    history: list[dict[str, Any]],
    new_messages: list[dict[str, Any]],
    model_ids: list[int],
    appended: list[int],
) -> TemplateMismatch | None:
    """Compare one appended block with the template's rendering of the whole conversation (see the module
    docstring); ``None`` when they agree, or differ only in whitespace under ``ignore_strippable``."""
    if mode == "disable":
        return None
    try:
        expected = expected_inserted_ids(render, history, new_messages, model_ids)
    except _NotAPrefix as exc:
        if mode == "ignore_strippable" and _squeeze(tokenizer, exc.full).startswith(_squeeze(tokenizer, exc.prefix)):
            return None  # only whitespace of the earlier conversation changes
        return TemplateMismatch(0, list(appended), [], reason=str(exc))
    except Exception as exc:  # the template refuses the whole conversation: inference would not see this either
        return TemplateMismatch(
            0,
            list(appended),
            [],
            reason=f"the chat template cannot render the whole conversation ({type(exc).__name__}: {exc})",
        )
    at = _first_difference(appended, expected)
    if at is None:
        return None
    if mode == "ignore_strippable" and _only_whitespace_differs(tokenizer, appended, expected):
        return None
    return TemplateMismatch(at, list(appended), expected)


def describe(tokenizer: Any, mismatch: TemplateMismatch, window: int = 12) -> str:
    """A short, readable account of ``mismatch`` for the warning."""
    if mismatch.reason:
        return mismatch.reason
    at = mismatch.position
    appended = tokenizer.decode(mismatch.appended[at : at + window], skip_special_tokens=False)
    expected = tokenizer.decode(mismatch.expected[at : at + window], skip_special_tokens=False)
    return f"appended {appended!r}, the chat template renders the whole conversation as {expected!r}"
