"""Behaviour of the embedded hf engine: batching invariance, log-probs, stops, abort/pause, weights, limits."""

from __future__ import annotations

import asyncio

import pytest
import torch
from _rollout_helpers import random_prompts, reference_greedy, reference_log_probs, rollout_config

from verl.utils.weight_checksum import weight_checksum

GREEDY = {"temperature": 0.0, "ignore_eos": True}


async def _gather(server, prompts, params_list, prefix="r"):
    return await asyncio.gather(
        *[server.generate(p, params, f"{prefix}{i}") for i, (p, params) in enumerate(zip(prompts, params_list))]
    )


@pytest.mark.parametrize("min_admit_chunk", [1, None])
def test_greedy_output_same_alone_and_in_busy_batch(make_server, tiny_causal_lm, min_admit_chunk):
    server = make_server(min_admit_chunk=min_admit_chunk)
    prompts = random_prompts(9, server.vocab_size, seed=1)
    params = [dict(GREEDY, max_tokens=2 + 2 * i) for i in range(len(prompts))]

    async def run():
        alone = [await server.generate(p, params[i], f"alone{i}") for i, p in enumerate(prompts)]
        busy = await _gather(server, prompts, params)
        return alone, busy

    alone, busy = asyncio.run(run())
    for i, (a, b) in enumerate(zip(alone, busy)):
        assert b.token_ids == a.token_ids, f"request {i} differs in a busy batch"
        assert b.stop_reason == "length" and len(b.token_ids) == params[i]["max_tokens"]
    for i in (0, 8):  # the engine (cache, padding, merging) matches plain full forwards
        assert busy[i].token_ids == reference_greedy(tiny_causal_lm, prompts[i], params[i]["max_tokens"])


def test_log_probs_equal_full_forward(make_server, tiny_causal_lm):
    server = make_server()
    prompts = random_prompts(6, server.vocab_size, seed=2)
    params = [
        {"temperature": 0.7, "top_k": 5, "max_tokens": 12, "logprobs": True, "ignore_eos": True},
        {"temperature": 1.0, "max_tokens": 20, "logprobs": True, "ignore_eos": True},
        {"temperature": 1.3, "top_p": 0.8, "max_tokens": 7, "logprobs": True, "ignore_eos": True},
        {"temperature": 0.0, "max_tokens": 15, "logprobs": True, "ignore_eos": True},
        {"temperature": 0.9, "max_tokens": 9, "logprobs": True},
        {"temperature": 1.0, "max_tokens": 25, "logprobs": True, "seed": 3, "ignore_eos": True},
    ]
    outputs = asyncio.run(_gather(server, prompts, params))
    for prompt, p, out in zip(prompts, params, outputs):
        temperature = p["temperature"] or 1.0
        expected = reference_log_probs(tiny_causal_lm, prompt, out.token_ids, temperature)
        assert len(out.log_probs) == len(out.token_ids)
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=1e-5, rtol=0)


def test_log_probs_off_unless_asked(make_server):
    server = make_server(rollout_config(calculate_log_probs=False))
    out = asyncio.run(server.generate([5, 6, 7], dict(GREEDY, max_tokens=4), "a"))
    assert out.log_probs is None
    out = asyncio.run(server.generate([5, 6, 7], dict(GREEDY, max_tokens=4, logprobs=True), "b"))
    assert len(out.log_probs) == 4


def test_stop_token_ends_request_and_is_included(make_server, tiny_causal_lm):
    server = make_server()
    prompt = [7, 8, 9, 10]
    full = reference_greedy(tiny_causal_lm, prompt, 10)
    stop = full[3]
    first = full.index(stop)
    out = asyncio.run(server.generate(prompt, dict(GREEDY, max_tokens=10, stop_token_ids=[stop]), "s"))
    assert out.token_ids == full[: first + 1]
    assert out.stop_reason == "stop"


def test_eos_stops_unless_ignored(make_server, tiny_causal_lm):
    prompt = [7, 8, 9, 10]
    full = reference_greedy(tiny_causal_lm, prompt, 6)
    server = make_server(eos_token_ids=[full[2]])
    out = asyncio.run(server.generate(prompt, {"temperature": 0.0, "max_tokens": 6}, "e"))
    assert out.token_ids == full[: full.index(full[2]) + 1] and out.stop_reason == "stop"
    out = asyncio.run(server.generate(prompt, dict(GREEDY, max_tokens=6), "i"))
    assert out.token_ids == full and out.stop_reason == "length"


def test_seeded_sampling_does_not_depend_on_the_batch(make_server):
    server = make_server()
    prompts = random_prompts(8, server.vocab_size, seed=3)
    params = [{"temperature": 1.0, "max_tokens": 10, "ignore_eos": True, "seed": 100 + i} for i in range(8)]

    async def run():
        alone = await server.generate(prompts[0], params[0], "alone")
        busy = await _gather(server, prompts, params)
        return alone, busy

    alone, busy = asyncio.run(run())
    assert busy[0].token_ids == alone.token_ids
    assert len({tuple(o.token_ids) for o in busy}) > 1


