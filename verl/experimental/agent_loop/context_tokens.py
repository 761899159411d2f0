"""Building a trajectory's tokens turn by turn (verl's "continuous token" helpers of ``AgentLoopBase``).

A trajectory is one growing list of token ids, ``runtime_token_ids``: the prompt, then every turn appended. Beside
it run ``response_mask`` (one entry per token after the prompt: 1 for the model's tokens, 0 for inserted ones) and
optionally ``response_logprobs`` (0.0 for inserted tokens). The prompt is therefore always
``runtime_token_ids[:len(runtime_token_ids) - len(response_mask)]``.

- :meth:`ChatRenderer.initial_tokens`: the first prompt, the chat template's rendering of the messages (and tools).
- :func:`merge_assistant_tokens`: a model turn, appended exactly as the engine produced it (mask 1).
- :meth:`ChatRenderer.merge_context`: messages added after a model turn (tool results, user turns), rendered as the
  chat template continues a conversation and appended with mask 0. The template's fixed prefix (what it renders
  before any message, e.g. ``<bos>`` or a default system turn) is rendered once and cut off every continuation.
  The appended block is compared with the template's rendering of the whole conversation
  (:mod:`.tokenization_check`); a difference is reported in the result, never "fixed".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.tokenization_check import TemplateMismatch, check_inserted_turn, render_ids

__all__ = ["ChatRenderer", "MergeResult", "merge_assistant_tokens"]


@dataclass
class MergeResult:
    """The trajectory's token ids after a merge, what the merge appended, and -- for inserted messages -- where the
    appended block differs from the chat template's rendering of the whole conversation (None: it agrees or was not
    checked)."""

    token_ids: list[int]
    appended: list[int] = field(default_factory=list)
    mismatch: TemplateMismatch | None = None


def _extend_logprobs(logprobs: list[float] | None, values: list[float] | None, count: int) -> list[float] | None:
    if logprobs is None or values is None:
        return None
    if len(values) != count:
        raise ValueError(f"{len(values)} log-probs for {count} appended tokens")
    return [*logprobs, *(float(v) for v in values)]


def merge_assistant_tokens(
    runtime_token_ids: list[int],
    assistant_token_ids: list[int],
    response_mask: list[int],
    response_logprobs: list[float] | None = None,
    assistant_logprobs: list[float] | None = None,
) -> tuple[MergeResult, list[int], list[float] | None]:
    """Append a model turn (mask 1). Log-probs are kept only while every turn has them."""
    tokens = [int(t) for t in assistant_token_ids]
    merged = MergeResult([*runtime_token_ids, *tokens], tokens)
    return (
        merged,
        [*response_mask, *([1] * len(tokens))],
        _extend_logprobs(response_logprobs, assistant_logprobs, len(tokens)),
    )


class ChatRenderer:
    """The chat template of one tokenizer with fixed template arguments (``data.apply_chat_template_kwargs``).

    Args:
        tokenizer: the model's tokenizer (its ``apply_chat_template``).
        chat_template_kwargs: extra arguments of every rendering (e.g. ``enable_thinking``).
        sanity_check_mode: ``rollout.multi_turn.tokenization_sanity_check_mode`` for :meth:`merge_context`.
    """

    def __init__(
        self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None, sanity_check_mode: str = "disable"
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.sanity_check_mode = sanity_check_mode
        self._prefix: list[int] | None = None

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return render_ids(
            self.tokenizer,
            list(messages),
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            **self.chat_template_kwargs,
        )

    def initial_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The first prompt: ``messages`` rendered with the generation prompt."""
        return self.render(messages, tools, add_generation_prompt=True)

    @property
    def template_prefix(self) -> list[int]:
        """What the template renders before any message (a message without a role renders as nothing)."""
        if self._prefix is None:
            self._prefix = render_ids(self.tokenizer, [{}], add_generation_prompt=False, **self.chat_template_kwargs)
        return self._prefix

    def continuation_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """``new_messages`` rendered as the template continues a conversation, up to the next generation prompt."""
        ids = render_ids(self.tokenizer, list(new_messages), add_generation_prompt=True, **self.chat_template_kwargs)
        prefix = self.template_prefix
        if ids[: len(prefix)] != prefix:
            raise ValueError(
                "the chat template does not render new messages after its fixed prefix "
                f"(render of [{{}}] = {prefix[:16]}...); this tokenizer's chat_template cannot be used incrementally"
            )
        return ids[len(prefix) :]

    def merge_context(
        self,
        previous_messages: list[dict[str, Any]],
        updated_messages: list[dict[str, Any]],
        runtime_token_ids: list[int],
        response_mask: list[int],
        response_logprobs: list[float] | None = None,
        tools: list[dict[str, Any]] | None = None,
        render_new: Callable[[list[dict[str, Any]]], list[int]] | None = None,
    ) -> tuple[MergeResult, list[int], list[float] | None]:
        """Append the messages ``updated_messages`` adds to ``previous_messages`` (mask 0, log-prob 0.0).

        ``render_new`` tokenizes the new messages (default :meth:`continuation_ids`). The block is checked against
        the template's rendering of the whole conversation when the conversation has its prompt messages (a
        trajectory started from raw ids has nothing to render).
        """
        new_messages = list(updated_messages[len(previous_messages) :])
        if not new_messages:
            return MergeResult(list(runtime_token_ids)), list(response_mask), response_logprobs
        appended = [int(t) for t in (render_new or self.continuation_ids)(new_messages)]
        mismatch = None
        has_prompt = any(m.get("role") != "assistant" for m in previous_messages[:1])
        if self.sanity_check_mode != "disable" and has_prompt and previous_messages[-1].get("role") == "assistant":
            model_turn = _last_model_turn(runtime_token_ids, response_mask)

            def render(messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
                return self.render(messages, tools, **kwargs)

            mismatch = check_inserted_turn(
                self.tokenizer,
                self.sanity_check_mode,
                render,
                list(previous_messages),
                new_messages,
                model_turn,
                appended,
            )
        merged = MergeResult([*runtime_token_ids, *appended], appended, mismatch)
        logprobs = None if response_logprobs is None else [*response_logprobs, *([0.0] * len(appended))]
        return merged, [*response_mask, *([0] * len(appended))], logprobs


def _last_model_turn(runtime_token_ids: list[int], response_mask: list[int]) -> list[int]:
    """The trailing run of model tokens (mask 1) of the trajectory: the latest model turn."""
    count = 0
    for value in reversed(response_mask):
        if value != 1:
            break
        count += 1
    return list(runtime_token_ids[len(runtime_token_ids) - count :]) if count else []
