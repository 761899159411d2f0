"""bench/kv_compaction.py at toy size: both ways of retiring rows decode the same requests, and the figures are
written."""

import json

from bench.kv_compaction import FILL_FROM_END, IN_ORDER, main


def test_kv_compaction_smoke_times_both_variants(tmp_path):
    payload = main(
        ["--requests", "12", "--max-response-length", "16", "--repeats", "1", "--hidden-size", "32"]
        + ["--out-dir", str(tmp_path)]
    )
    variants = {row["variant"]: row for row in payload["results"]}
    assert set(variants) == {FILL_FROM_END, IN_ORDER}
    assert variants[IN_ORDER]["speedup_vs_in_order"] == 1.0
    assert all(row["median_s"] > 0 for row in variants.values())
    assert json.loads((tmp_path / "kv_compaction.json").read_text())["requests"] == 12
