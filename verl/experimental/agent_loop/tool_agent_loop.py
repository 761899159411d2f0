"""ToolAgentLoop (``tool_agent``): the model calls tools, reads their answers, and goes on until it is done.

One trajectory, token in, token out:

1. The prompt is the sample's ``raw_prompt`` rendered with the tool schemas (the chat template prints them in the
   system turn); without ``raw_prompt``, ``raw_prompt_ids`` as they are.
2. The model generates a turn; its tokens are kept exactly as sampled (mask 1, with their log-probs).
3. The turn is parsed (``rollout.multi_turn.format``, default ``hermes``). The first
   ``multi_turn.max_parallel_calls`` calls run concurrently; each answer is cut to
   ``multi_turn.max_tool_response_length`` characters, rendered through the chat template as tool messages and
   appended with mask 0 (log-prob 0.0). Calls beyond the limit are answered with an error, not run.
4. A turn without calls ends the trajectory -- unless the sample has an interaction, whose user turn (mask 0)
   continues it.
5. The loop also stops at ``multi_turn.max_assistant_turns`` model turns, ``max_user_turns`` tool/user turns, and
   when the response reaches ``rollout.response_length`` tokens (the last inserted turn is cut to fit).

With ``multi_turn.use_inference_chat_template=true`` every later model turn is prompted, as an inference server
would prompt it, with the chat template's rendering of the conversation so far (which may rewrite earlier turns,
e.g. drop their reasoning) instead of the tokens appended so far. The trajectory follows what the engine read: from
the first token where that rendering differs, the rendering's tokens replace the trajectory's, with mask 0, so every
token trained on (mask 1) was sampled after exactly the tokens before it (``rerendered_prompt_changes`` counts it).

Whatever the model writes never crashes the loop: unreadable call JSON, an unknown tool, arguments that do not fit
the schema, a tool that raises, and a tool exceeding its ``timeout_s`` each become an ``Error: ...`` tool message
the model reads, and a count in the trajectory's metrics (``ToolAgentLoopMetrics.counters``, also the
``tool_call_counts`` extra field).

Each appended tool/user turn is checked against the chat template's rendering of the whole conversation
(``multi_turn.tokenization_sanity_check_mode``, :mod:`~verl.experimental.agent_loop.tokenization_check`): a
difference is logged as a warning naming the request and the response position, and counted
(``tokenization_mismatches``); the trajectory is never changed by the check.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.interaction import (
    BaseInteraction,
    initialize_interactions_from_config,
    select_interaction,
)
from verl.experimental.agent_loop.registry import register
from verl.experimental.agent_loop.tokenization_check import MISMATCH_COUNTER, check_inserted_turn, describe, render_ids
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolCallError, ToolParser, get_tool_parser
from verl.tools.base_tool import BaseTool
from verl.tools.registry import initialize_tools_from_config

__all__ = ["COUNTER_KEYS", "ToolAgentLoop", "ToolAgentLoopMetrics", "truncate_text"]

logger = logging.getLogger(__name__)

# per-trajectory counters, reported in ToolAgentLoopMetrics.counters and extra_fields["tool_call_counts"]
COUNTER_KEYS = (
    "tool_calls",  # calls the model made (readable or not)
    "tool_calls_ok",  # calls a tool answered
    "tool_call_errors",  # every call answered with an error (the sum of the kinds below)
    "tool_parse_errors",  # unreadable call (bad JSON, missing name, unclosed tag)
    "tool_unknown_errors",  # no tool of that name
    "tool_argument_errors",  # arguments that do not fit the tool's schema
    "tool_exceptions",  # the tool raised
    "tool_timeouts",  # the tool ran past its timeout_s
    "tool_calls_skipped",  # beyond max_parallel_calls in one turn
    MISMATCH_COUNTER,  # inserted turns whose ids differ from the chat template's rendering of the whole conversation
    "rerendered_prompt_changes",  # use_inference_chat_template: prompts whose rendering differed from the trajectory
)
_ERROR_KINDS = ("tool_parse_errors", "tool_unknown_errors", "tool_argument_errors", "tool_exceptions",
                "tool_timeouts", "tool_calls_skipped")


@dataclass
class ToolAgentLoopMetrics(AgentLoopMetrics):
    """Timings plus the counters of :data:`COUNTER_KEYS`."""

    counters: dict[str, float] = field(default_factory=dict)


def truncate_text(text: str, limit: int, side: str = "middle") -> str:
    """Cut ``text`` to about ``limit`` characters, marking the cut (``side``: which part is dropped)."""
    if len(text) <= limit:
        return text
    marker = "...(truncated)..."
    if side == "left":
        return marker + text[-limit:]
    if side == "right":
        return text[:limit] + marker
    head = limit - limit // 2
    return text[:head] + marker + (text[-(limit // 2):] if limit // 2 else "")


@dataclass
class _Setup:
    """What every ToolAgentLoop of one process and config shares: tools, parser, interactions, template prefix."""

    tools: dict[str, BaseTool]
    tool_schemas: list[dict[str, Any]]
    parser: ToolParser
    interactions: dict[str, BaseInteraction]
    template_prefix: list[int]


def _build_setup(multi_turn: Any, tokenizer: Any) -> _Setup:
    tools: dict[str, BaseTool] = {}
    if multi_turn.tool_config_path:
        for tool in initialize_tools_from_config(multi_turn.tool_config_path):
            tools[tool.name] = tool
    interactions = {}
    if multi_turn.interaction_config_path:
        interactions = initialize_interactions_from_config(multi_turn.interaction_config_path)
    return _Setup(
        tools=tools,
        tool_schemas=[tool.get_openai_tool_schema().to_dict() for tool in tools.values()],
        parser=get_tool_parser(multi_turn.format, tokenizer),
        interactions=interactions,
        # a message without a role renders as the template's fixed prefix (e.g. <bos> or a default system turn)
        template_prefix=render_ids(tokenizer, [{}], add_generation_prompt=False),
    )


def _rebase(traj: _Trajectory, context: list[int]) -> bool:
    """Make ``prompt_ids + response_ids`` equal ``context``: keep the tokens before the first difference, take the
    rest from ``context`` with mask 0 and log-prob 0.0 (the engine did not sample them after what precedes them).
    Returns whether anything changed."""
    current = traj.prompt_ids + traj.response_ids
    same = next((i for i, (a, b) in enumerate(zip(current, context)) if a != b), min(len(current), len(context)))
    if same == len(current) == len(context):
        return False
    prompt_kept = min(same, len(traj.prompt_ids))
    kept = same - prompt_kept  # response tokens before the difference
    rest = context[prompt_kept + kept:]
    traj.prompt_ids = traj.prompt_ids[:prompt_kept]
    traj.response_ids = traj.response_ids[:kept] + rest
    traj.response_mask = traj.response_mask[:kept] + [0] * len(rest)
    if traj.log_probs is not None:
        traj.log_probs = traj.log_probs[:kept] + [0.0] * len(rest)
    return True


def _label(request_id: str, kwargs: dict[str, Any]) -> str:
    """``request <id>`` plus the sample's ``index`` / ``uid`` columns when the row has them."""
    known = [f"{key} {kwargs[key]}" for key in ("index", "uid") if kwargs.get(key) is not None]
    return f"request {request_id}" + (f" (sample {', '.join(known)})" if known else "")


