"""ToolAgentLoop (``tool_agent``): the model calls tools, reads their answers, and goes on until it is done.

A state machine (verl's): PENDING (build the prompt) -> GENERATING (one model turn) -> PROCESSING_TOOLS (answer its
calls) -> GENERATING ... -> TERMINATED; with an interaction configured, a turn without calls goes to INTERACTING
(a scripted user answers) instead of ending. One trajectory, token in, token out:

1. The prompt is the sample's ``raw_prompt`` rendered with the tool schemas (the chat template prints them in the
   system turn); without ``raw_prompt``, ``raw_prompt_ids`` as they are.
2. The model generates a turn; its tokens are kept exactly as sampled (mask 1, with their log-probs).
3. The turn is parsed (``rollout.multi_turn.format``, default ``hermes``). The first
   ``multi_turn.max_parallel_calls`` calls run concurrently; each answer is cut to
   ``multi_turn.max_tool_response_length`` characters, rendered through the chat template as tool messages (with the
   call's id when the model gave one) and appended with mask 0 (log-prob 0.0). Calls beyond the limit are answered
   with an error, not run.
4. A turn without calls ends the trajectory -- unless the sample has an interaction, whose user turn (mask 0)
   continues it.
5. The loop also stops at ``multi_turn.max_assistant_turns`` model turns, ``max_user_turns`` tool/user turns, and
   when the response reaches ``rollout.response_length`` tokens (the trajectory is cut there).

Tools: the worker passes the tools of ``tool_config_path`` (``BaseTool``: one instance per trajectory and tool,
created on first use with the row's ``tools_kwargs[name]["create_kwargs"]``, scored with ``calc_reward`` and released
when the trajectory ends) and of ``function_tool_path`` (``@function_tool`` functions: called directly, no state).
A row's ``extra_info.tool_selection`` (a list of names) limits the tools it offers.

With ``multi_turn.use_inference_chat_template=true`` every later model turn is prompted, as an inference server
would prompt it, with the chat template's rendering of the conversation so far (which may rewrite earlier turns,
e.g. drop their reasoning) instead of the tokens appended so far. The trajectory follows what the engine read: from
the first token where that rendering differs, the rendering's tokens replace the trajectory's, with mask 0, so every
token trained on (mask 1) was sampled after exactly the tokens before it (``rerendered_prompt_changes`` counts it).

Whatever the model writes never crashes the loop: an unreadable call, unknown tool, arguments that are not JSON or
do not fit the schema, a tool that raises, and a tool exceeding its ``timeout_s`` each become an ``Error: ...`` tool
message the model reads, and a count in the trajectory's metrics (``ToolAgentLoopMetrics.counters``, also the
``tool_call_counts`` extra field).

Each appended tool/user turn is checked against the chat template's rendering of the whole conversation
(``multi_turn.tokenization_sanity_check_mode``, :mod:`~verl.experimental.agent_loop.tokenization_check`): a
difference is logged as a warning naming the request and the response position, and counted
(``tokenization_mismatches``); the trajectory is never changed by the check.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import Field

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, ToolListWrap
from verl.experimental.agent_loop.interaction import (
    BaseInteraction,
    initialize_interactions_from_config,
    select_interaction,
)
from verl.experimental.agent_loop.registry import register
from verl.experimental.agent_loop.tokenization_check import MISMATCH_COUNTER, describe
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.experimental.agent_loop.weight_versions import merge_version_tags
from verl.tools.base_tool import DEFAULT_TOOL_TIMEOUT_S
from verl.tools.function_tool import FunctionTool, normalize_function_tool_return
from verl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)

__all__ = ["COUNTER_KEYS", "AgentData", "AgentState", "ToolAgentLoop", "ToolAgentLoopMetrics", "truncate_text"]

logger = logging.getLogger(__name__)

# per-trajectory counters, reported in ToolAgentLoopMetrics.counters and extra_fields["tool_call_counts"]
COUNTER_KEYS = (
    "tool_calls",  # calls the model made (readable or not)
    "tool_calls_ok",  # calls a tool answered
    "tool_call_errors",  # every call answered with an error (the sum of the kinds below)
    "tool_parse_errors",  # unreadable call, or arguments that are not a JSON object
    "tool_unknown_errors",  # no tool of that name
    "tool_argument_errors",  # arguments that do not fit the tool's schema
    "tool_exceptions",  # the tool raised
    "tool_timeouts",  # the tool ran past its timeout_s
    "tool_calls_skipped",  # beyond max_parallel_calls in one turn
    MISMATCH_COUNTER,  # inserted turns whose ids differ from the chat template's rendering of the whole conversation
    "rerendered_prompt_changes",  # use_inference_chat_template: prompts whose rendering differed from the trajectory
)
_ERROR_KINDS = (
    "tool_parse_errors",
    "tool_unknown_errors",
    "tool_argument_errors",
    "tool_exceptions",
    "tool_timeouts",
    "tool_calls_skipped",
)


class AgentState(Enum):
    PENDING = "pending"
    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    INTERACTING = "interacting"
    TERMINATED = "terminated"


class ToolAgentLoopMetrics(AgentLoopMetrics):
    """Timings plus the counters of :data:`COUNTER_KEYS`."""

    counters: dict[str, float] = Field(default_factory=dict)


def truncate_text(text: str, limit: int, side: str = "middle") -> str:
    """Cut ``text`` to about ``limit`` characters, marking the cut (``side``: which part is dropped)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[len(text) - limit :]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + (text[-half:] if half else "")


