"""OpenAIGateway driven by the official ``openai`` client over HTTP, in front of the real hf engine (tiny model).

What the client receives must be exactly what the gateway recorded for training: token ids, text, log-probs.
Malformed requests get OpenAI-shaped 4xx bodies and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
import torch
from _agent_loop_helpers import greedy, make_config

from verl.experimental.agent_loop.openai_gateway import SESSION_HEADER, OpenAIGateway, shared_gateway
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager
from verl.workers.config import MultiTurnConfig

openai = pytest.importorskip("openai")
aiohttp = pytest.importorskip("aiohttp")

MESSAGES = [{"role": "user", "content": "hi there"}]
GREEDY = {"temperature": 0.0, "do_sample": False, "ignore_eos": True, "max_tokens": 32}


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def replica(tiny_model_dir, make_replica):
    config = make_config(
        tiny_model_dir, prompt_length=40, response_length=40, max_model_len=480, multi_turn=MultiTurnConfig(enable=True)
    )
    return make_replica(config["rollout"])


def run_with_gateway(replica, tokenizer, body, **gateway_kwargs):
    """Start a gateway on a fresh loop, run ``await body(gateway)``, stop it."""

    async def main():
        gateway = OpenAIGateway(AsyncLLMServerManager([replica]), tokenizer, **gateway_kwargs)
        await gateway.start()
        try:
            return await body(gateway)
        finally:
            await gateway.stop()

    return asyncio.run(main())


@torch.no_grad()
def reference_log_probs(model, prompt, response):
    logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()


def test_chat_completion_returns_exactly_the_recorded_tokens(replica, tokenizer, tiny_lm):
    async def body(gateway):
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("traj-1"), api_key="x")
        reply = await client.chat.completions.create(
            model="policy", messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True
        )
        return reply, gateway.calls("traj-1")

    reply, calls = run_with_gateway(replica, tokenizer, body, default_sampling_params=GREEDY)
    assert len(calls) == 1
    call = calls[0]
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert call.prompt_ids == prompt and call.endpoint == "chat"
    assert call.response_ids == greedy(tiny_lm, prompt, 6)  # the engine saw the templated prompt
    choice = reply.choices[0]
    assert choice.token_ids == call.response_ids  # extension field: the ids the trainer will see
    assert reply.prompt_token_ids == prompt
    assert choice.message.content == tokenizer.decode(call.response_ids, skip_special_tokens=True)
    assert choice.finish_reason == call.finish_reason == "length"
    assert [t.logprob for t in choice.logprobs.content] == call.response_logprobs
    assert call.response_logprobs == pytest.approx(reference_log_probs(tiny_lm, prompt, call.response_ids), abs=1e-4)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(prompt), 6)


def test_completions_and_the_three_ways_to_name_a_session(replica, tokenizer, tiny_lm):
    async def body(gateway):
        by_header = openai.AsyncOpenAI(
            base_url=gateway.base_url, api_key="x", default_headers={SESSION_HEADER: "by-header"}
        )
        text = await by_header.completions.create(model="policy", prompt="ab", max_tokens=4, logprobs=1)
        plain = openai.AsyncOpenAI(base_url=gateway.base_url, api_key="x")
        ids = await plain.completions.create(model="policy", prompt=[1, 40, 41], max_tokens=3, user="by-user")
        models = await plain.models.list()
        return text, ids, [m.id for m in models.data], gateway.calls("by-header"), gateway.calls("by-user")

    text, ids, models, header_calls, user_calls = run_with_gateway(
        replica, tokenizer, body, default_sampling_params=GREEDY, model_name="tiny"
    )
    assert models == ["tiny"]
    [call] = header_calls
    assert call.prompt_ids == tokenizer("ab")["input_ids"] and call.endpoint == "completions"
    assert text.choices[0].token_ids == call.response_ids and len(call.response_ids) == 4
    assert text.choices[0].text == tokenizer.decode(call.response_ids, skip_special_tokens=True)
    assert text.choices[0].logprobs.token_logprobs == call.response_logprobs
    [call] = user_calls
    assert call.prompt_ids == [1, 40, 41] and ids.choices[0].token_ids == call.response_ids
    assert call.response_ids == greedy(tiny_lm, [1, 40, 41], 3)


def test_stop_string_cuts_text_and_record(replica, tokenizer):
    async def body(gateway):
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("s"), api_key="x")
        full = await client.completions.create(model="m", prompt="ab", max_tokens=12)
        text = full.choices[0].text
        stop = text[3:5]  # two characters the model writes after three others
        cut = await client.completions.create(model="m", prompt="ab", max_tokens=12, stop=[stop])
        return full, cut, stop, gateway.calls("s")

    full, cut, stop, calls = run_with_gateway(replica, tokenizer, body, default_sampling_params=GREEDY)
    first_hit = full.choices[0].text.index(stop)
    assert cut.choices[0].text == full.choices[0].text[:first_hit]
    assert cut.choices[0].finish_reason == "stop"
    # the record keeps the tokens up to the one completing the stop string, as an engine stopping there would
    ids = full.choices[0].token_ids
    keep = next(k for k in range(1, len(ids) + 1) if stop in tokenizer.decode(ids[:k], skip_special_tokens=True))
    assert calls[1].response_ids == ids[:keep] and keep < len(ids)
    assert len(calls[1].response_logprobs) == len(calls[1].response_ids)


async def _abort_once_decoding(replica, gateway_client_call, manager=None):
    """Start ``gateway_client_call``, abort the replica's requests while it decodes (a weight sync), resume."""
    task = asyncio.ensure_future(gateway_client_call)
    for _ in range(2000):  # wait until the request decodes
        if replica.num_running:
            break
        await asyncio.sleep(0.005)
    if manager is not None:
        manager.pause()
    await replica.abort_all()  # in-flight requests come back "aborted"
    await asyncio.sleep(0.05)
    await replica.resume()
    if manager is not None:
        manager.resume(1)
    return await asyncio.wait_for(task, 60)


