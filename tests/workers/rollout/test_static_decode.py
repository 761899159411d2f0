"""The static decode path of the hf engine: same tokens as the growing cache, buckets, trimming, graph bookkeeping.

On a CPU the static path runs without capture; the ``gpu`` test at the end captures CUDA graphs and checks the
replayed steps against eager ones.
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from _rollout_helpers import random_prompts, reference_greedy, rollout_config

from verl.workers.rollout.hf.decode_graphs import DecodeGraphs
from verl.workers.rollout.hf.kv_batch import RunningBatch
from verl.workers.rollout.hf.server import HFRolloutServer, captures_graphs
from verl.workers.rollout.hf.static_batch import StaticBatch, default_batch_buckets

CPU = torch.device("cpu")


def _generate_all(server, prompts, params_for):
    async def run():
        return await asyncio.gather(*(server.generate(p, params_for(i), f"r{i}") for i, p in enumerate(prompts)))

    return asyncio.run(run())


def _drive(batch, prompts, lengths, joins=(3, 9, 15)):
    """Greedy decoding of ``prompts`` through ``batch``: five rows first, three more at each step in ``joins``,
    row ``i`` retiring after ``lengths[i]`` tokens."""
    tokens: dict[int, list[int]] = {}
    rows: list[int] = []
    next_prompt = 0

    def admit(count):
        nonlocal next_prompt, rows
        ids = list(range(next_prompt, min(next_prompt + count, len(prompts))))
        next_prompt += len(ids)
        first = len(rows)
        chosen = batch.admit([prompts[i] for i in ids]).argmax(-1)
        batch.set_last_tokens(slice(first, None), chosen)
        rows += ids
        for row, token in zip(ids, chosen.tolist()):
            tokens[row] = [token]

    with torch.inference_mode():
        admit(5)
        for step in range(200):
            if step in joins:
                admit(3)
            chosen = batch.decode().argmax(-1)
            batch.set_last_tokens(slice(None), chosen)
            for row, token in zip(rows, chosen.tolist()):
                tokens[row].append(token)
            alive = [len(tokens[row]) < lengths[row] for row in rows]
            if not all(alive):
                rows = [rows[i] for i in batch.retire(alive)]
            if not rows and next_prompt >= len(prompts):
                break
    return tokens


@pytest.fixture
def prompts(tiny_causal_lm):
    vocab = tiny_causal_lm.get_input_embeddings().num_embeddings
    return random_prompts(14, vocab, min_len=2, max_len=20, seed=3)


@pytest.mark.parametrize(
    "options",
    [
        {},  # exact shapes, as a step without capture runs
        {"batch_buckets": [1, 2, 4, 8, 16], "window_granularity": 16, "trim_columns": 16},  # padded as captured
    ],
    ids=["exact", "bucketed"],
)
def test_static_batch_decodes_the_tokens_of_the_growing_cache(tiny_causal_lm, prompts, options):
    lengths = [3 + 4 * i for i in range(len(prompts))]  # rows leave one by one while others join
    expected = _drive(RunningBatch(tiny_causal_lm, CPU), prompts, lengths)
    graphs = DecodeGraphs(CPU, capture=False)
    batch = StaticBatch(tiny_causal_lm, CPU, max_rows=16, max_model_len=96, graphs=graphs, **options)
    assert _drive(batch, prompts, lengths) == expected
    assert graphs.replays > 0
    if options:
        rows = {key[0] for key in graphs.buckets}
        widths = {key[1] for key in graphs.buckets}
        assert rows <= {1, 2, 4, 8, 16} and widths and all(w % 16 == 0 for w in widths)


def test_bucket_choice_pads_rows_and_columns_up(tiny_causal_lm):
    graphs = DecodeGraphs(CPU, capture=False)
    batch = StaticBatch(
        tiny_causal_lm,
        CPU,
        max_rows=64,
        max_model_len=300,
        batch_buckets=default_batch_buckets(64),
        window_granularity=64,
        trim_columns=64,
        graphs=graphs,
    )
    with torch.inference_mode():
        batch.admit([[5] * 10] * 5 + [[6] * 70])  # six rows, cursor at the longest prompt (70 columns)
        batch.decode()
    assert batch.slots == 8 and batch.size == 6
    assert graphs.buckets == [(8, 128)]  # 6 rows -> the bucket of 8; write column 70 -> 128 visible columns
    assert default_batch_buckets(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert default_batch_buckets(12) == [1, 2, 4, 8, 12]


def test_rows_move_right_for_a_long_prompt_and_left_once_it_leaves(tiny_causal_lm):
    """A prompt longer than the cursor moves the running rows right; when it retires, the rest move back to column
    0; each row still decodes what it decodes alone."""
    batch = StaticBatch(tiny_causal_lm, CPU, max_rows=4, max_model_len=64, trim_columns=8)
    short, long_prompt = [7, 8, 9], list(range(3, 33))

    def step(got):
        tokens = batch.decode().argmax(-1)
        batch.set_last_tokens(slice(None), tokens)
        for row, token in zip(got, tokens.tolist()):
            row.append(token)

    with torch.inference_mode():
        got_short = [int(batch.admit([short]).argmax(-1))]
        batch.set_last_tokens(slice(0, None), torch.tensor(got_short))
        for _ in range(4):
            step([got_short])
        assert batch.cursor == len(short) + 4
        got_long = [int(batch.admit([long_prompt]).argmax(-1))]  # 30 tokens > cursor 7: every row moves right
        batch.set_last_tokens(slice(1, None), torch.tensor(got_long))
        assert batch.cursor == len(long_prompt) and batch.starts == [len(long_prompt) - 7, 0]
        for _ in range(5):
            step([got_short, got_long])
        batch.retire([True, False])  # the long row leaves: the short one starts at 23 >= 8, so it moves to 0
        assert batch.starts == [0] and batch.cursor == len(short) + 4 + 5
        for _ in range(20):
            step([got_short])
    assert got_short == reference_greedy(tiny_causal_lm, short, len(got_short))
    assert got_long == reference_greedy(tiny_causal_lm, long_prompt, len(got_long))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_server_static_and_growing_paths_give_the_same_tokens(make_server, tiny_causal_lm, temperature):
    """Greedy tokens and seeded samples (with log-probs) match between the two caches, with rows joining and
    leaving (max_num_seqs below the number of requests)."""
    vocab = tiny_causal_lm.get_input_embeddings().num_embeddings
    prompts = random_prompts(10, vocab, seed=5)

    def params(i):
        return {"temperature": temperature, "max_tokens": 4 + 3 * i, "ignore_eos": True, "seed": 100 + i}

    outputs = {}
    for static in (True, False):
        server = make_server(rollout_config(max_num_seqs=4), static_decode=static)
        assert isinstance(server.batch, StaticBatch if static else RunningBatch)
        outputs[static] = _generate_all(server, prompts, params)
    for ours, theirs in zip(outputs[True], outputs[False]):
        assert ours.token_ids == theirs.token_ids
        torch.testing.assert_close(torch.tensor(ours.log_probs), torch.tensor(theirs.log_probs), atol=1e-5, rtol=0)


def test_weight_update_keeps_the_graphs_and_moved_tensors_drop_them(make_server, tiny_model_dir, tiny_causal_lm):
    """In-place weight updates keep the captured steps valid (same tensor addresses) and the next tokens come from
    the new weights; tensors rebuilt elsewhere (sleep moving them, a trainer re-creating them) drop every graph."""
    server = make_server(rollout_config(max_num_seqs=2), static_decode=True)
    prompt = [3, 4, 5, 6]
    greedy = {"temperature": 0.0, "max_tokens": 6, "ignore_eos": True}
    asyncio.run(server.generate(prompt, greedy, "before"))
    assert server.graphs.buckets

    new_weights = copy.deepcopy(tiny_causal_lm)
    with torch.no_grad():
        for parameter in new_weights.parameters():
            parameter.mul_(-1.5)

    async def update():
        await server.abort_all()
        await server.update_weights(list(new_weights.state_dict().items()), version=1)
        await server.resume()
        return await server.generate(prompt, greedy, "after")

    out = asyncio.run(update())
    assert out.token_ids == reference_greedy(new_weights, prompt, 6)
    assert server.graphs.buckets and not server.graphs.check(server.model)  # same addresses: nothing dropped

    with torch.no_grad():
        for parameter in list(server.model.parameters())[:1]:
            parameter.data = parameter.data.clone()  # a new storage, as a trainer re-creating parameters makes
    assert server.graphs.check(server.model) and not server.graphs.buckets


def test_sleep_frees_the_static_cache_and_wake_up_rebuilds_it(make_server):
    server = make_server(rollout_config(max_num_seqs=2), static_decode=True)
    greedy = {"temperature": 0.0, "max_tokens": 5, "ignore_eos": True}

    async def run():
        first = await server.generate([3, 4, 5], greedy, "a")
        await server.sleep()
        assert server.batch.cache is None and not server.graphs.buckets
        await server.wake_up()
        return first, await server.generate([3, 4, 5], greedy, "b")

    first, second = asyncio.run(run())
    assert first.token_ids == second.token_ids


def test_models_with_sliding_layers_keep_the_growing_cache(tiny_causal_lm):
    model = copy.deepcopy(tiny_causal_lm)
    model.config.layer_types = ["sliding_attention"] + ["full_attention"] * (model.config.num_hidden_layers - 1)
    server = HFRolloutServer(rollout_config(), model=model)
    assert isinstance(server.batch, RunningBatch)
    with pytest.raises(NotImplementedError, match="sliding_attention"):
        HFRolloutServer(rollout_config(), model=model, static_decode=True)


def test_graphs_are_captured_only_on_cuda_without_enforce_eager():
    assert captures_graphs(torch.device("cuda", 0), enforce_eager=False)
    assert not captures_graphs(torch.device("cuda", 0), enforce_eager=True)
    assert not captures_graphs(CPU, enforce_eager=False)
    with pytest.raises(ValueError, match="CUDA device"):
        DecodeGraphs(CPU, capture=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_captured_steps_match_eager_steps_on_cuda(tiny_causal_lm):
    """With capture on, replayed steps give the greedy tokens and seeded samples of eager steps; a weight update
    reaches the replayed graphs; sleep and wake-up capture again."""
    device = torch.device("cuda")
    vocab = tiny_causal_lm.get_input_embeddings().num_embeddings
    prompts = random_prompts(12, vocab, seed=9)

    def params(i):
        return {"temperature": 1.0 if i % 2 else 0.0, "max_tokens": 5 + 4 * i, "ignore_eos": True, "seed": i}

    def server(enforce_eager: bool, static: bool = True):
        model = copy.deepcopy(tiny_causal_lm).to(device)
        config = rollout_config(max_num_seqs=4, enforce_eager=enforce_eager)
        return HFRolloutServer(config, model=model, static_decode=static)

    captured = server(enforce_eager=False)
    assert captured.graphs.capture
    results = {
        name: _generate_all(s, prompts, params)
        for name, s in (("captured", captured), ("eager", server(True)), ("growing", server(True, static=False)))
    }
    assert captured.graphs.captures > 0 and captured.graphs.replays > captured.graphs.captures
    for got, eager, growing in zip(results["captured"], results["eager"], results["growing"]):
        assert got.token_ids == eager.token_ids == growing.token_ids
        torch.testing.assert_close(torch.tensor(got.log_probs), torch.tensor(eager.log_probs), atol=1e-4, rtol=0)

    new_weights = copy.deepcopy(tiny_causal_lm)
    with torch.no_grad():
        for parameter in new_weights.parameters():
            parameter.mul_(-1.5)
    greedy = {"temperature": 0.0, "max_tokens": 6, "ignore_eos": True}

    async def update_sleep_wake():
        await captured.abort_all()
        await captured.update_weights(list(new_weights.state_dict().items()), version=1)
        await captured.resume()
        after_update = await captured.generate(prompts[0], greedy, "u")
        captures = captured.graphs.captures
        await captured.sleep()
        await captured.wake_up()
        after_wake = await captured.generate(prompts[0], greedy, "w")
        return after_update, after_wake, captures

    after_update, after_wake, captures_before_sleep = asyncio.run(update_sleep_wake())
    expected = reference_greedy(new_weights, prompts[0], 6)
    assert after_update.token_ids == expected and after_wake.token_ids == expected
    assert captured.graphs.captures > captures_before_sleep