class AgentData:
    """The state of one trajectory, passed to the tools (``execute(..., agent_data=...)``) so a tool can read the
    conversation; ``extra_fields`` is free for tools to keep per-trajectory data in (it becomes batch columns).

    ``prompt_ids`` is the whole token sequence so far (prompt and every turn); ``response_mask`` /
    ``response_logprobs`` cover its part after the prompt.
    """

    def __init__(
        self,
        messages: list[dict[str, Any]],
        image_data: list[Any] | None,
        video_data: list[Any] | None,
        audio_data: list[Any] | None,
        mm_processor_kwargs: dict[str, Any] | None,
        metrics: dict[str, Any],
        request_id: str,
        tools_kwargs: dict[str, Any],
    ) -> None:
        self.messages = messages
        self.image_data = image_data
        self.video_data = video_data
        self.audio_data = audio_data
        self.mm_processor_kwargs = mm_processor_kwargs or {}
        self.metrics = metrics
        self.request_id = request_id
        self.tools_kwargs = tools_kwargs
        self.raw_prompt_ids: list[int] | None = None  # the prompt when the row has no chat messages
        self.prompt_ids: list[int] = []
        self.mm_processor_output: list[dict[str, Any]] | None = None
        self.response_ids: list[int] = []  # the latest model turn
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] | None = []  # None once a turn came without log-probs
        self.turn_scores: list[float] = []
        self.tool_rewards: list[float] = []
        self.user_turns = 0
        self.assistant_turns = 0
        self.tool_calls: list[FunctionCall] = []
        self.routed_experts: Any = None
        self.extra_fields: dict[str, Any] = {}
        # this loop's own bookkeeping
        self.counters: collections.Counter = collections.Counter()
        self.label = f"request {request_id}"
        self.stop_reason: str | None = None
        self.termination = "done"
        self.tool_instances: dict[str, str] = {}  # tool name -> instance id (BaseTool, one per trajectory)
        self.instance_locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self.tool_final_rewards: dict[str, float] = {}
        self.interaction: BaseInteraction | None = None
        self.interaction_id: str | None = None
        self.interaction_kwargs: dict[str, Any] = {}
        self._active_tools: dict[str, Any] | None = None
        self._active_tool_schemas: list[dict[str, Any]] | None = None


def _count(agent_data: Any, key: str, amount: int = 1) -> None:
    counters = getattr(agent_data, "counters", None)
    if counters is not None and amount:
        counters[key] += amount


