"""An OpenAI-compatible HTTP gateway in front of the rollout replicas, so agents written against the OpenAI client
can be trained unchanged.

The gateway is an ``aiohttp`` app bound to 127.0.0.1 on a free port, running on the event loop of whoever starts it
(an agent-loop worker, or a test). It serves ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` by
turning each request into token ids (the tokenizer's chat template for chat), calling the server manager
(``generate(request_id, prompt_ids=, sampling_params=) -> TokenOutput``) and answering in OpenAI's JSON shape.

Every call is recorded per *session* (one trajectory): the exact prompt ids, response ids, log-probs and finish
reason, which is what training needs and what a text-level API would otherwise lose. The session id comes from, in
order: a base-URL path prefix ``/session/{id}/v1`` (so a plain ``AsyncOpenAI(base_url=...)`` per trajectory works), the
``X-Trajectory-Id`` header, or the request's ``user`` field.

Extensions (vLLM-style, reachable via the client's ``extra_body``): ``top_k``, ``stop_token_ids``, ``ignore_eos``,
``skip_special_tokens`` (default true), ``chat_template_kwargs``. Every response carries ``prompt_token_ids`` and,
per choice, ``token_ids`` (the recorded response ids). Not supported: streaming, ``n > 1``, penalties, several
prompts per completion request, ``echo``; those get a 400 saying so. ``top_logprobs`` alternatives are returned
empty (the engine reports the sampled token's log-prob only).

Weight syncs: the server manager of an async recipe (``PartialRolloutServerManager``) continues a call that a sync
aborted, so the client just sees a slower answer. A manager that returns ``stop_reason == "aborted"`` anyway gets a
503 naming it: the call is not answered with a truncated response.

Agents on other nodes: bind ``host`` to a node IP or a wildcard (``0.0.0.0``); :attr:`OpenAIGateway.base_url` then
advertises this node's routable IP. Off loopback every request must carry ``Authorization: Bearer <token>`` (what the
OpenAI client sends as its ``api_key``): the token is per gateway, random unless given, and never logged or shown in
``repr``; a missing or wrong one gets a 401. On loopback a token is optional (checked when given).

Malformed requests get an OpenAI-style error body (``{"error": {"message", "type", "param", "code"}}``) with a 4xx
status; an unexpected failure is a 500 with the same shape. The server keeps serving either way.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "SESSION_HEADER",
    "CallRecord",
    "GatewayError",
    "OpenAIGateway",
    "is_loopback_host",
    "node_ip_address",
    "shared_gateway",
]

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Trajectory-Id"
_MAX_STOP_STRINGS = 4
_UNSUPPORTED_NONZERO = ("frequency_penalty", "presence_penalty")


@dataclass
class CallRecord:
    """One model call of a session, exactly as the model saw and produced it."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    finish_reason: str
    endpoint: str = "chat"
    extra: dict[str, Any] = field(default_factory=dict)


