"""OpenAIAgentLoop (``openai_agent``): train an agent written against the OpenAI client, unchanged.

The loop gives the user's async agent function a base URL bound to a fresh session of this process's
:class:`~verl.experimental.agent_loop.openai_gateway.OpenAIGateway`, awaits it, and turns the calls the gateway
recorded into one :class:`AgentLoopOutput`:

- When every call's prompt extends the previous call's prompt + response (the usual chat agent: it sends the
  history back with one more user/tool message), the calls form one trajectory: the first prompt, then each
  response (``response_mask`` 1) with the tokens the agent added in between (mask 0, log-prob 0.0).
- Otherwise (the agent rewrote or summarised its history, or a chat template re-renders earlier turns
  differently) only the last call is kept, as a single-turn sample; ``extra_fields["openai_merged"]`` says which.

Register the agent in the YAML of ``rollout.agent.agent_loop_config_path``::

    - name: my_agent
      _target_: verl.experimental.agent_loop.openai_agent_loop.OpenAIAgentLoop
      agent_fn: path/to/agent.py:solve        # or my_pkg.agents:solve
      agent_kwargs: {max_steps: 4}            # optional, passed to the function
      lock_sampling: true                     # rollout temperature/top_p/top_k win over the agent's (default)
      gateway_host: 0.0.0.0                   # optional: serve agents on other nodes (default 127.0.0.1)

and set the samples' ``agent_name`` to ``my_agent`` (or subclass and override :meth:`OpenAIAgentLoop.agent`).
The function is ``async def solve(ctx: OpenAIAgentContext, **agent_kwargs)``; it returns a reward (float), None
(the reward manager scores the trajectory) or a dict with ``reward_score`` plus extra per-sample fields.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.openai_gateway import CallRecord, OpenAIGateway, shared_gateway
from verl.experimental.agent_loop.registry import register
from verl.experimental.agent_loop.weight_versions import merge_version_tags

__all__ = ["OpenAIAgentContext", "OpenAIAgentLoop", "Trajectory", "load_agent_fn", "merge_calls"]

AgentFn = Callable[..., Awaitable[Any]]


@dataclass
class OpenAIAgentContext:
    """What the agent function gets: where to send its requests, and the sample it works on.

    Attributes:
        base_url: an OpenAI base URL bound to this trajectory (``http://<gateway host>:<port>/session/<id>/v1``).
        api_key: the gateway's bearer token (required when it serves other nodes), or ``"verl"`` on loopback without
            one; kept out of ``repr``.
        model: the model name to send.
        session_id: the trajectory's id (also accepted as the ``X-Trajectory-Id`` header).
        messages: the sample's ``raw_prompt`` chat messages, or None.
        sample: every non-tensor field of the sample (extra_info, tools_kwargs, reward_model, ...).
        sampling_params: the rollout's sampling parameters for this sample.
    """

    base_url: str
    api_key: str = field(repr=False)
    model: str
    session_id: str
    messages: list[dict[str, Any]] | None
    sample: dict[str, Any]
    sampling_params: dict[str, Any] = field(default_factory=dict)

    def client(self, **kwargs: Any) -> Any:
        """An ``openai.AsyncOpenAI`` client on :attr:`base_url` (needs the ``openai`` package)."""
        try:
            from openai import AsyncOpenAI
        except ImportError as err:
            raise ImportError("OpenAIAgentContext.client needs the 'openai' package (pip install openai)") from err
        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)


@dataclass
class Trajectory:
    """Recorded calls laid out as one sample."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    num_calls: int
    merged: bool


def merge_calls(calls: Sequence[CallRecord]) -> Trajectory:
    """Concatenate ``calls`` into one trajectory when each prompt extends the previous prompt + response; else
    keep the last call alone (``merged`` False)."""
    if not calls:
        raise ValueError("merge_calls needs at least one recorded call")
    first = calls[0]
    response = list(first.response_ids)
    mask = [1] * len(response)
    log_probs = _log_probs(first)
    context = list(first.prompt_ids) + response
    for call in calls[1:]:
        if call.prompt_ids[: len(context)] != context:
            last = calls[-1]
            return Trajectory(
                list(last.prompt_ids),
                list(last.response_ids),
                [1] * len(last.response_ids),
                _log_probs(last),
                num_calls=1,
                merged=len(calls) == 1,
            )
        inserted = call.prompt_ids[len(context) :]
        response += inserted + list(call.response_ids)
        mask += [0] * len(inserted) + [1] * len(call.response_ids)
        log_probs += [0.0] * len(inserted) + _log_probs(call)
        context = list(call.prompt_ids) + list(call.response_ids)
    return Trajectory(list(first.prompt_ids), response, mask, log_probs, num_calls=len(calls), merged=True)


def _log_probs(call: CallRecord) -> list[float]:
    if call.response_logprobs is None:
        return [0.0] * len(call.response_ids)
    return [float(x) for x in call.response_logprobs]


def load_agent_fn(target: Any, where: str = "openai_agent agent_fn") -> AgentFn:
    """Resolve ``agent_fn``: a callable, ``package.module:fn``, ``package.module.fn`` or ``path/file.py:fn``."""
    if callable(target):
        return target
    if not isinstance(target, str) or not target:
        raise ValueError(f"{where}: must be a callable or 'module:function' / 'file.py:function', got {target!r}")
    if ":" in target:
        module_part, name = target.rsplit(":", 1)
    else:
        module_part, _, name = target.rpartition(".")
    if not module_part or not name:
        raise ValueError(f"{where}={target!r}: write it as 'module:function' or 'path/to/file.py:function'")
    from verl.utils.import_utils import load_extern_object

    fn = load_extern_object(module_part, name, config_key=where, what="agent function")
    if not callable(fn):
        raise TypeError(f"{where}={target!r} is a {type(fn).__name__}, not a function")
    return fn


@register("openai_agent")
class OpenAIAgentLoop(AgentLoopBase):
    """Run a user agent that talks to the policy through the OpenAI API (see the module docstring).

    Loop kwargs (YAML entry keys): ``agent_fn``, ``agent_kwargs``, ``lock_sampling`` (default True),
    ``model_name`` (default ``verl-policy``), ``tool_parser`` (default ``rollout.multi_turn.format``),
    ``gateway_host`` (default ``127.0.0.1``; ``0.0.0.0`` or a node IP lets agents on other nodes call it, with a
    bearer token), ``gateway_auth_token`` (default: a random token per gateway when not on loopback).
    """

    def __init__(
        self,
        *args: Any,
        agent_fn: Any = None,
        agent_kwargs: dict[str, Any] | None = None,
        lock_sampling: bool = True,
        model_name: str = "verl-policy",
        tool_parser: str | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_auth_token: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.agent_fn = load_agent_fn(agent_fn) if agent_fn is not None else None
        self.agent_kwargs = dict(agent_kwargs or {})
        self.lock_sampling = bool(lock_sampling)
        self.model_name = str(model_name)
        self.tool_parser = str(tool_parser or self.rollout_config.multi_turn.format)
        if not isinstance(gateway_host, str):
            raise TypeError(f"openai_agent gateway_host must be a host string such as '0.0.0.0', got {gateway_host!r}")
        self.gateway_host = gateway_host
        self._gateway_auth_token = gateway_auth_token  # private: kept out of reprs and logs

    async def agent(self, ctx: OpenAIAgentContext) -> Any:
        """The agent itself; the default calls the configured ``agent_fn`` (override in a subclass instead)."""
        if self.agent_fn is None:
            raise ValueError(
                "openai_agent: no agent function; set 'agent_fn: module:function' in the loop's entry of "
                "rollout.agent.agent_loop_config_path, or subclass OpenAIAgentLoop and override agent()"
            )
        return await self.agent_fn(ctx, **self.agent_kwargs)

    async def gateway(self) -> OpenAIGateway:
        """This process's gateway over the loop's server manager (started on first use)."""
        return await shared_gateway(
            self.server_manager,
            self.tokenizer,
            model_name=self.model_name,
            tool_parser=self.tool_parser,
            max_prompt_tokens=self.rollout_config.max_total_length - 1,
            host=self.gateway_host,
            auth_token=self._gateway_auth_token,
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        gateway = await self.gateway()
        session_id = uuid.uuid4().hex
        defaults = {key: value for key, value in sampling_params.items() if key != "logprobs"}
        defaults.setdefault("max_tokens", self.response_length)
        gateway.open_session(session_id, defaults, lock_sampling=self.lock_sampling)
        messages = kwargs.get("raw_prompt")
        ctx = OpenAIAgentContext(
            base_url=gateway.session_base_url(session_id),
            api_key=gateway.auth_token or "verl",
            model=self.model_name,
            session_id=session_id,
            messages=[dict(m) for m in messages] if messages is not None else None,
            sample=dict(kwargs),
            sampling_params=dict(sampling_params),
        )
        start = time.perf_counter()
        try:
            result = await self.agent(ctx)
        finally:
            calls = gateway.close_session(session_id)
        elapsed = time.perf_counter() - start
        if not calls:
            raise RuntimeError(
                f"openai_agent session {session_id}: the agent finished without calling the model "
                f"(it must send requests to ctx.base_url={ctx.base_url})"
            )
        return self._output(merge_calls(calls), calls, result, elapsed)

    def _output(self, traj: Trajectory, calls: list[CallRecord], result: Any, elapsed: float) -> AgentLoopOutput:
        reward, extra = _read_result(result)
        limit = self.response_length
        extra.update(
            {"openai_num_calls": len(calls), "openai_merged": traj.merged, "stop_reason": calls[-1].finish_reason}
        )
        for call in calls:
            merge_version_tags(extra, call.extra)
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids[:limit],
            response_mask=traj.response_mask[:limit],
            response_logprobs=traj.response_logprobs[:limit],
            num_turns=2 * traj.num_calls,
            reward_score=reward,
            metrics=AgentLoopMetrics(generate_sequences=elapsed),
            extra_fields=extra,
        )


def _read_result(result: Any) -> tuple[float | None, dict[str, Any]]:
    if result is None:
        return None, {}
    if isinstance(result, bool) or not isinstance(result, int | float | dict):
        raise TypeError(
            f"openai_agent: the agent function returned {type(result).__name__}; return a reward "
            "(float), None, or a dict with 'reward_score' and extra fields"
        )
    if isinstance(result, dict):
        extra = dict(result)
        reward = extra.pop("reward_score", None)
        return (float(reward) if reward is not None else None), extra
    return float(result), {}