def _add_time(agent_data: Any, key: str, seconds: float) -> None:
    metrics = getattr(agent_data, "metrics", None)
    if isinstance(metrics, dict):
        metrics[key] = metrics.get(key, 0.0) + seconds


def _schema_dict(tool: Any) -> dict[str, Any]:
    return tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)


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


def _rebase(agent_data: AgentData, context: list[int]) -> bool:
    """Make the trajectory's tokens equal ``context``: keep them up to the first difference, take the rest from
    ``context`` with mask 0 and log-prob 0.0 (the engine did not sample them after what precedes them). Returns
    whether anything changed."""
    current = agent_data.prompt_ids
    same = next((i for i, (a, b) in enumerate(zip(current, context)) if a != b), min(len(current), len(context)))
    if same == len(current) == len(context):
        return False
    kept = max(same - (len(current) - len(agent_data.response_mask)), 0)  # response tokens before the difference
    rest = len(context) - same
    agent_data.prompt_ids = list(context)
    agent_data.response_mask = agent_data.response_mask[:kept] + [0] * rest
    if agent_data.response_logprobs is not None:
        agent_data.response_logprobs = agent_data.response_logprobs[:kept] + [0.0] * rest
    return True


async def _invoke(
    tool: Any, arguments: dict[str, Any], tools_kwargs: dict[str, Any], agent_data: Any
) -> tuple[ToolResponse, float, dict[str, Any]]:
    """Run one call. A function tool is just called; a ``BaseTool`` executes on the trajectory's instance of it
    (created on first use), or -- called outside a trajectory (no instance table) -- on an instance of its own."""
    if isinstance(tool, FunctionTool):
        return normalize_function_tool_return(await tool.call(arguments))
    settings = (tools_kwargs or {}).get(tool.name) or {}
    create_kwargs = dict(settings.get("create_kwargs") or {})
    execute_kwargs = dict(settings.get("execute_kwargs") or {})
    instances = getattr(agent_data, "tool_instances", None)
    if instances is None:
        instance_id, _ = await tool.create(create_kwargs=create_kwargs)
        try:
            return normalize_function_tool_return(
                await tool.execute(instance_id, arguments, agent_data=agent_data, **execute_kwargs)
            )
        finally:
            await tool.release(instance_id)
    async with agent_data.instance_locks[tool.name]:
        if tool.name not in instances:
            instances[tool.name], _ = await tool.create(create_kwargs=create_kwargs)
    return normalize_function_tool_return(
        await tool.execute(instances[tool.name], arguments, agent_data=agent_data, **execute_kwargs)
    )


async def _append_context(loop: Any, agent_data: Any, previous_messages: list[dict[str, Any]]) -> AgentState:
    """Render the messages ``agent_data.messages`` has beyond ``previous_messages`` and append them (mask 0): one
    more user turn. A module function (not a method) so that it needs only the loop's verl attributes."""
    schemas = getattr(agent_data, "_active_tool_schemas", None)
    merged, mask, logprobs = await loop.ct_merge_context_msg(
        previous_messages,
        agent_data.messages,
        agent_data.prompt_ids,
        agent_data.response_mask,
        agent_data.response_logprobs,
        tools=loop.tool_schemas if schemas is None else schemas,
    )
    mismatch = getattr(merged, "mismatch", None)
    if mismatch is not None:
        _count(agent_data, MISMATCH_COUNTER)
        logger.warning(
            "tool_agent: tokenization mismatch (rollout.multi_turn.tokenization_sanity_check_mode=%s) in %s: "
            "inserted turn %d differs from response position %d on: %s",
            loop.sanity_check_mode,
            agent_data.label,
            agent_data.user_turns + 1,
            len(agent_data.response_mask) + mismatch.position,
            describe(loop.tokenizer, mismatch),
        )
    agent_data.prompt_ids = merged.token_ids
    agent_data.response_mask = mask
    if agent_data.response_logprobs is not None:
        agent_data.response_logprobs = logprobs
    agent_data.user_turns += 1
    if len(agent_data.response_mask) >= loop.response_length:
        agent_data.termination = "length"
        return AgentState.TERMINATED
    return AgentState.GENERATING