def test_call_aborted_by_a_weight_sync_continues_through_the_partial_rollout_manager(replica, tokenizer, tiny_lm):
    async def main():
        manager = PartialRolloutServerManager([replica])
        gateway = OpenAIGateway(manager, tokenizer, default_sampling_params=GREEDY)
        await gateway.start()
        try:
            client = openai.AsyncOpenAI(base_url=gateway.session_base_url("long"), api_key="x")
            call = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=120)
            return await _abort_once_decoding(replica, call, manager), gateway.calls("long"), manager.num_aborted
        finally:
            await gateway.stop()

    reply, calls, aborted = asyncio.run(main())
    assert aborted >= 1 and calls[0].extra["num_aborts"] >= 1
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].token_ids == calls[0].response_ids == greedy(tiny_lm, prompt, 120)
    assert len(calls[0].response_logprobs) == 120


def test_call_aborted_under_a_manager_that_does_not_resume_is_a_503_naming_it(replica, tokenizer):
    async def body(gateway):
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("cut"), api_key="x", max_retries=0)
        call = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=120)
        with pytest.raises(openai.APIStatusError) as refused:
            await _abort_once_decoding(replica, call)
        return refused.value, gateway.calls("cut")

    refused, calls = run_with_gateway(replica, tokenizer, body, default_sampling_params=GREEDY)
    assert refused.status_code == 503 and "AsyncLLMServerManager did not resume it" in refused.message
    assert calls == []  # nothing recorded for a call that was not answered