class GatewayError(Exception):
    """A request the gateway refuses; rendered as an OpenAI error body with HTTP ``status``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


def _error_response(err: GatewayError) -> web.Response:
    response = web.json_response(err.body(), status=err.status)
    if err.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="verl-gateway"'
    return response


# ---------------------------------------------------------------------- addresses

_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IPs; a host name is assumed reachable from other machines."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def node_ip_address() -> str:
    """This node's IP as other nodes reach it: Ray's view when Ray runs here (unless loopback), else the host name's
    address, else the interface that routes outwards (a Debian-style ``/etc/hosts`` maps the host name to 127.0.1.1)."""
    ray = sys.modules.get("ray")  # never import Ray just for this: it is not running if nobody imported it
    if ray is not None and ray.is_initialized():
        ip = ray.util.get_node_ip_address()
        if not is_loopback_host(ip):
            return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    if not is_loopback_host(ip):
        return ip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # UDP connect sends nothing; it only picks the route
            return probe.getsockname()[0]
        except OSError:
            return ip


# ---------------------------------------------------------------------- request field checks


def _number(body: dict, key: str, lo: float, hi: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise GatewayError(f"'{key}' must be a number in [{lo:g}, {hi:g}], got {value!r}", param=key)
    return float(value)


def _integer(body: dict, key: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise GatewayError(f"'{key}' must be an integer {bound}, got {value!r}", param=key)
    return value


def _boolean(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise GatewayError(f"'{key}' must be a boolean, got {value!r}", param=key)
    return value


def _int_list(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise GatewayError(f"'{key}' must be a list of integers", param=key)
    return list(value)


def _stop_strings(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > _MAX_STOP_STRINGS:
        raise GatewayError(
            f"'stop' must be a non-empty string or a list of at most {_MAX_STOP_STRINGS} non-empty "
            f"strings, got {stop!r}",
            param="stop",
        )
    return stop


def _check_common(body: dict) -> str:
    """Checks shared by both endpoints; returns the model name."""
    model = body.get("model")
    if model is None:
        raise GatewayError("you must provide a model parameter", param="model", code="missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise GatewayError(f"'model' must be a non-empty string, got {type(model).__name__} {model!r}", param="model")
    if _boolean(body, "stream", False):
        raise GatewayError(
            "stream is not supported by the verl gateway; set stream=false",
            param="stream",
            code="unsupported_parameter",
        )
    n = _integer(body, "n", 1)
    if n is not None and n != 1:
        raise GatewayError(
            f"n={n} is not supported by the verl gateway (one choice per request); send n requests instead",
            param="n",
            code="unsupported_parameter",
        )
    for key in _UNSUPPORTED_NONZERO:
        if _number(body, key, -2.0, 2.0):
            raise GatewayError(
                f"a non-zero '{key}' is not supported by the verl gateway", param=key, code="unsupported_parameter"
            )
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise GatewayError(f"'user' must be a string, got {type(user).__name__}", param="user")
    return model


def _request_sampling(body: dict) -> dict[str, Any]:
    """The sampling fields a request sets (checked); absent ones are left to the session's defaults."""
    params: dict[str, Any] = {}
    temperature = _number(body, "temperature", 0.0, 2.0)
    if temperature is not None:
        params["temperature"] = temperature
        params["do_sample"] = temperature > 0
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p is not None:
        if top_p == 0:
            raise GatewayError("'top_p' must be > 0", param="top_p")
        params["top_p"] = top_p
    top_k = body.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not (top_k == -1 or top_k >= 1):
            raise GatewayError(f"'top_k' must be -1 (off) or an integer >= 1, got {top_k!r}", param="top_k")
        params["top_k"] = top_k
    for key in ("max_completion_tokens", "max_tokens"):
        value = _integer(body, key, 1)
        if value is not None:
            params["max_tokens"] = value
            break
    seed = _integer(body, "seed", -(2**63), 2**63 - 1)
    if seed is not None:
        params["seed"] = seed
    if body.get("stop_token_ids") is not None:
        params["stop_token_ids"] = _int_list(body["stop_token_ids"], "stop_token_ids")
    if body.get("ignore_eos") is not None:
        params["ignore_eos"] = _boolean(body, "ignore_eos", False)
    return params