def _row_mapping(kwargs: dict[str, Any], key: str) -> dict[str, Any]:
    """``kwargs[key]`` (a dataset passthrough column) or ``extra_info[key]``, as a dict."""
    value = kwargs.get(key)
    if value is None:
        extra = kwargs.get("extra_info")
        value = extra.get(key) if isinstance(extra, dict) else None
    return dict(value) if isinstance(value, dict) else {}


@dataclass
class _Trajectory:
    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    label: str = ""  # names the request (and sample) in warnings
    from_messages: bool = True  # the prompt is the chat template's rendering of ``messages`` (not raw ids)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    turn_start: int = 0  # where the latest model turn begins in response_ids
    log_probs: list[float] | None = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    counters: collections.Counter = field(default_factory=collections.Counter)
    tool_rewards: list[float] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)
    generate_s: float = 0.0
    tools_s: float = 0.0
    stop_reason: str | None = None
    termination: str = "done"


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Multi-turn tool use; configured by ``rollout.multi_turn`` (see the module docstring)."""

    _setups: dict[tuple, _Setup] = {}

    @classmethod
    def _setup_key(cls, multi_turn: Any, tokenizer: Any) -> tuple:
        return (multi_turn.tool_config_path, multi_turn.interaction_config_path, multi_turn.format, id(tokenizer))

    @classmethod
    def init_class(cls, trainer_config: Any, tokenizer: Any, processor: Any = None, **kwargs: Any) -> None:
        from verl.experimental.agent_loop.config import rollout_group

        multi_turn = rollout_group(trainer_config).multi_turn
        key = cls._setup_key(multi_turn, tokenizer)
        if key not in cls._setups:
            cls._setups[key] = _build_setup(multi_turn, tokenizer)

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(trainer_config, server_manager, tokenizer, processor, **kwargs)
        self.multi_turn = self.rollout_config.multi_turn
        key = self._setup_key(self.multi_turn, tokenizer)
        if key not in self._setups:
            self._setups[key] = _build_setup(self.multi_turn, tokenizer)
        setup = self._setups[key]
        self.tools = setup.tools
        self.tool_schemas = setup.tool_schemas
        self.tool_parser = setup.parser
        self.interactions = setup.interactions
        self.template_prefix = setup.template_prefix
        self.max_assistant_turns = self.multi_turn.max_assistant_turns
        self.max_user_turns = self.multi_turn.max_user_turns
        self.max_parallel_calls = int(self.multi_turn.max_parallel_calls)
        self.max_tool_response_length = int(self.multi_turn.max_tool_response_length)
        self.truncate_side = self.multi_turn.tool_response_truncate_side
        self.sanity_check_mode = self.multi_turn.tokenization_sanity_check_mode
        self.use_inference_chat_template = bool(self.multi_turn.use_inference_chat_template)

    # ------------------------------------------------------------------ run

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in (kwargs.get("raw_prompt") if kwargs.get("raw_prompt") is not None else [])]
        prompt_ids = await self._prompt_ids(kwargs, messages)
        request_id = uuid.uuid4().hex
        traj = _Trajectory(prompt_ids=prompt_ids, messages=messages, label=_label(request_id, kwargs),
                           from_messages=bool(messages))
        tools_kwargs = _row_mapping(kwargs, "tools_kwargs")
        interaction_kwargs = _row_mapping(kwargs, "interaction_kwargs")
        interaction = select_interaction(self.interactions, interaction_kwargs)
        instances: dict[str, str] = {}
        creating: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        interaction_id = None
        final_rewards: dict[str, float] = {}
        try:
            if interaction is not None:
                interaction_id = await interaction.start_interaction(request_id, **interaction_kwargs)
            while True:
                await self._rerender_prompt(traj)
                await self._generate(traj, request_id, sampling_params)
                if traj.termination != "running":
                    break
                parsed = await self.tool_parser.extract_tool_calls(traj.response_ids[traj.turn_start:])
                if parsed.has_calls:
                    await self._answer_calls(traj, parsed.items, tools_kwargs, instances, creating)
                elif interaction is not None:
                    await self._interact(traj, interaction, interaction_id, interaction_kwargs)
                else:
                    traj.termination = "done"
                if traj.termination != "running":
                    break
        finally:
            final_rewards = await self._release(instances, tools_kwargs)
            if interaction is not None and interaction_id is not None:
                await interaction.finalize_interaction(interaction_id)
        return self._output(traj, final_rewards)

    async def _prompt_ids(self, kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> list[int]:
        if messages:
            return await asyncio.to_thread(self._render, messages, add_generation_prompt=True)
        if self.use_inference_chat_template:
            raise ValueError(
                "rollout.multi_turn.use_inference_chat_template=true renders each turn's prompt from the chat "
                "messages, but this tool_agent sample has none (no 'raw_prompt'; set data.return_raw_chat=true, or "
                "set the key to false to append tokens to raw_prompt_ids)"
            )
        ids = kwargs.get("raw_prompt_ids")
        if ids is None:
            raise KeyError("tool_agent sample has neither 'raw_prompt' nor 'raw_prompt_ids'; keep them in the batch")
        return [int(t) for t in ids]

    # ------------------------------------------------------------------ steps

    async def _rerender_prompt(self, traj: _Trajectory) -> None:
        """With ``use_inference_chat_template``, make the next prompt the chat template's rendering of the messages
        (a no-op before the first model turn: the prompt already is that rendering)."""
        if not self.use_inference_chat_template or traj.assistant_turns == 0:
            return
        context = await asyncio.to_thread(self._render, traj.messages, add_generation_prompt=True)
        if _rebase(traj, context):
            traj.counters["rerendered_prompt_changes"] += 1

    async def _generate(self, traj: _Trajectory, request_id: str, sampling_params: dict[str, Any]) -> None:
        """One model turn; sets ``traj.termination`` to "running" when the loop may go on."""
        budget = self.response_length - len(traj.response_ids)
        if budget <= 0:
            traj.termination = "length"
            return
        params = dict(sampling_params)
        params["max_tokens"] = min(int(params.get("max_tokens") or budget), budget)
        start = time.perf_counter()
        out = await self.server_manager.generate(request_id, prompt_ids=traj.prompt_ids + traj.response_ids,
                                                 sampling_params=params)
        traj.generate_s += time.perf_counter() - start
        tokens = [int(t) for t in out.token_ids[:budget]]
        traj.turn_start = len(traj.response_ids)
        traj.response_ids += tokens
        traj.response_mask += [1] * len(tokens)
        if traj.log_probs is not None and out.log_probs is not None:
            traj.log_probs += [float(x) for x in out.log_probs[:budget]]
        else:
            traj.log_probs = None
        traj.assistant_turns += 1
        traj.stop_reason = out.stop_reason
        traj.messages.append({"role": "assistant",
                              "content": self.tokenizer.decode(tokens, skip_special_tokens=True)})
        if out.stop_reason == "aborted":
            traj.termination = "aborted"
        elif len(traj.response_ids) >= self.response_length:
            traj.termination = "length"
        elif self.max_assistant_turns and traj.assistant_turns >= self.max_assistant_turns:
            traj.termination = "max_assistant_turns"
        elif self.max_user_turns and traj.user_turns >= self.max_user_turns:
            traj.termination = "max_user_turns"
        else:
            traj.termination = "running"

    def _render(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        """``messages`` through the chat template with this loop's tool schemas (as the prompt was rendered)."""
        return render_ids(self.tokenizer, messages, tools=self.tool_schemas or None, **kwargs)

    def _inserted_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """``new_messages`` rendered as the chat template continues a conversation (without its fixed prefix)."""
        ids = render_ids(self.tokenizer, new_messages, add_generation_prompt=True)
        prefix = self.template_prefix
        if ids[: len(prefix)] != prefix:
            raise ValueError(
                "tool_agent: the chat template does not render new messages after its fixed prefix "
                f"(render of [{{}}] = {prefix[:16]}...); the tokenizer's chat_template cannot be used incrementally"
            )
        return ids[len(prefix):]

    async def _check_inserted(self, traj: _Trajectory, new_messages: list[dict[str, Any]], ids: list[int]) -> None:
        """Warn about and count a block that differs from the template's rendering of the whole conversation.
        Samples given only as ``raw_prompt_ids`` have no conversation to render and are not checked."""
        if self.sanity_check_mode == "disable" or not traj.from_messages:
            return
        mismatch = await asyncio.to_thread(
            check_inserted_turn, self.tokenizer, self.sanity_check_mode, self._render, list(traj.messages),
            new_messages, traj.response_ids[traj.turn_start:], ids,
        )
        if mismatch is None:
            return
        traj.counters[MISMATCH_COUNTER] += 1
        logger.warning(
            "tool_agent: tokenization mismatch (rollout.multi_turn.tokenization_sanity_check_mode=%s) in %s: "
            "inserted turn %d differs from response position %d on: %s",
            self.sanity_check_mode, traj.label, traj.user_turns + 1, len(traj.response_ids) + mismatch.position,
            describe(self.tokenizer, mismatch),
        )

    async def _append_inserted(self, traj: _Trajectory, new_messages: list[dict[str, Any]]) -> None:
        """Render ``new_messages`` as the chat template continues a conversation, append them with mask 0."""
        ids = self._inserted_ids(new_messages)
        await self._check_inserted(traj, new_messages, ids)
        budget = self.response_length - len(traj.response_ids)
        if len(ids) >= budget:
            ids = ids[:budget]
            traj.termination = "length"
        traj.response_ids += ids
        traj.response_mask += [0] * len(ids)
        if traj.log_probs is not None:
            traj.log_probs += [0.0] * len(ids)
        traj.messages.extend(new_messages)
        traj.user_turns += 1

    async def _answer_calls(self, traj: _Trajectory, items: list[FunctionCall | ToolCallError],
                            tools_kwargs: dict[str, Any], instances: dict[str, str],
                            creating: dict[str, asyncio.Lock]) -> None:
        traj.counters["tool_calls"] += len(items)
        run_now, skipped = items[: self.max_parallel_calls], items[self.max_parallel_calls:]
        start = time.perf_counter()
        answers = await asyncio.gather(*(self._call(traj, item, tools_kwargs, instances, creating)
                                         for item in run_now))
        traj.tools_s += time.perf_counter() - start
        for _ in skipped:
            traj.counters["tool_calls_skipped"] += 1
        answers += [f"Error: call skipped; at most {self.max_parallel_calls} tool call(s) per turn"] * len(skipped)
        texts = [truncate_text(a, self.max_tool_response_length, self.truncate_side) for a in answers]
        await self._append_inserted(traj, [{"role": "tool", "content": text} for text in texts])

    async def _call(self, traj: _Trajectory, item: FunctionCall | ToolCallError, tools_kwargs: dict[str, Any],
                    instances: dict[str, str], creating: dict[str, asyncio.Lock]) -> str:
        """Answer one call; every failure becomes an error text and a counter, never an exception."""
        if isinstance(item, ToolCallError):
            traj.counters["tool_parse_errors"] += 1
            return f"Error: {item.message}"
        tool = self.tools.get(item.name)
        if tool is None:
            traj.counters["tool_unknown_errors"] += 1
            known = ", ".join(sorted(self.tools)) or "none"
            return f"Error: unknown tool {item.name!r}; available tools: {known}"
        problem = tool.tool_schema.check_arguments(item.arguments)
        if problem is not None:
            traj.counters["tool_argument_errors"] += 1
            return f"Error: {item.name}: {problem}"
        task = asyncio.ensure_future(self._execute(tool, item, tools_kwargs, instances, creating))
        done, _ = await asyncio.wait({task}, timeout=tool.timeout_s)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            traj.counters["tool_timeouts"] += 1
            return f"Error: tool {item.name!r} timed out after {tool.timeout_s:g}s"
        try:
            text, reward = task.result()
        except Exception as exc:  # a tool's bug is the tool's problem: report it to the model and in metrics
            traj.counters["tool_exceptions"] += 1
            logger.warning("tool %r raised %s: %s", item.name, type(exc).__name__, exc)
            return f"Error: tool {item.name!r} failed: {type(exc).__name__}: {exc}"
        traj.counters["tool_calls_ok"] += 1
        traj.tool_rewards.append(reward)
        return text

    async def _execute(self, tool: BaseTool, item: FunctionCall, tools_kwargs: dict[str, Any],
                       instances: dict[str, str], creating: dict[str, asyncio.Lock]) -> tuple[str, float]:
        settings = tools_kwargs.get(tool.name) or {}
        async with creating[tool.name]:
            if tool.name not in instances:
                instance_id, _ = await tool.create(uuid.uuid4().hex, **dict(settings.get("create_kwargs") or {}))
                instances[tool.name] = instance_id
        response, reward, _metrics = await tool.execute(instances[tool.name], item.arguments,
                                                        **dict(settings.get("execute_kwargs") or {}))
        text = response.text if hasattr(response, "text") else str(response)
        return str(text), float(reward or 0.0)

    async def _interact(self, traj: _Trajectory, interaction: BaseInteraction, instance_id: str,
                        interaction_kwargs: dict[str, Any]) -> None:
        if self.max_user_turns and traj.user_turns >= self.max_user_turns:
            traj.termination = "max_user_turns"
            return
        finish, content, score, _extra = await interaction.generate_response(instance_id, list(traj.messages),
                                                                           **interaction_kwargs)
        traj.turn_scores.append(float(score))
        if finish:
            traj.termination = "interaction_done"
            return
        await self._append_inserted(traj, [{"role": "user", "content": str(content)}])

    async def _release(self, instances: dict[str, str], tools_kwargs: dict[str, Any]) -> dict[str, float]:
        """calc_reward then release every instance this trajectory created; failures are logged, not raised."""
        rewards: dict[str, float] = {}
        for name, instance_id in instances.items():
            tool = self.tools[name]
            settings = tools_kwargs.get(name) or {}
            try:
                rewards[name] = float(await tool.calc_reward(instance_id,
                                                             **dict(settings.get("calc_reward_kwargs") or {})))
            except Exception as exc:
                logger.warning("tool %r calc_reward raised %s: %s", name, type(exc).__name__, exc)
            try:
                await tool.release(instance_id, **dict(settings.get("release_kwargs") or {}))
            except Exception as exc:
                logger.warning("tool %r release raised %s: %s", name, type(exc).__name__, exc)
        return rewards

    # ------------------------------------------------------------------ output

    def _output(self, traj: _Trajectory, final_rewards: dict[str, float]) -> AgentLoopOutput:
        counters = {key: float(traj.counters.get(key, 0)) for key in COUNTER_KEYS}
        counters["tool_call_errors"] = float(sum(traj.counters.get(kind, 0) for kind in _ERROR_KINDS))
        metrics = ToolAgentLoopMetrics(generate_sequences=traj.generate_s, tool_calls=traj.tools_s,
                                       counters=counters)
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids[: self.response_length],
            response_mask=traj.response_mask[: self.response_length],
            response_logprobs=None if traj.log_probs is None else traj.log_probs[: self.response_length],
            num_turns=traj.assistant_turns + traj.user_turns + 1,
            metrics=metrics,
            extra_fields={
                "stop_reason": traj.stop_reason,
                "termination_reason": traj.termination,
                "tool_call_counts": counters,
                "tool_rewards": list(traj.tool_rewards),
                "tool_final_rewards": final_rewards,
                "turn_scores": list(traj.turn_scores),
            },
        )