MALFORMED = [
    # (what, raw body, expected status, words in the message, code)
    ("bad json", b"{not json", 400, "not valid JSON", "invalid_json"),
    ("not an object", b"[1, 2]", 400, "JSON object", None),
    ("missing messages", json.dumps({"model": "m"}).encode(), 400, "'messages' is a required", None),
    ("messages not a list", json.dumps({"model": "m", "messages": "hi"}).encode(), 400, "non-empty list", None),
    (
        "message without role",
        json.dumps({"model": "m", "messages": [{"content": "x"}]}).encode(),
        400,
        "messages[0].role",
        None,
    ),
    ("model is a number", json.dumps({"model": 7, "messages": MESSAGES}).encode(), 400, "'model' must be", None),
    ("model is a dict", json.dumps({"model": {"a": 1}, "messages": MESSAGES}).encode(), 400, "'model' must be", None),
    ("missing model", json.dumps({"messages": MESSAGES}).encode(), 400, "model parameter", None),
    (
        "temperature is a string",
        json.dumps({"model": "m", "messages": MESSAGES, "temperature": "hot"}).encode(),
        400,
        "'temperature'",
        None,
    ),
    (
        "max_tokens zero",
        json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 0}).encode(),
        400,
        "'max_tokens'",
        None,
    ),
    (
        "stream",
        json.dumps({"model": "m", "messages": MESSAGES, "stream": True}).encode(),
        400,
        "stream is not supported",
        "unsupported_parameter",
    ),
    ("n=2", json.dumps({"model": "m", "messages": MESSAGES, "n": 2}).encode(), 400, "n=2", "unsupported_parameter"),
    (
        "unknown role",
        json.dumps({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}).encode(),
        400,
        "chat template",
        None,
    ),
    (
        "image part",
        json.dumps(
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            }
        ).encode(),
        400,
        "only text parts",
        None,
    ),
    (
        "too long prompt",
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 200}]}).encode(),
        400,
        "maximum context length is 100",
        "context_length_exceeded",
    ),
]


def test_malformed_requests_get_openai_errors_and_the_server_keeps_serving(replica, tokenizer):
    async def body(gateway):
        url = gateway.session_base_url("bad") + "/chat/completions"
        results = []
        async with aiohttp.ClientSession() as http:
            for what, raw, *_ in MALFORMED:
                async with http.post(url, data=raw, headers={"Content-Type": "application/json"}) as response:
                    results.append((what, response.status, await response.json()))
            async with http.post(
                gateway.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES}
            ) as response:
                results.append(("no session", response.status, await response.json()))
            async with http.get(gateway.base_url + "/nowhere") as response:
                results.append(("unknown route", response.status, await response.json()))
            async with http.post(
                gateway.session_base_url("bad") + "/completions", json={"model": "m", "prompt": ["a", "b"]}
            ) as response:
                results.append(("two prompts", response.status, await response.json()))
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("good"), api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="m", messages=[], max_tokens=2)
        ok = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
        return results, raised.value, ok, gateway.calls("bad"), gateway.calls("good")

    results, client_error, ok, bad_calls, good_calls = run_with_gateway(
        replica, tokenizer, body, default_sampling_params=GREEDY, max_prompt_tokens=100
    )
    for (what, _, status, words, code), (_, got_status, got) in zip(MALFORMED, results):
        assert got_status == status, (what, got)
        assert set(got["error"]) == {"message", "type", "param", "code"}, what
        assert words in got["error"]["message"], (what, got)
        assert got["error"]["type"] == "invalid_request_error", what
        if code is not None:
            assert got["error"]["code"] == code, (what, got)
    extra = {what: (status, got) for what, status, got in results[len(MALFORMED) :]}
    assert extra["no session"][0] == 400 and SESSION_HEADER in extra["no session"][1]["error"]["message"]
    assert extra["unknown route"][0] == 404 and extra["unknown route"][1]["error"]["code"] == "not_found"
    assert extra["two prompts"][0] == 400 and "several prompts" in extra["two prompts"][1]["error"]["message"]
    assert client_error.status_code == 400 and "non-empty list" in client_error.message
    assert bad_calls == []  # nothing malformed reached the engine
    assert len(good_calls) == 1 and ok.choices[0].token_ids == good_calls[0].response_ids