def _chat_messages(body: dict) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise GatewayError("'messages' is a required property", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise GatewayError("'messages' must be a non-empty list of message objects", param="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise GatewayError(f"{where} must be an object, got {type(message).__name__}", param=where)
        if not isinstance(message.get("role"), str):
            raise GatewayError(f"{where}.role must be a string", param=f"{where}.role")
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise GatewayError(
                        f"{where}.content[{j}]: only text parts ({{'type': 'text', 'text': str}}) are supported",
                        param=f"{where}.content",
                    )
        elif content is not None and not isinstance(content, str):
            raise GatewayError(
                f"{where}.content must be a string, a list of text parts or null", param=f"{where}.content"
            )
    return messages


# ---------------------------------------------------------------------- the gateway


@dataclass
class _Session:
    defaults: dict[str, Any]
    lock_sampling: bool
    explicit: bool  # opened by open_session: its max_tokens is a cap, not just a default
    # the opener's context variables (its trace attributes, its batch group), for its generate calls
    context: contextvars.Context | None = None
    calls: list[CallRecord] = field(default_factory=list)
    in_flight: int = 0
    counter: int = 0


class OpenAIGateway:
    """Serve OpenAI-shaped completions over a server manager and record every call per session.

    Args:
        server_manager: anything with ``async generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``.
        tokenizer: the policy's tokenizer (chat template, decode).
        model_name: the name ``/v1/models`` reports (requests may name any model: there is one policy).
        default_sampling_params: sampling defaults of sessions opened implicitly (first request of an unknown id).
        max_prompt_tokens: longer prompts get a 400 ``context_length_exceeded`` (None: the engine decides).
        tool_parser: the tool-call format of chat requests with ``tools`` (``rollout.multi_turn.format`` names).
        host: where to bind (loopback by default: agents in the same process or machine). A node IP or ``0.0.0.0``
            serves agents on other nodes and makes a bearer token mandatory.
        auth_token: the bearer token requests must carry; generated (``secrets.token_urlsafe``) when None and
            ``host`` is not loopback, not required on loopback unless given.
        advertise_host: the host :attr:`base_url` names (default: ``host``, or :func:`node_ip_address` for a
            wildcard bind), e.g. an address a NAT maps to this node.
        client_max_size: largest request body in bytes.
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        *,
        model_name: str = "verl-policy",
        default_sampling_params: dict[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
        tool_parser: str = "hermes",
        host: str = "127.0.0.1",
        auth_token: str | None = None,
        advertise_host: str | None = None,
        client_max_size: int = 64 * 2**20,
    ) -> None:
        if auth_token is not None and (not isinstance(auth_token, str) or not auth_token.strip()):
            raise ValueError("OpenAIGateway auth_token must be a non-empty string (or None for a generated one)")
        if auth_token is None and not is_loopback_host(host):
            auth_token = secrets.token_urlsafe(32)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.default_sampling_params = dict(default_sampling_params or {})
        self.max_prompt_tokens = max_prompt_tokens
        self.tool_parser_name = tool_parser
        self.host = host
        self.advertise_host = advertise_host
        self.client_max_size = client_max_size
        self._auth_token = auth_token  # private: never in repr, logs or errors
        self.num_refused = 0
        self._url_host = host
        self.port: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, _Session] = {}
        self._runner: web.AppRunner | None = None
        self._tool_parser = None

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port is not None else f"{self.host} (not started)"
        auth = "bearer token" if self._auth_token is not None else "none"
        return f"OpenAIGateway({where}, model={self.model_name!r}, auth={auth}, sessions={len(self._sessions)})"

    # ------------------------------------------------------------------ lifecycle

    @property
    def auth_token(self) -> str | None:
        """The bearer token requests must carry (give it to the client as ``api_key``); None: no check."""
        return self._auth_token

    @property
    def requires_auth(self) -> bool:
        return self._auth_token is not None

    @property
    def base_url(self) -> str:
        """``http://host:port/v1`` (requests then need the session header or ``user``); a wildcard bind names this
        node's IP, so the URL works from other nodes."""
        if self.port is None:
            raise RuntimeError("OpenAIGateway is not started; await start() first")
        return f"http://{self._url_host}:{self.port}/v1"

    def session_base_url(self, session_id: str) -> str:
        """A base URL that binds every request to ``session_id`` (give it to ``AsyncOpenAI(base_url=...)``)."""
        return self.base_url[: -len("/v1")] + f"/session/{session_id}/v1"

    def build_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.client_max_size, middlewares=[self._auth_middleware, self._errors_middleware]
        )
        for prefix in ("", "/session/{session_id}"):
            app.router.add_post(prefix + "/v1/chat/completions", self._handle_chat)
            app.router.add_post(prefix + "/v1/completions", self._handle_completion)
            app.router.add_get(prefix + "/v1/models", self._handle_models)
        return app

    async def start(self, port: int = 0) -> str:
        """Bind and serve on the running loop; returns :attr:`base_url`. ``port=0`` picks a free port."""
        if self._runner is not None:
            return self.base_url
        self.loop = asyncio.get_running_loop()
        runner = web.AppRunner(self.build_app(), access_log=None)
        await runner.setup()
        ipv6 = ":" in self.host
        sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if ipv6 and self.host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # the IPv6 wildcard takes IPv4 agents too
        try:
            sock.bind((self.host or "0.0.0.0", port))
        except OSError as err:
            sock.close()
            await runner.cleanup()
            raise OSError(
                err.errno, f"OpenAIGateway cannot bind host={self.host!r} port={port}: {err.strerror}"
            ) from err
        await web.SockSite(runner, sock).start()
        host = self.advertise_host or (node_ip_address() if self.host in _WILDCARD_HOSTS else self.host)
        self._url_host = f"[{host}]" if ":" in host else host  # an IPv6 literal goes in brackets
        self._runner = runner
        self.port = sock.getsockname()[1]
        logger.info(
            "OpenAI gateway serving %s (bound to %s, %s)",
            self.base_url,
            self.host or "0.0.0.0",
            "bearer token required" if self.requires_auth else "no token",
        )
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self.port = None

    # ------------------------------------------------------------------ sessions

    def open_session(
        self, session_id: str, sampling_params: dict[str, Any] | None = None, *, lock_sampling: bool = False
    ) -> None:
        """Start recording ``session_id`` with these sampling defaults (the gateway's when None).

        A request's ``max_tokens`` is capped by the defaults' (the trajectory's budget). ``lock_sampling``: the
        defaults' temperature/top_p/top_k win over the request's (training must sample the distribution the trainer
        assumes). Ids never opened are recorded too, with the gateway's defaults and no cap. The session's generate
        calls run in a copy of the opener's context variables, as if it had made them itself (Python >= 3.11), so
        the trace attributes and the batch group of the loop that opened it apply to them.
        """
        if session_id in self._sessions:
            raise ValueError(f"OpenAIGateway: session {session_id!r} is already open")
        self._sessions[session_id] = _Session(
            dict(sampling_params or self.default_sampling_params),
            lock_sampling,
            explicit=True,
            context=contextvars.copy_context(),
        )

    def calls(self, session_id: str) -> list[CallRecord]:
        """The calls recorded so far for ``session_id`` (empty for an unknown id)."""
        session = self._sessions.get(session_id)
        return list(session.calls) if session is not None else []

    def close_session(self, session_id: str) -> list[CallRecord]:
        """Stop recording ``session_id`` and return its calls in the order they finished."""
        session = self._sessions.pop(session_id, None)
        return list(session.calls) if session is not None else []

    @property
    def sessions(self) -> list[str]:
        return list(self._sessions)

    # ------------------------------------------------------------------ HTTP handlers

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Refuse a request without this gateway's bearer token before reading anything else of it."""
        if self._auth_token is None:
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            problem = "no bearer token: send 'Authorization: Bearer <token>' (an agent's ctx.api_key)"
        elif not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._auth_token.encode()):
            problem = "incorrect bearer token for this gateway"
        else:
            return await handler(request)
        self.num_refused += 1
        # only the route and the peer: never the token sent nor the one expected
        log = logger.warning if self.num_refused == 1 else logger.debug
        log(
            "OpenAI gateway refused %s %s from %s: %s (%d refused so far)",
            request.method,
            request.path,
            request.remote,
            problem,
            self.num_refused,
        )
        return _error_response(GatewayError(f"{problem}.", status=401, code="invalid_api_key"))

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except GatewayError as err:
            return _error_response(err)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = "not_found" if exc.status == 404 else None
            return _error_response(
                GatewayError(f"{request.method} {request.path}: {exc.reason}", status=exc.status, code=code)
            )
        except Exception as exc:  # noqa: BLE001 - a failing request must not take the server down
            logger.exception("OpenAI gateway: %s %s failed", request.method, request.path)
            return _error_response(GatewayError(f"internal error: {exc!r}", status=500, error_type="server_error"))

    async def _read_body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise GatewayError(f"request body is not valid JSON: {err}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise GatewayError(f"request body must be a JSON object, got {type(body).__name__}")
        return body

    @staticmethod
    def _session_id(request: web.Request, body: dict[str, Any]) -> str:
        session_id = request.match_info.get("session_id") or request.headers.get(SESSION_HEADER) or body.get("user")
        if not session_id:
            raise GatewayError(
                f"no trajectory id: use a base URL /session/<id>/v1, the {SESSION_HEADER} header or the 'user' field",
                param="user",
                code="missing_session",
            )
        return str(session_id)

    async def _handle_chat(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        return web.json_response(await self.chat_completion(body, self._session_id(request, body)))

    async def _handle_completion(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        return web.json_response(await self.completion(body, self._session_id(request, body)))

    async def _handle_models(self, request: web.Request) -> web.Response:
        model = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "verl"}
        return web.json_response({"object": "list", "data": [model]})

    # ------------------------------------------------------------------ endpoints (callable without HTTP)

    async def chat_completion(self, body: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Answer one ``/v1/chat/completions`` body for ``session_id``."""
        model = _check_common(body)
        messages = _chat_messages(body)
        tools = body.get("tools")
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise GatewayError("'tools' must be a list of tool objects", param="tools")
        template_kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(template_kwargs, dict):
            raise GatewayError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
        want_logprobs = _boolean(body, "logprobs", False)
        _integer(body, "top_logprobs", 0, 20)  # checked; alternatives are not reported (see the module doc)
        skip_special = _boolean(body, "skip_special_tokens", True)
        params = _request_sampling(body)
        stops = _stop_strings(body)
        prompt_ids = await self._render_chat(messages, tools, template_kwargs)
        record, text = await self._run(session_id, prompt_ids, params, stops, skip_special, "chat")

        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish_reason = record.finish_reason
        if tools:
            tool_calls, content = self._parse_tool_calls(text)
            if tool_calls:
                message = {"role": "assistant", "content": content or None, "tool_calls": tool_calls}
                finish_reason = "tool_calls"
        logprobs = None
        if want_logprobs:
            logprobs = {
                "content": [
                    {"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": []}
                    for token, lp in zip(self._token_strings(record.response_ids), record.response_logprobs or [])
                ]
            }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "token_ids": list(record.response_ids),
        }
        return self._envelope("chatcmpl", "chat.completion", model, record, choice)

    async def completion(self, body: dict[str, Any], session_id: str) -> dict[str, Any]:
        """Answer one ``/v1/completions`` body for ``session_id`` (one prompt: a string or token ids)."""
        model = _check_common(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if prompt is None:
            raise GatewayError("'prompt' is a required property", param="prompt", code="missing_required_parameter")
        if isinstance(prompt, str):
            if not prompt:
                raise GatewayError("'prompt' is empty", param="prompt")
            prompt_ids = await asyncio.to_thread(lambda: list(self.tokenizer(prompt)["input_ids"]))
        elif (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_ids = list(prompt)
        else:
            raise GatewayError(
                "'prompt' must be one string or one non-empty list of token ids (several prompts per "
                "request are not supported)",
                param="prompt",
            )
        if _boolean(body, "echo", False):
            raise GatewayError("echo is not supported by the verl gateway", param="echo", code="unsupported_parameter")
        want_logprobs = _integer(body, "logprobs", 0, 20) is not None
        skip_special = _boolean(body, "skip_special_tokens", True)
        params = _request_sampling(body)
        stops = _stop_strings(body)
        record, text = await self._run(session_id, prompt_ids, params, stops, skip_special, "completions")
        logprobs = None
        if want_logprobs:
            tokens = self._token_strings(record.response_ids)
            offsets, position = [], 0
            for token in tokens:
                offsets.append(position)
                position += len(token)
            logprobs = {
                "tokens": tokens,
                "token_logprobs": list(record.response_logprobs or []),
                "top_logprobs": None,
                "text_offset": offsets,
            }
        choice = {
            "index": 0,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": record.finish_reason,
            "token_ids": list(record.response_ids),
        }
        return self._envelope("cmpl", "text_completion", model, record, choice)

    # ------------------------------------------------------------------ internals

    def _envelope(self, prefix: str, kind: str, model: str, record: CallRecord, choice: dict) -> dict[str, Any]:
        prompt_tokens, completion_tokens = len(record.prompt_ids), len(record.response_ids)
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "prompt_token_ids": list(record.prompt_ids),
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def _render_chat(self, messages: list[dict], tools: list | None, template_kwargs: dict) -> list[int]:
        def render() -> list[int]:
            ids = self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                **template_kwargs,
            )
            return [int(t) for t in ids]

        try:
            return await asyncio.to_thread(render)
        except Exception as err:  # noqa: BLE001 - jinja raises many kinds; all mean "these messages don't render"
            raise GatewayError(f"the chat template cannot render these messages: {err}", param="messages") from None

    def _token_strings(self, token_ids: list[int]) -> list[str]:
        return [self.tokenizer.decode([t], skip_special_tokens=False) for t in token_ids]

    def _parse_tool_calls(self, text: str) -> tuple[list[dict[str, Any]], str]:
        if self._tool_parser is None:
            from verl.experimental.agent_loop.tool_parser import TextToolParser, get_tool_parser

            parser = get_tool_parser(self.tool_parser_name, self.tokenizer)
            if not isinstance(parser, TextToolParser):
                raise GatewayError(
                    f"tool parser {self.tool_parser_name!r} reads token ids, not text; the gateway "
                    "needs a TextToolParser subclass",
                    status=500,
                )
            self._tool_parser = parser
        parsed = self._tool_parser.parse(text)
        if not parsed.calls or parsed.errors:
            return [], text  # nothing readable: the client gets the raw text as content
        calls = [
            {
                "id": call.tool_call_id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in parsed.calls
        ]
        return calls, parsed.content

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:  # first request of an id nobody opened: record it with the gateway's defaults
            session = self._sessions[session_id] = _Session(dict(self.default_sampling_params), False, explicit=False)
        return session

    def _merge_params(self, session: _Session, requested: dict[str, Any]) -> dict[str, Any]:
        params = dict(session.defaults)
        locked = ("temperature", "top_p", "top_k", "do_sample") if session.lock_sampling else ()
        for key, value in requested.items():
            if key not in locked:
                params[key] = value
        if session.explicit and "max_tokens" in requested and "max_tokens" in session.defaults:
            params["max_tokens"] = min(int(requested["max_tokens"]), int(session.defaults["max_tokens"]))
        if "seed" in params and session.counter:
            params["seed"] = int(params["seed"]) + 7919 * session.counter  # a fresh stream for each call
        params["logprobs"] = True  # always recorded, returned only when asked for
        return params

    async def _run(
        self,
        session_id: str,
        prompt_ids: list[int],
        requested: dict[str, Any],
        stops: list[str],
        skip_special: bool,
        endpoint: str,
    ) -> tuple[CallRecord, str]:
        if self.max_prompt_tokens is not None and len(prompt_ids) > self.max_prompt_tokens:
            raise GatewayError(
                f"This model's maximum context length is {self.max_prompt_tokens} prompt tokens. However, your "
                f"{'messages' if endpoint == 'chat' else 'prompt'} resulted in {len(prompt_ids)} tokens.",
                param="messages" if endpoint == "chat" else "prompt",
                code="context_length_exceeded",
            )
        session = self._session(session_id)
        params = self._merge_params(session, requested)
        request_id = session_id if session.in_flight == 0 else f"{session_id}-{session.counter}"
        session.counter += 1
        session.in_flight += 1
        try:
            generate = self._generate(request_id, prompt_ids, params, "messages" if endpoint == "chat" else "prompt")
            if session.context is not None and sys.version_info >= (3, 11):
                record = await asyncio.get_running_loop().create_task(generate, context=session.context.copy())
            else:
                record = await generate
        finally:
            session.in_flight -= 1
        record.endpoint = endpoint
        text = await asyncio.to_thread(self._finish_text, record, params, stops, skip_special)
        if self._sessions.get(session_id) is session:  # a session closed meanwhile records nothing
            session.calls.append(record)
        return record, text

    async def _generate(
        self, request_id: str, prompt_ids: list[int], params: dict[str, Any], param: str = "messages"
    ) -> CallRecord:
        try:
            out = await self.server_manager.generate(request_id, prompt_ids=prompt_ids, sampling_params=dict(params))
        except ValueError as err:  # the engine refused the request itself (too long, bad token id)
            raise GatewayError(str(err), param=param) from None
        if out.stop_reason == "aborted":
            raise GatewayError(
                f"request {request_id} was aborted by a weight sync and {type(self.server_manager).__name__} did not "
                "resume it; serve the gateway through a server manager that does (PartialRolloutServerManager)",
                status=503,
                code="aborted",
                error_type="server_error",
            )
        tokens = [int(t) for t in out.token_ids]
        return CallRecord(
            prompt_ids=list(prompt_ids),
            response_ids=tokens,
            response_logprobs=list(out.log_probs) if out.log_probs is not None else [0.0] * len(tokens),
            finish_reason=out.stop_reason,
            extra=dict(out.extra or {}),
        )

    def _finish_text(self, record: CallRecord, params: dict[str, Any], stops: list[str], skip_special: bool) -> str:
        """Decode the response; cut it (and the record) at the first stop string, as an engine with stop strings
        would have stopped there."""
        tokens = record.response_ids
        stop_ids = set(params.get("stop_token_ids") or [])
        if self.tokenizer.eos_token_id is not None:
            stop_ids.add(int(self.tokenizer.eos_token_id))
        shown = tokens[:-1] if record.finish_reason == "stop" and tokens and tokens[-1] in stop_ids else tokens
        text = self.tokenizer.decode(shown, skip_special_tokens=skip_special)
        hits = [(text.find(s), s) for s in stops if s in text]
        if not hits:
            return text
        cut, _ = min(hits)
        lo, hi = 1, len(shown)  # the shortest token prefix whose text already holds the stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in self.tokenizer.decode(shown[:mid], skip_special_tokens=skip_special) for s in stops):
                hi = mid
            else:
                lo = mid + 1
        record.response_ids = tokens[:lo]
        if record.response_logprobs is not None:
            record.response_logprobs = record.response_logprobs[:lo]
        record.finish_reason = "stop"
        return text[:cut]


_SHARED: dict[tuple[int, str, str | None], tuple[asyncio.AbstractEventLoop, Any, asyncio.Future]] = {}


async def shared_gateway(server_manager: Any, tokenizer: Any, **kwargs: Any) -> OpenAIGateway:
    """The one gateway of this event loop for ``server_manager`` (and ``host``/``auth_token``), started on first use
    (agent loops share it)."""
    loop = asyncio.get_running_loop()
    for key, (owner_loop, _, _) in list(_SHARED.items()):
        if owner_loop.is_closed():
            del _SHARED[key]
    key = (id(server_manager), kwargs.get("host", "127.0.0.1"), kwargs.get("auth_token"))
    entry = _SHARED.get(key)
    if entry is None or entry[0] is not loop or entry[1] is not server_manager:
        gateway = OpenAIGateway(server_manager, tokenizer, **kwargs)

        async def start() -> OpenAIGateway:
            await gateway.start()
            return gateway

        entry = (loop, server_manager, asyncio.ensure_future(start()))
        _SHARED[key] = entry
    try:
        return await asyncio.shield(entry[2])
    except Exception:
        if _SHARED.get(key) is entry:
            del _SHARED[key]
        raise