def test_top_k_one_is_greedy(make_server, tiny_causal_lm):
    server = make_server()
    prompt = [4, 5, 6]
    out = asyncio.run(
        server.generate(prompt, {"temperature": 1.5, "top_k": 1, "max_tokens": 8, "ignore_eos": True}, "k")
    )
    assert out.token_ids == reference_greedy(tiny_causal_lm, prompt, 8)


def test_abort_returns_partial_tokens_and_loses_no_request(make_server):
    server = make_server(rollout_config(response_length=400, prompt_length=16, max_model_len=416))
    prompts = random_prompts(10, server.vocab_size, max_len=8, seed=4)
    params = [dict(GREEDY, max_tokens=400)] * len(prompts)

    async def run():
        tasks = [asyncio.create_task(server.generate(p, params[0], f"r{i}")) for i, p in enumerate(prompts)]
        while not any(len(r.token_ids) >= 3 for r in server._rows):
            await asyncio.sleep(0.002)
        await server.abort_all()
        outputs = await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
        late = asyncio.create_task(server.generate(prompts[0], dict(GREEDY, max_tokens=4), "late"))
        await asyncio.sleep(0.05)
        waited = not late.done()
        await server.resume()
        return outputs, waited, await asyncio.wait_for(late, timeout=5)

    outputs, waited, late = asyncio.run(run())
    assert len(outputs) == 10 and all(o.stop_reason == "aborted" for o in outputs)
    partial = [o for o in outputs if o.token_ids]
    assert partial and all(0 < len(o.token_ids) < 400 for o in partial)
    assert all(len(o.log_probs) == len(o.token_ids) for o in outputs)
    assert waited, "a request made while paused must wait for resume"
    assert late.stop_reason == "length" and len(late.token_ids) == 4
    assert server.num_running == 0 and server.num_waiting == 0


def test_generate_while_paused_times_out_naming_the_request(make_server):
    server = make_server(pause_timeout_s=0.1)

    async def run():
        await server.abort_all()
        await server.generate([1, 2, 3], GREEDY, "req-paused-7")

    with pytest.raises(TimeoutError, match="req-paused-7"):
        asyncio.run(run())


def test_cancelled_request_leaves_the_batch(make_server):
    server = make_server(rollout_config(response_length=300, max_model_len=340))

    async def run():
        doomed = asyncio.create_task(server.generate([3, 4, 5], dict(GREEDY, max_tokens=300), "doomed"))
        kept = asyncio.create_task(server.generate([6, 7], dict(GREEDY, max_tokens=20), "kept"))
        while server.num_running < 2:
            await asyncio.sleep(0.002)
        doomed.cancel()
        out = await asyncio.wait_for(kept, timeout=5)
        for _ in range(100):
            if server.num_running == 0:
                break
            await asyncio.sleep(0.01)
        return out

    out = asyncio.run(run())
    assert len(out.token_ids) == 20
    assert server.num_running == 0


def test_update_weights_changes_outputs_and_reports_checksum(make_server, tmp_path):
    from transformers import AutoModelForCausalLM

    from verl.utils.tiny_model import build_tiny_model

    new_model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", seed=7), dtype=torch.float32)
    server = make_server()
    prompt = [5, 9, 11, 3]

    async def run():
        before = await server.generate(prompt, dict(GREEDY, max_tokens=12), "before")
        report = await server.update_weights(new_model.state_dict().items(), version=3)
        after = await server.generate(prompt, dict(GREEDY, max_tokens=12), "after")
        return before, report, after, await server.get_version()

    before, report, after, version = asyncio.run(run())
    expected = reference_greedy(new_model, prompt, 12)
    assert after.token_ids == expected and before.token_ids != expected
    assert report == {"version": 3, "checksum": weight_checksum(new_model.state_dict().items())}
    assert version == 3


def test_update_weights_rejects_unknown_name_and_wrong_shape(make_server):
    server = make_server()
    with pytest.raises(ValueError, match="'not.a.weight'"):
        asyncio.run(server.update_weights([("not.a.weight", torch.zeros(2))], version=1))
    name, tensor = next(iter(server.model.state_dict().items()))
    with pytest.raises(ValueError, match=f"'{name}' has shape"):
        asyncio.run(server.update_weights([(name, torch.zeros(tensor.numel() + 1))], version=1))
    with pytest.raises(ValueError, match="version must be an int"):
        asyncio.run(server.update_weights([(name, tensor)], version="v1"))


