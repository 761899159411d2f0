"""A weight sync that keeps requests (``pause_generation`` / ``update_weights`` / ``resume``): a running request is
not aborted, continues from its KV cache, and its tokens after the swap come from the new weights, each tagged with
the version that produced it."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from _rollout_helpers import reference_greedy, rollout_config

GREEDY = {"do_sample": False, "ignore_eos": True, "logprobs": True}
SAMPLED = {"temperature": 1.0, "ignore_eos": True, "logprobs": True, "seed": 3}
FORCED_TOKEN = 7
MAX_TOKENS = 120


def forcing_weights(model: torch.nn.Module, token: int) -> dict[str, torch.Tensor]:
    """Weights of ``model`` that give ``token`` probability ~1 whatever the context: one hidden coordinate is held at
    a large constant by the embeddings (no layer writes to it), the final norm keeps only that coordinate, and only
    ``token``'s output row reads it."""
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    coordinate = 0
    state["model.embed_tokens.weight"][:, coordinate] = 1000.0
    for name, tensor in state.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            tensor[coordinate, :] = 0.0
    state["model.norm.weight"].zero_()
    state["model.norm.weight"][coordinate] = 1.0
    state["lm_head.weight"].zero_()
    state["lm_head.weight"][token, coordinate] = 100.0
    return state


async def _sync_mid_request(server, params: dict, new_weights, version: int):
    """Start one request, and once it runs, sync ``new_weights`` as ``version`` the keeping way; returns its output
    and the tokens it had when the engine held."""
    request = asyncio.ensure_future(server.generate([5, 9, 11, 3], dict(params, max_tokens=MAX_TOKENS), "kept"))
    while server.num_running == 0:
        await asyncio.sleep(0.001)
    await server.pause_generation()
    held_at = len(server._rows[0].token_ids)  # no step runs while held, so this is where the new weights begin
    report = await server.update_weights(new_weights, version=version)
    await server.resume()
    return await request, held_at, report


@pytest.mark.parametrize("static_decode", [True, False], ids=["static_batch", "growing_batch"])
def test_request_survives_a_sync_and_samples_from_the_new_weights(make_server, tiny_causal_lm, static_decode):
    server = make_server(rollout_config(response_length=MAX_TOKENS), static_decode=static_decode, max_steps_per_call=1)
    out, held_at, report = asyncio.run(
        _sync_mid_request(server, SAMPLED, forcing_weights(tiny_causal_lm, FORCED_TOKEN).items(), 5)
    )
    assert report["version"] == 5
    assert out.stop_reason == "length" and len(out.token_ids) == MAX_TOKENS, "the sync must not abort the request"
    assert 1 <= held_at < MAX_TOKENS
    assert out.token_ids[held_at:] == [FORCED_TOKEN] * (MAX_TOKENS - held_at)
    assert out.token_ids[:held_at] != [FORCED_TOKEN] * held_at
    # the rollout log-probs are the behaviour policy's: ~0 for the forced tokens, the old weights' before
    assert all(lp > -1e-3 for lp in out.log_probs[held_at:])
    assert min(out.log_probs[:held_at]) < -0.1
    assert out.extra["weight_version"] == 0, "the start version stays the one the request started under"
    assert out.extra["weight_version_end"] == 5
    assert out.extra["token_versions"] == [0] * held_at + [5] * (MAX_TOKENS - held_at)
    assert server.num_running == 0


@pytest.mark.parametrize("static_decode", [True, False], ids=["static_batch", "growing_batch"])
def test_rows_continue_from_their_kv_cache(make_server, tiny_causal_lm, static_decode):
    """Swapping in identical weights mid-request changes nothing: greedy tokens equal an uninterrupted decode."""
    server = make_server(rollout_config(response_length=MAX_TOKENS), static_decode=static_decode, max_steps_per_call=1)
    same = [(name, tensor.detach().clone()) for name, tensor in tiny_causal_lm.state_dict().items()]
    out, held_at, _ = asyncio.run(_sync_mid_request(server, GREEDY, same, 1))
    assert out.token_ids == reference_greedy(tiny_causal_lm, [5, 9, 11, 3], MAX_TOKENS)
    assert out.extra["token_versions"][held_at - 1 : held_at + 1] == [0, 1]
    if static_decode:  # weights are copied in place: decode graphs (captured on CUDA) would stay valid
        assert not server.graphs.check(server.model)


def test_requests_arriving_while_held_wait_and_start_under_the_new_version(make_server, tiny_causal_lm):
    server = make_server()
    weights = copy.deepcopy(tiny_causal_lm).state_dict()

    async def run():
        await server.generate([5, 9], dict(GREEDY, max_tokens=2), "warm")
        await server.pause_generation()
        late = asyncio.ensure_future(server.generate([5, 9], dict(GREEDY, max_tokens=4), "late"))
        await asyncio.sleep(0.05)
        waited = not late.done() and server.num_waiting == 0  # at the gate, not in the engine
        await server.update_weights(weights.items(), version=2)
        await server.resume()
        return waited, await late

    waited, late = asyncio.run(run())
    assert waited
    assert late.extra["weight_version"] == 2 and late.extra["weight_version_end"] == 2
    assert "token_versions" not in late.extra  # one version only: the per-token list is left out
