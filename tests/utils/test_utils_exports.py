"""verl's import paths under verl.utils resolve to this package's implementations (same objects)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SAME = [
    ("verl.utils", "hf_tokenizer", "verl.utils.tokenizer.tokenizer", "hf_tokenizer"),
    ("verl.utils", "omega_conf_to_dataclass", "verl.utils.config", "omega_conf_to_dataclass"),
    ("verl.utils", "validate_config", "verl.utils.config", "validate_config"),
    ("verl.utils", "group_mean_std", "verl.utils.groupwise", "group_mean_std"),
    (
        "verl.utils.chat_template",
        "initialize_system_prompt",
        "verl.utils.tokenizer.chat_template",
        "initialize_system_prompt",
    ),
    ("verl.utils.debug", "DistProfiler", "verl.utils.profiler.profile", "DistProfiler"),
    ("verl.utils.debug", "marked_timer", "verl.utils.profiler.performance", "marked_timer"),
    ("verl.utils.debug.performance", "simple_timer", "verl.utils.profiler.performance", "simple_timer"),
    ("verl.utils.profiler.performance", "log_gpu_memory_usage", "verl.utils.profiler", "log_gpu_memory_usage"),
    ("verl.utils.reward_score.math_reward", "compute_score", "verl.utils.reward_score.math", "compute_score"),
    ("verl.utils.dataset.rl_dataset", "collate_fn", "verl.utils.dataset.collate", "collate_fn"),
    ("verl.utils.dataset.rl_dataset", "process_image", "verl.utils.dataset.vision_utils", "process_image"),
    ("verl.utils.dataset.rl_dataset", "pad_dataproto_to_divisor", "verl.protocol", "pad_dataproto_to_divisor"),
    ("verl.utils.dataset.rl_dataset", "get_dataset_class", "verl.utils.dataset.factory", "get_dataset_class"),
    ("verl.utils.dataset", "RMDataset", "verl.utils.dataset.rm_dataset", "RMDataset"),
    ("verl.utils.fs", "copy", "verl.utils.hdfs_io", "copy"),
    ("verl.utils.skip", "SkipManager", "verl.utils.skip.skip_manager", "SkipManager"),
]


@pytest.mark.parametrize(("module", "name", "home", "home_name"), SAME)
def test_reexport_is_the_same_object(module, name, home, home_name):
    assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(home), home_name)


def test_unknown_names_are_attribute_errors():
    import verl.utils
    import verl.utils.dataset

    assert not hasattr(verl.utils, "no_such_helper")
    with pytest.raises(AttributeError, match="no_such_helper"):
        verl.utils.no_such_helper  # noqa: B018


def test_import_verl_utils_does_not_load_transformers():
    code = "import sys, verl.utils; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
