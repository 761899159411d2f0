"""The GPU benchmark scripts on CPU: ``--smoke`` runs every timed path on a tiny model, so a script that only a lent
GPU machine runs cannot rot unnoticed; without CUDA and without ``--smoke`` they write nothing."""

import pytest
import torch

from bench import gpu_engine_overhead, gpu_suite

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


def test_gpu_suite_smoke_times_every_rollout_variant(tmp_path):
    payload = gpu_suite.main(["--smoke", "--out-dir", str(tmp_path)])
    raw = payload["raw"]
    for key in ("engine_s", "engine_kept_s", "generate_s"):
        assert len(raw[key]) == payload["config"]["repeats"] and all(s > 0 for s in raw[key]), key
    tail = raw["long_tail"]
    assert len(tail["lengths"]) == payload["config"]["long_tail_requests"]
    assert min(tail["lengths"]) >= 2 and max(tail["lengths"]) <= payload["config"]["long_tail_max"]
    assert all(len(tail[key]) == 1 and tail[key][0] > 0 for key in ("engine_s", "engine_kept_s", "generate_s"))
    assert set(raw["decode_step_split"]) == {"captured static step", "eager static step", "growing cache (before)"}
    table = (tmp_path / "gpu_suite.md").read_text()
    assert "one server kept across runs" in table and "Long tail" in table


def test_gpu_engine_overhead_smoke_times_every_variant_and_counts_events(tmp_path):
    payload = gpu_engine_overhead.main(["--smoke", "--out-dir", str(tmp_path)])
    assert set(payload["raw"]) == {
        "model.generate",
        "engine, former temperature read-back",
        "engine",
        "decode loop, our sampler",
        "decode loop, former temperature read-back",
        "decode loop, torch.multinomial",
        "decode loop, cache grown by torch.cat",
    }
    assert all(len(times) == 1 and times[0] > 0 for times in payload["raw"].values())
    # on CPU the profiler still sees the host reads of the sampled tokens on the calling thread
    assert payload["per_step_events"]["decode loop, our sampler"]["aten::item"] >= 1
    assert (tmp_path / "gpu_engine_overhead.md").read_text().startswith("cpu (smoke)")


def test_the_engine_sampler_is_restored_after_a_variant_that_fails():
    from verl.workers.rollout.hf import server

    model = gpu_suite.build_model(gpu_suite.SMOKE, torch.float32, torch.device("cpu"), seed=0).eval()
    original = server.sample_next_tokens

    def failing_sampler(logits, state, generator=None):
        raise RuntimeError("sampler under test failed")

    with pytest.raises(RuntimeError, match="sampler under test failed"):
        gpu_engine_overhead.engine(model, [[11, 12, 13]], 2, 1, sampler=failing_sampler)
    assert server.sample_next_tokens is original


@needs_no_cuda
@pytest.mark.parametrize("script", [gpu_suite, gpu_engine_overhead])
def test_without_cuda_a_full_run_writes_nothing(script, tmp_path, capsys):
    assert script.main(["--out-dir", str(tmp_path)]) is None
    assert "needs a CUDA device" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