def test_engine_refusal_is_a_400_not_a_crash(replica, tokenizer):
    async def body(gateway):
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("s"), api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            await client.completions.create(model="m", prompt=[1, 10_000], max_tokens=2)  # id outside the vocab
        ok = await client.completions.create(model="m", prompt=[1, 40], max_tokens=2)
        return raised.value, ok

    error, ok = run_with_gateway(replica, tokenizer, body, default_sampling_params=GREEDY)
    assert "outside the vocabulary" in error.message
    assert len(ok.choices[0].token_ids) == 2


def test_session_defaults_lock_sampling_and_cap_max_tokens(replica, tokenizer):
    async def body(gateway):
        gateway.open_session("locked", {**GREEDY, "max_tokens": 3}, lock_sampling=True)
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("locked"), api_key="x")
        first = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50, temperature=1.5)
        second = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50, temperature=1.5)
        with pytest.raises(ValueError, match="already open"):
            gateway.open_session("locked")
        return first, second, gateway.close_session("locked"), gateway.sessions

    first, second, calls, open_sessions = run_with_gateway(replica, tokenizer, body)
    assert len(calls) == 2 and "locked" not in open_sessions
    assert len(first.choices[0].token_ids) == 3  # capped by the session's max_tokens
    assert first.choices[0].token_ids == second.choices[0].token_ids  # greedy kept despite temperature=1.5


def test_shared_gateway_is_one_per_loop_and_manager(replica, tokenizer):
    async def main():
        manager = AsyncLLMServerManager([replica])
        first, second = await asyncio.gather(shared_gateway(manager, tokenizer), shared_gateway(manager, tokenizer))
        other = await shared_gateway(AsyncLLMServerManager([replica]), tokenizer)
        try:
            return first is second, first is other, first.port != other.port
        finally:
            await first.stop()
            await other.stop()

    assert asyncio.run(main()) == (True, False, True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tasks inherit a given context from Python 3.11")
def test_calls_run_in_the_session_openers_context(replica, tokenizer):
    """A session's calls see the context variables of the loop that opened it (its trace attributes), as if the loop
    had made them; a session nobody opened sees none."""
    from verl.experimental.agent_loop.trace import current_trajectory, rollout_trace_attr

    class TraceRecordingManager(AsyncLLMServerManager):
        async def generate(self, request_id, **kwargs):
            seen.append((request_id, current_trajectory()))
            return await super().generate(request_id, **kwargs)

    seen = []

    async def main():
        gateway = OpenAIGateway(TraceRecordingManager([replica]), tokenizer)
        await gateway.start()
        try:
            with rollout_trace_attr(step=3, sample_index=7):
                gateway.open_session("sample", GREEDY)
            client = openai.AsyncOpenAI(base_url=gateway.session_base_url("sample"), api_key="x")
            await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
            unopened = openai.AsyncOpenAI(base_url=gateway.session_base_url("other"), api_key="x")
            await unopened.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
        finally:
            await gateway.stop()

    asyncio.run(main())
    assert [request_id for request_id, _ in seen] == ["sample", "other"]
    assert seen[0][1]["step"] == 3 and seen[0][1]["sample_index"] == 7
    assert seen[1][1] is None


# ---------------------------------------------------------------------- bearer token (agents on other nodes)


def routable_ip() -> str:
    from verl.experimental.agent_loop.openai_gateway import is_loopback_host, node_ip_address

    ip = node_ip_address()
    if is_loopback_host(ip):
        pytest.skip("this machine has no non-loopback IPv4 address to bind the gateway to")
    return ip


async def raw_post(url, token=None, scheme="Bearer"):
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url, json={"model": "m", "messages": MESSAGES, "max_tokens": 2}, headers=headers
        ) as response:
            return response.status, dict(response.headers), await response.json()