def test_prompt_longer_than_prompt_length_errors_or_truncates(make_server, tiny_causal_lm):
    long_prompt = list(range(3, 43))  # 40 tokens > prompt_length 32
    server = make_server()
    with pytest.raises(ValueError, match=r"request long-1: prompt has 40 tokens, more than rollout.prompt_length=32"):
        asyncio.run(server.generate(long_prompt, GREEDY, "long-1"))
    left = make_server(prompt_truncation="left")
    out = asyncio.run(left.generate(long_prompt, dict(GREEDY, max_tokens=5), "l"))
    assert out.token_ids == reference_greedy(tiny_causal_lm, long_prompt[-32:], 5)
    right = make_server(rollout_config(prompt_truncation="right"))
    out = asyncio.run(right.generate(long_prompt, dict(GREEDY, max_tokens=5), "r"))
    assert out.token_ids == reference_greedy(tiny_causal_lm, long_prompt[:32], 5)
    with pytest.raises(ValueError, match="prompt_truncation='middle'"):
        make_server(prompt_truncation="middle")


def test_max_tokens_capped_by_max_model_len(make_server):
    server = make_server(rollout_config(prompt_length=16, max_model_len=20))
    out = asyncio.run(server.generate(list(range(3, 13)), dict(GREEDY, max_tokens=40), "cap"))
    assert len(out.token_ids) == 10 and out.stop_reason == "length"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"temprature": 1.0}, r"unknown sampling_params key\(s\) \['temprature'\]"),
        ({"temperature": -1}, r"sampling_params\['temperature'\]=-1 must be >= 0"),
        ({"top_p": 0.0}, r"sampling_params\['top_p'\]=0.0"),
        ({"max_tokens": 0}, r"sampling_params\['max_tokens'\]=0"),
        ({"top_k": 1.5}, r"sampling_params\['top_k'\]"),
    ],
)
def test_bad_sampling_params_name_the_key(make_server, params, message):
    server = make_server()
    with pytest.raises(ValueError, match=message):
        asyncio.run(server.generate([1, 2], params, "bad"))


def test_bad_prompt_ids_are_reported(make_server):
    server = make_server()
    with pytest.raises(ValueError, match="request e: prompt_ids is empty"):
        asyncio.run(server.generate([], GREEDY, "e"))
    with pytest.raises(ValueError, match="token id 100000 is outside the vocabulary"):
        asyncio.run(server.generate([1, 100000], GREEDY, "v"))


def test_sleep_holds_requests_until_wake_up(make_server):
    server = make_server()

    async def run():
        await server.sleep()
        task = asyncio.create_task(server.generate([4, 5], dict(GREEDY, max_tokens=3), "zz"))
        await asyncio.sleep(0.05)
        held = not task.done()
        await server.wake_up()
        return held, await asyncio.wait_for(task, timeout=5)

    held, out = asyncio.run(run())
    assert held and len(out.token_ids) == 3


def test_duplicate_request_id_in_flight_is_rejected(make_server):
    server = make_server()

    async def run():
        first = asyncio.create_task(server.generate([4, 5], dict(GREEDY, max_tokens=30), "dup"))
        await asyncio.sleep(0)
        try:
            await server.generate([4, 5], dict(GREEDY, max_tokens=3), "dup")
        finally:
            await first

    with pytest.raises(ValueError, match="request dup: a request with this id is already in flight"):
        asyncio.run(run())


def test_accepts_the_real_rollout_config(tiny_causal_lm):
    import copy

    from verl.workers.config.rollout import RolloutConfig
    from verl.workers.rollout.hf.server import HFRolloutServer

    config = RolloutConfig(prompt_length=16, response_length=8, max_num_seqs=2, calculate_log_probs=True)
    server = HFRolloutServer(config, model=copy.deepcopy(tiny_causal_lm))
    out = asyncio.run(server.generate([3, 4, 5], {"temperature": 0.0, "ignore_eos": True}, "cfg"))
    assert len(out.token_ids) == 8 and len(out.log_probs) == 8  # response_length and calculate_log_probs apply


def test_engine_failure_reaches_every_waiter_and_later_calls(make_server):
    server = make_server()

    def broken_forward(*args, **kwargs):
        raise RuntimeError("boom in forward")

    server.batch._forward = broken_forward

    async def run():
        return await asyncio.gather(
            *[server.generate([3, 4], dict(GREEDY, max_tokens=4), f"f{i}") for i in range(3)],
            return_exceptions=True,
        )

    errors = asyncio.run(run())
    assert all(isinstance(e, RuntimeError) for e in errors)
    assert {str(e).split(":")[0] for e in errors} == {"request f0", "request f1", "request f2"}
    assert all("boom in forward" in str(e) for e in errors)
    with pytest.raises(RuntimeError, match="hf rollout server failed earlier"):
        asyncio.run(server.generate([3, 4], GREEDY, "after"))
