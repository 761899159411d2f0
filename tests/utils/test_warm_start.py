"""The warm-start checkpoint: trained once per settings, loadable like any checkpoint, reused from the cache."""

import json

from verl.utils.synthetic_tasks import LONG_TAIL_CHARSET
from verl.utils.warm_start import WarmStartConfig, warm_start_path


def test_warm_start_is_built_once_and_loads_like_a_checkpoint(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = WarmStartConfig("long_tail_digit", LONG_TAIL_CHARSET, steps=2, batch_size=4)
    path = warm_start_path(config, cache_dir=tmp_path)
    assert json.loads((path / "warm_start.json").read_text())["steps"] == 2
    weights = (path / "model.safetensors").stat().st_mtime_ns
    assert warm_start_path(config, cache_dir=tmp_path) == path  # cached: not trained again
    assert (path / "model.safetensors").stat().st_mtime_ns == weights
    assert warm_start_path(WarmStartConfig("long_tail_digit", LONG_TAIL_CHARSET, steps=1), cache_dir=tmp_path) != path
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.decode(tokenizer.encode("7x37:", add_special_tokens=False)) == "7x37:"
    AutoModelForCausalLM.from_pretrained(path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-written folder left