def test_off_loopback_every_request_needs_the_gateways_bearer_token(replica, tokenizer):
    ip = routable_ip()

    async def body(gateway):
        url = gateway.session_base_url("s") + "/chat/completions"
        refused = {
            "missing": await raw_post(url),
            "wrong": await raw_post(url, token="not-the-token"),
            "basic scheme": await raw_post(url, token=gateway.auth_token, scheme="Basic"),
            "empty": await raw_post(url, token=""),
        }
        async with aiohttp.ClientSession() as http:
            async with http.get(gateway.base_url + "/models") as response:
                refused["models"] = (response.status, dict(response.headers), await response.json())
        wrong = openai.AsyncOpenAI(base_url=gateway.session_base_url("s"), api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as raised:
            await wrong.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
        calls_after_refusals = gateway.calls("s")
        client = openai.AsyncOpenAI(base_url=gateway.session_base_url("s"), api_key=gateway.auth_token)
        ok = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
        return refused, raised.value, calls_after_refusals, ok, gateway.calls("s"), gateway

    refused, client_error, calls_after_refusals, ok, calls, gateway = run_with_gateway(
        replica, tokenizer, body, host=ip, default_sampling_params=GREEDY
    )
    assert gateway.requires_auth and len(gateway.auth_token) >= 32
    assert gateway.num_refused == len(refused) + 1
    for what, (status, headers, got) in refused.items():
        assert status == 401, what
        assert headers["WWW-Authenticate"].startswith("Bearer"), what
        assert set(got["error"]) == {"message", "type", "param", "code"} and got["error"]["code"] == "invalid_api_key"
    assert "no bearer token" in refused["missing"][2]["error"]["message"]
    assert "incorrect bearer token" in refused["wrong"][2]["error"]["message"]
    assert client_error.status_code == 401
    assert calls_after_refusals == []  # a refused request never reaches the engine
    assert len(calls) == 1 and ok.choices[0].token_ids == calls[0].response_ids


def test_a_fresh_token_per_gateway_and_a_wildcard_bind_advertises_the_node_ip(replica, tokenizer):
    ip = routable_ip()

    async def main():
        manager = AsyncLLMServerManager([replica])
        first = OpenAIGateway(manager, tokenizer, host="0.0.0.0", default_sampling_params=GREEDY)
        second = OpenAIGateway(manager, tokenizer, host=ip, auth_token="given-token")
        await first.start()
        try:
            client = openai.AsyncOpenAI(base_url=first.session_base_url("w"), api_key=first.auth_token)
            reply = await client.completions.create(model="m", prompt=[1, 40], max_tokens=2)
            return first.base_url, first.auth_token, second.auth_token, reply
        finally:
            await first.stop()

    base_url, first_token, second_token, reply = asyncio.run(main())
    assert base_url.startswith(f"http://{ip}:")  # reachable from other nodes, not 0.0.0.0
    assert first_token and second_token == "given-token"
    assert first_token != OpenAIGateway(None, tokenizer, host="0.0.0.0").auth_token
    assert len(reply.choices[0].token_ids) == 2


def test_loopback_needs_no_token_but_checks_one_when_given(replica, tokenizer):
    async def body(gateway):
        return (
            await raw_post(gateway.session_base_url("a") + "/chat/completions"),
            await raw_post(gateway.session_base_url("a") + "/chat/completions", token="anything"),
        )

    open_results = run_with_gateway(replica, tokenizer, body, default_sampling_params=GREEDY)
    assert [status for status, *_ in open_results] == [200, 200]

    async def checked(gateway):
        url = gateway.session_base_url("b") + "/chat/completions"
        return await raw_post(url), await raw_post(url, token="run-token-1"), await raw_post(url, token="run-token-2")

    missing, right, wrong = run_with_gateway(
        replica, tokenizer, checked, default_sampling_params=GREEDY, auth_token="run-token-1"
    )
    assert (missing[0], right[0], wrong[0]) == (401, 200, 401)
    assert OpenAIGateway(None, tokenizer).auth_token is None
    with pytest.raises(ValueError, match="auth_token"):
        OpenAIGateway(None, tokenizer, auth_token="")


def test_the_token_stays_out_of_logs_reprs_records_and_errors(replica, tokenizer, caplog):
    import logging

    from verl.experimental.agent_loop.openai_agent_loop import OpenAIAgentContext

    token = "tok-" + "s3cr3t" * 6

    async def body(gateway):
        url = gateway.session_base_url("t") + "/chat/completions"
        replies = [await raw_post(url), await raw_post(url, token=token[:-1]), await raw_post(url, token=token)]
        async with aiohttp.ClientSession() as http:  # a 400 and a 404 with the right token
            headers = {"Authorization": f"Bearer {token}"}
            async with http.post(url, data=b"{bad", headers=headers) as response:
                replies.append((response.status, {}, await response.json()))
            async with http.get(gateway.base_url + "/nowhere", headers=headers) as response:
                replies.append((response.status, {}, await response.json()))
        for key in (token, token[:-1]):  # the official client, which logs its requests at DEBUG
            client = openai.AsyncOpenAI(base_url=gateway.session_base_url("t"), api_key=key, max_retries=0)
            try:
                await client.completions.create(model="m", prompt=[1, 40], max_tokens=2)
                replies.append((200, {}, {}))
            except openai.AuthenticationError as err:
                replies.append((err.status_code, {}, err.body))
        return replies, repr(gateway), gateway.calls("t")

    with caplog.at_level(logging.DEBUG):
        replies, gateway_repr, calls = run_with_gateway(
            replica, tokenizer, body, default_sampling_params=GREEDY, auth_token=token
        )
    assert [status for status, *_ in replies] == [401, 401, 200, 400, 404, 200, 401]
    assert any("refused" in record.getMessage() for record in caplog.records)  # the refusal is logged ...
    for record in caplog.records:  # ... without the token, nor any prefix of it an attacker could extend
        assert token[:-1] not in record.getMessage() and token[:-1] not in str(record.args), record.getMessage()
    assert "bearer token" in gateway_repr and token not in gateway_repr
    assert all(token[:-1] not in json.dumps(got) for _, _, got in replies)
    assert len(calls) == 2 and token not in repr(calls)
    ctx = OpenAIAgentContext(base_url="http://h/v1", api_key=token, model="m", session_id="t", messages=None, sample={})
    assert token not in repr(ctx)


def test_openai_agent_loop_gateway_host_hands_the_agent_a_routable_url_and_the_token(
    tiny_model_dir, make_replica, tokenizer
):
    from verl.experimental.agent_loop.openai_agent_loop import OpenAIAgentLoop

    ip = routable_ip()
    seen = {}

    async def agent(ctx):
        seen["ctx"] = ctx
        seen["reply"] = await ctx.client(max_retries=0).chat.completions.create(
            model=ctx.model, messages=MESSAGES, max_tokens=2
        )
        return 1.0

    config = make_config(tiny_model_dir, prompt_length=40, response_length=8)
    loop = OpenAIAgentLoop(
        config,
        AsyncLLMServerManager([make_replica(config["rollout"])]),
        tokenizer,
        agent_fn=agent,
        gateway_host="0.0.0.0",
    )

    async def main():
        out = await loop.run({**GREEDY, "max_tokens": 2}, raw_prompt=MESSAGES)
        gateway = await loop.gateway()
        await gateway.stop()
        return out, gateway

    out, gateway = asyncio.run(main())
    ctx = seen["ctx"]
    assert ctx.base_url.startswith(f"http://{ip}:") and ctx.api_key == gateway.auth_token
    assert gateway.host == "0.0.0.0" and gateway.requires_auth
    assert out.response_ids == seen["reply"].choices[0].token_ids and out.reward_score == 1.0