@dataclass
class _Setup:
    """What every ToolAgentLoop of one process and config shares: tools (when the worker passes none), the parser,
    the interactions."""

    tools: list[Any]
    parser: ToolParser
    interactions: dict[str, BaseInteraction]


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Multi-turn tool use; configured by ``rollout.multi_turn`` (see the module docstring).

    Args:
        tools: the tools to offer (the worker passes them wrapped); None loads ``tool_config_path`` and
            ``function_tool_path`` (once per process).
    """

    _setups: dict[tuple, _Setup] = {}

    def __init__(self, *args: Any, tools: ToolListWrap | list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        self.multi_turn = multi_turn
        setup = self._setup(multi_turn, self.tokenizer, load_tools=tools is None)
        tool_list = (
            tools.tools if isinstance(tools, ToolListWrap) else list(tools) if tools is not None else setup.tools
        )
        self.tools: dict[str, Any] = {}
        for tool in tool_list:
            if tool.name in self.tools:
                raise ValueError(f"tool_agent: two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        self.tool_schemas = [_schema_dict(tool) for tool in tool_list]
        self.tool_parser = setup.parser
        self.tool_parser_name = multi_turn.format
        self.interactions = setup.interactions
        self.max_user_turns = multi_turn.max_user_turns
        self.max_assistant_turns = multi_turn.max_assistant_turns
        self.max_parallel_calls = int(multi_turn.max_parallel_calls)
        self.max_tool_response_length = int(multi_turn.max_tool_response_length)
        self.tool_response_truncate_side = multi_turn.tool_response_truncate_side
        self.sanity_check_mode = multi_turn.tokenization_sanity_check_mode
        self.use_inference_chat_template = bool(multi_turn.use_inference_chat_template)

    @classmethod
    def _setup(cls, multi_turn: Any, tokenizer: Any, load_tools: bool) -> _Setup:
        function_tool_path = multi_turn.function_tool_path
        key = (
            multi_turn.tool_config_path if load_tools else None,
            function_tool_path if load_tools else None,
            multi_turn.interaction_config_path,
            multi_turn.format,
            id(tokenizer),
        )
        if key not in cls._setups:
            from verl.tools.tool_registry import load_all_tools

            interactions = {}
            if multi_turn.interaction_config_path:
                interactions = initialize_interactions_from_config(multi_turn.interaction_config_path)
            cls._setups[key] = _Setup(
                tools=load_all_tools(key[0], key[1]) if load_tools else [],
                parser=ToolParser.get_tool_parser(multi_turn.format, tokenizer),
                interactions=interactions,
            )
        return cls._setups[key]

    @staticmethod
    def _make_request_id(priority: Any, full_determinism: bool) -> str:
        return f"det-{int(priority)}" if full_determinism else uuid.uuid4().hex

    # ------------------------------------------------------------------ run

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        raw_prompt = kwargs.get("raw_prompt")
        messages = [dict(m) for m in raw_prompt] if raw_prompt is not None else []
        media = await self.process_multi_modal_info(messages) if messages else {}
        request_id = self._make_request_id(priority, self.rollout_config.full_determinism)
        agent_data = AgentData(
            messages,
            media.get("images"),
            media.get("videos"),
            media.get("audios"),
            self._get_mm_processor_kwargs(media.get("audios")),
            {},
            request_id,
            _row_mapping(kwargs, "tools_kwargs"),
        )
        agent_data.label = _label(request_id, kwargs)
        agent_data.raw_prompt_ids = kwargs.get("raw_prompt_ids")
        self._select_tools(agent_data, kwargs)
        agent_data.interaction_kwargs = _row_mapping(kwargs, "interaction_kwargs")
        agent_data.interaction = select_interaction(self.interactions, agent_data.interaction_kwargs)
        state = AgentState.PENDING
        try:
            if agent_data.interaction is not None:
                agent_data.interaction_id = await agent_data.interaction.start_interaction(
                    request_id, **agent_data.interaction_kwargs
                )
            while state != AgentState.TERMINATED:
                if state == AgentState.PENDING:
                    state = await self._handle_pending_state(agent_data, sampling_params)
                elif state == AgentState.GENERATING:
                    state = await self._handle_generating_state(agent_data, sampling_params)
                elif state == AgentState.PROCESSING_TOOLS:
                    state = await self._handle_processing_tools_state(agent_data)
                elif state == AgentState.INTERACTING:
                    state = await self._handle_interacting_state(agent_data)
                else:
                    raise RuntimeError(f"tool_agent {agent_data.label}: unknown state {state!r}")
        finally:
            await self._release(agent_data)
        return self._output(agent_data)

    def _select_tools(self, agent_data: AgentData, kwargs: dict[str, Any]) -> None:
        """``extra_info.tool_selection``: the names of the tools this row offers (default: all)."""
        extra_info = kwargs.get("extra_info")
        selection = extra_info.get("tool_selection") if isinstance(extra_info, dict) else None
        if selection and self.tools:
            chosen = {name: self.tools[name] for name in selection if name in self.tools}
            agent_data._active_tools = chosen
            agent_data._active_tool_schemas = [_schema_dict(tool) for tool in chosen.values()]
        else:
            agent_data._active_tools = self.tools
            agent_data._active_tool_schemas = self.tool_schemas

    def _schemas(self, agent_data: Any) -> list[dict[str, Any]]:
        schemas = getattr(agent_data, "_active_tool_schemas", None)
        return self.tool_schemas if schemas is None else schemas

    # ------------------------------------------------------------------ states

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        """Build the prompt: the messages rendered with the tools, or the row's raw ids."""
        self._assert_mm_supported(bool(agent_data.image_data or agent_data.video_data or agent_data.audio_data))
        raw_ids = agent_data.raw_prompt_ids
        if agent_data.messages:
            agent_data.prompt_ids = await self.ct_build_initial_tokens(
                agent_data.messages,
                tools=self._schemas(agent_data),
                images=agent_data.image_data,
                videos=agent_data.video_data,
                audios=agent_data.audio_data,
            )
        elif self.use_inference_chat_template:
            raise ValueError(
                "rollout.multi_turn.use_inference_chat_template=true renders each turn's prompt from the chat "
                "messages, but this tool_agent sample has none (no 'raw_prompt'; set data.return_raw_chat=true, or "
                "set the key to false to append tokens to raw_prompt_ids)"
            )
        elif raw_ids is not None:
            agent_data.prompt_ids = [int(t) for t in raw_ids]
        else:
            raise KeyError("tool_agent sample has neither 'raw_prompt' nor 'raw_prompt_ids'; keep them in the batch")
        return AgentState.GENERATING

    async def _rerender_prompt(self, agent_data: AgentData) -> None:
        """With ``use_inference_chat_template``, make the next prompt the chat template's rendering of the messages
        (a no-op before the first model turn: the prompt already is that rendering)."""
        if not self.use_inference_chat_template or agent_data.assistant_turns == 0:
            return
        context = await asyncio.to_thread(
            self.chat_renderer.render, list(agent_data.messages), self._schemas(agent_data), True
        )
        if _rebase(agent_data, context):
            _count(agent_data, "rerendered_prompt_changes")

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        """One model turn; then its calls (PROCESSING_TOOLS), the interaction's answer (INTERACTING) or the end."""
        await self._rerender_prompt(agent_data)
        budget = self.response_length - len(agent_data.response_mask)
        if budget <= 0 and not ignore_termination:
            agent_data.termination = "length"
            return AgentState.TERMINATED
        params = dict(sampling_params)
        params["max_tokens"] = min(int(params.get("max_tokens") or budget), max(budget, 1))
        if self.tool_parser.stop_token_ids:
            params["stop_token_ids"] = sorted({*(params.get("stop_token_ids") or []), *self.tool_parser.stop_token_ids})
        media = {
            key: value
            for key, value in (
                ("image_data", agent_data.image_data),
                ("video_data", agent_data.video_data),
                ("audio_data", agent_data.audio_data),
            )
            if value
        }
        start = time.perf_counter()
        output = await self.server_manager.generate(
            agent_data.request_id, prompt_ids=agent_data.prompt_ids, sampling_params=params, **media
        )
        _add_time(agent_data, "generate_sequences", time.perf_counter() - start)
        merge_version_tags(agent_data.extra_fields, getattr(output, "extra", None))
        preempted = getattr(output, "num_preempted", None)
        if agent_data.metrics.get("num_preempted") is None:
            agent_data.metrics["num_preempted"] = -1 if preempted is None else preempted
        elif preempted:
            agent_data.metrics["num_preempted"] += preempted
        tokens = [int(t) for t in output.token_ids[: max(budget, 0)]]
        log_probs = output.log_probs[: len(tokens)] if output.log_probs is not None else None
        agent_data.assistant_turns += 1
        agent_data.response_ids = tokens
        agent_data.stop_reason = getattr(output, "stop_reason", None)
        merged, agent_data.response_mask, agent_data.response_logprobs = await self.ct_merge_assistant_token(
            agent_data.prompt_ids, tokens, agent_data.response_mask, agent_data.response_logprobs, log_probs
        )
        agent_data.prompt_ids = merged.token_ids
        if getattr(output, "routed_experts", None) is not None:
            agent_data.routed_experts = output.routed_experts

        if agent_data.stop_reason == "aborted":
            agent_data.termination = "aborted"
        elif not ignore_termination and len(agent_data.response_mask) >= self.response_length:
            agent_data.termination = "length"
        elif self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns:
            agent_data.termination = "max_assistant_turns"
        elif self.max_user_turns and agent_data.user_turns >= self.max_user_turns:
            agent_data.termination = "max_user_turns"
        else:
            active = getattr(agent_data, "_active_tools", None) or self.tools
            content, agent_data.tool_calls = await self.tool_parser.extract_tool_calls(
                tokens, [tool.tool_schema for tool in active.values()]
            )
            agent_data.messages.append(self._build_assistant_message(content, agent_data))
            if agent_data.tool_calls:
                return AgentState.PROCESSING_TOOLS
            if agent_data.interaction is not None:
                return AgentState.INTERACTING
            agent_data.termination = "done"
        return AgentState.TERMINATED

    def _build_assistant_message(self, content: str, agent_data: Any) -> dict[str, Any]:
        """The model's turn as a chat message: its text, and its calls as ``tool_calls`` (arguments decoded where
        they are JSON objects, kept as written otherwise)."""
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if not agent_data.tool_calls:
            return message
        entries = []
        for call in agent_data.tool_calls:
            decoded, failed = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
                OpenAIFunctionParsedSchema(name=call.name, arguments=call.arguments)
            )
            function = {"name": call.name, "arguments": call.arguments} if failed else decoded.model_dump()
            entry: dict[str, Any] = {"type": "function", "function": function}
            if call.tool_call_id is not None:
                entry["id"] = call.tool_call_id
            entries.append(entry)
        message["tool_calls"] = entries
        return message

    async def _handle_processing_tools_state(self, agent_data: Any) -> AgentState:
        """Answer the turn's calls (the first ``max_parallel_calls`` concurrently, the rest with an error), append
        the answers as tool messages with mask 0."""
        calls = list(agent_data.tool_calls)
        run_now, skipped = calls[: self.max_parallel_calls], calls[self.max_parallel_calls :]
        _count(agent_data, "tool_calls", len(calls))
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(self._call_tool(call, agent_data.tools_kwargs, agent_data) for call in run_now)
        )
        _add_time(agent_data, "tool_calls", time.perf_counter() - start)

        previous_messages = list(agent_data.messages)
        new_messages: list[dict[str, Any]] = []
        new_images: list[Any] = []
        for call, (response, reward, _metrics) in zip(run_now, answers):
            if response.video:
                raise NotImplementedError(
                    f"tool {call.name!r} returned a video; tool responses may carry text and images only"
                )
            if response.image:
                if getattr(self.processor, "image_processor", None) is None:
                    raise ValueError(
                        f"tool {call.name!r} returned images, but the model has no image processor "
                        "(a text-only model cannot read them); use a vision-language model"
                    )
                images = [image for image in response.image if image is not None]
                new_images.extend(images)
                content: Any = [{"type": "image", "image": image} for image in images]
                if response.text:
                    content.append({"type": "text", "text": response.text})
                message: dict[str, Any] = {"role": "tool", "content": content}
            else:
                message = {"role": "tool", "content": response.text or ""}
            if call.tool_call_id is not None:
                message["tool_call_id"] = call.tool_call_id
            new_messages.append(message)
            if reward is not None:
                agent_data.tool_rewards.append(reward)
        for call in skipped:
            _count(agent_data, "tool_calls_skipped")
            message = {
                "role": "tool",
                "content": f"Error: call skipped; at most {self.max_parallel_calls} tool call(s) per turn",
            }
            if call.tool_call_id is not None:
                message["tool_call_id"] = call.tool_call_id
            new_messages.append(message)
        self._assert_mm_supported(bool(new_images))
        agent_data.messages.extend(new_messages)
        state = await _append_context(self, agent_data, previous_messages)
        if new_images:
            agent_data.image_data = [*(agent_data.image_data or []), *new_images]
        return state

    async def _handle_interacting_state(self, agent_data: AgentData) -> AgentState:
        """The interaction (a scripted user) answers the model's turn, or ends the trajectory."""
        if self.max_user_turns and agent_data.user_turns >= self.max_user_turns:
            agent_data.termination = "max_user_turns"
            return AgentState.TERMINATED
        finish, content, score, _extra = await agent_data.interaction.generate_response(
            agent_data.interaction_id, list(agent_data.messages), **agent_data.interaction_kwargs
        )
        agent_data.turn_scores.append(float(score))
        if finish:
            agent_data.termination = "interaction_done"
            return AgentState.TERMINATED
        previous_messages = list(agent_data.messages)
        agent_data.messages.append({"role": "user", "content": str(content)})
        return await _append_context(self, agent_data, previous_messages)

    # ------------------------------------------------------------------ tools

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Answer one call: ``(response, reward, metrics)``. Every failure becomes an error text for the model (and a
        counter), never an exception."""
        active = getattr(agent_data, "_active_tools", None) or self.tools
        name = tool_call.name
        parse_error = getattr(tool_call, "error", None)
        if parse_error:
            _count(agent_data, "tool_parse_errors")
            return ToolResponse(text=f"Error: {parse_error}"), 0.0, {}
        if name not in active:
            _count(agent_data, "tool_unknown_errors")
            return ToolResponse(text=f"Error: Unknown function {name!r}. Available tools: {sorted(active)}"), 0.0, {}
        try:
            arguments = json.loads(tool_call.arguments)
        except (json.JSONDecodeError, TypeError) as err:
            _count(agent_data, "tool_parse_errors")
            return ToolResponse(text=f"Error: Invalid JSON in arguments for {name!r}: {err}"), 0.0, {}
        if not isinstance(arguments, dict):
            _count(agent_data, "tool_parse_errors")
            return (
                ToolResponse(
                    text=f"Error: Invalid JSON in arguments for {name!r}: expected an object, got "
                    f"{type(arguments).__name__}"
                ),
                0.0,
                {},
            )
        tool = active[name]
        schema = getattr(tool, "tool_schema", None)
        problem = schema.check_arguments(arguments) if isinstance(schema, OpenAIFunctionToolSchema) else None
        if problem is not None:
            _count(agent_data, "tool_argument_errors")
            return ToolResponse(text=f"Error: {name}: {problem}"), 0.0, {}
        timeout = getattr(tool, "timeout_s", DEFAULT_TOOL_TIMEOUT_S)
        try:
            response, reward, metrics = await asyncio.wait_for(
                _invoke(tool, arguments, tools_kwargs, agent_data), timeout
            )
        except asyncio.TimeoutError:
            _count(agent_data, "tool_timeouts")
            return ToolResponse(text=f"Error: tool {name!r} timed out after {timeout:g}s"), 0.0, {}
        except Exception as err:  # a tool's bug is the tool's problem: report it to the model and in metrics
            _count(agent_data, "tool_exceptions")
            logger.warning("tool %r raised %s: %s", name, type(err).__name__, err)
            return ToolResponse(text=f"Error executing tool {name!r}: {type(err).__name__}: {err}"), 0.0, {}
        _count(agent_data, "tool_calls_ok")
        text = response.text
        if text and len(text) > self.max_tool_response_length:
            text = truncate_text(text, self.max_tool_response_length, self.tool_response_truncate_side)
        return ToolResponse(text=text, image=response.image, video=response.video), reward, metrics

    async def _release(self, agent_data: AgentData) -> None:
        """calc_reward then release every instance the trajectory created, and end its interaction; failures are
        logged, not raised."""
        for name, instance_id in agent_data.tool_instances.items():
            tool = self.tools[name]
            settings = agent_data.tools_kwargs.get(name) or {}
            try:
                agent_data.tool_final_rewards[name] = float(
                    await tool.calc_reward(instance_id, **dict(settings.get("calc_reward_kwargs") or {}))
                )
            except Exception as err:
                logger.warning("tool %r calc_reward raised %s: %s", name, type(err).__name__, err)
            try:
                await tool.release(instance_id, **dict(settings.get("release_kwargs") or {}))
            except Exception as err:
                logger.warning("tool %r release raised %s: %s", name, type(err).__name__, err)
        if agent_data.interaction is not None and agent_data.interaction_id is not None:
            await agent_data.interaction.finalize_interaction(agent_data.interaction_id)

    # ------------------------------------------------------------------ output

    def _output(self, agent_data: AgentData) -> AgentLoopOutput:
        counters = {key: float(agent_data.counters.get(key, 0)) for key in COUNTER_KEYS}
        counters["tool_call_errors"] = float(sum(agent_data.counters.get(kind, 0) for kind in _ERROR_KINDS))
        metrics = ToolAgentLoopMetrics(
            generate_sequences=agent_data.metrics.get("generate_sequences", 0.0),
            tool_calls=agent_data.metrics.get("tool_calls", 0.0),
            num_preempted=agent_data.metrics.get("num_preempted", -1),
            counters=counters,
        )
        limit = self.response_length
        prompt_len = len(agent_data.prompt_ids) - len(agent_data.response_mask)
        prompt_ids = agent_data.prompt_ids[:prompt_len]
        logprobs = agent_data.response_logprobs
        media = {
            key: value
            for key, value in (
                ("images", agent_data.image_data),
                ("videos", agent_data.video_data),
                ("audios", agent_data.audio_data),
            )
            if value is not None
        }
        extra = dict(agent_data.extra_fields)
        extra.update(
            {
                "stop_reason": agent_data.stop_reason,
                "termination_reason": agent_data.termination,
                "tool_call_counts": counters,
                "tool_rewards": list(agent_data.tool_rewards),
                "tool_final_rewards": dict(agent_data.tool_final_rewards),
                "turn_scores": list(agent_data.turn_scores),
            }
        )
        routed = agent_data.routed_experts
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=agent_data.prompt_ids[prompt_len:][:limit],
            response_mask=agent_data.response_mask[:limit],
            response_logprobs=None if logprobs is None else logprobs[:limit],
            routed_experts=None if routed is None else routed[: len(prompt_ids) + limit],
            multi_modal_data=media or None,
            mm_processor_kwargs=agent_data.mm_processor_kwargs if media else None,
            num_turns=agent_data.assistant_turns + agent_data.user_turns + 1,
            metrics=metrics,
            extra_fields=extra,
        )
