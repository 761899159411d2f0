"""Config keys accepted for compatibility but without effect: named with their reason when set, silent otherwise."""

from __future__ import annotations

import dataclasses
import importlib
import io
import pkgutil
import re
import tokenize
from pathlib import Path

import pytest
import yaml

import verl
import verl.trainer.config as trainer_config
import verl.workers.config as worker_config
from verl.base_config import ConfigError
from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.config.inert_keys import (
    INERT_FIELDS,
    INERT_KEYS,
    InertConfigWarning,
    check_inert_keys,
    inert_settings,
)
from verl.trainer.main_ppo import resolve_config


def _typed(overrides):
    return resolve_config(compose_ppo_config(overrides))[1]


def _key_names(node) -> set[str]:
    if not isinstance(node, dict):
        return set()
    return {str(k) for k in node} | {name for v in node.values() for name in _key_names(v)}


def _config_classes() -> dict[str, type]:
    from verl.trainer.config.ppo_config import PPOConfig

    classes = {"PPOConfig": PPOConfig}
    for package in (trainer_config, worker_config):
        for module_info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{module_info.name}")
            classes.update(
                {
                    name: obj
                    for name, obj in vars(module).items()
                    if dataclasses.is_dataclass(obj) and isinstance(obj, type)
                }
            )
    return classes


def test_the_packaged_defaults_set_no_inert_key():
    assert inert_settings(_typed([])) == []
    assert inert_settings(_typed(["actor.ppo_epochs=2", "rollout.temperature=0.7"])) == []


def test_each_inert_key_set_is_named_with_its_reason():
    typed = _typed(["actor.ulysses_sequence_parallel_size=2", "data.image_patch_size=28"])
    with pytest.warns(InertConfigWarning) as caught:
        messages = check_inert_keys(typed)
    assert [str(w.message) for w in caught] == messages
    keys = [m.split("=")[0].removeprefix("config: ") for m in messages]
    assert sorted(keys) == [
        "actor.ulysses_sequence_parallel_size",
        "data.image_patch_size",
        "ref.ulysses_sequence_parallel_size",
    ]
    assert any(
        "data.image_patch_size=28 has no effect in this build (multi-modal rows are not supported)" in m
        for m in messages
    )


def test_the_legacy_spelling_is_caught_too():
    keys = [key for key, _, _ in inert_settings(_typed(["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]))]
    assert keys == ["actor.ulysses_sequence_parallel_size", "ref.ulysses_sequence_parallel_size"]


def _code_without_text(source: str) -> str:
    """``source`` without comments, strings and import lines: what is left reads attributes."""
    text_tokens = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    kept = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type not in text_tokens]
    text = " ".join(kept)
    return re.sub(r"(^|\n)\s*(from|import)\s[^\n]*", "", text)


def _reads(source: str, code: str, name: str) -> bool:
    """Whether a module reads config key ``name``: as an attribute, or by a quoted key passed to a getter/index."""
    if re.search(rf"\.{name}\b", code):
        return True
    return bool(
        re.search(
            rf"(\bget|getattr|cfg_get|select|_get|_section|_read|_group)\([^)]*[\"']{name}[\"']"
            rf"|\[[\"']{name}[\"']\]",
            source,
        )
    )


# (module, key) pairs that copy an inert key onto an object without acting on it: RLHFDataset keeps verl's data
# settings as attributes for subclasses (verl's own class does the same), but this build reads no media or tools
STORED_ONLY = {
    ("rl_dataset.py", "image_patch_size"),
    ("rl_dataset.py", "return_multi_modal_inputs"),
    ("rl_dataset.py", "tool_config_path"),
    ("rl_dataset.py", "function_tool_path"),
    ("rl_dataset.py", "chat_template_func"),
    ("rl_dataset.py", "filter_prompts"),
    # handed to a recipe's _build_model_optimizer override (verl's signature); the worker itself groups nothing
    ("actor_worker.py", "use_prefix_grouper"),
}


def test_every_listed_key_exists_and_is_still_unread():
    """A key that gains an effect must leave the list: no module outside the config classes may read it (as an
    attribute or a quoted key). A name that is also a live field of some config class cannot be told apart by
    reading the sources, so only its existence is checked."""
    import verl.trainer.sft.config as sft_config

    classes = _config_classes()
    live = {
        f.name
        for name, cls in classes.items()
        for f in dataclasses.fields(cls)
        if not any(f.name in INERT_FIELDS.get(c.__name__, {}) for c in cls.__mro__)
    }
    live |= {
        f.name
        for obj in vars(sft_config).values()
        if dataclasses.is_dataclass(obj) and isinstance(obj, type)
        for f in dataclasses.fields(obj)
    }  # the SFT trainer reads its own config classes
    config_dir = Path(trainer_config.__file__).parent
    for other in config_dir.glob("*.yaml"):  # generation, evaluation, ... configs read by their own entry points
        if other.name not in ("ppo_trainer.yaml", "demo.yaml"):
            live |= _key_names(yaml.safe_load(other.read_text()))
    root = Path(verl.__file__).parent
    # offline entry points (generation, evaluation) and the SFT trainer read some of these names for their own
    # configs, not the PPO trainer's
    offline = ("main_generation", "main_eval", "sft_trainer", "fsdp_sft_trainer")
    sources = {
        path: path.read_text()
        for path in root.rglob("*.py")
        if not {"config", "sft"} & set(path.relative_to(root).parts[:-1])
        and path.name != "inert_keys.py"
        and not path.name.startswith(offline)
    }
    code = {path: _code_without_text(text) for path, text in sources.items()}
    for class_name, fields in INERT_FIELDS.items():
        names = {f.name for f in dataclasses.fields(classes[class_name])}
        for field in fields:
            assert field in names, f"{class_name}.{field} is not a config field"
            if field in live:
                continue
            readers = [
                str(p)
                for p, text in sources.items()
                if _reads(text, code[p], field) and (p.name, field) not in STORED_ONLY
            ]
            assert not readers, f"{class_name}.{field} is read by {readers}; it has an effect now"


@pytest.mark.parametrize(
    "overrides",
    [
        ["data.return_raw_input_ids=true"],
        ["trainer.ray_wait_register_center_timeout=10"],
        ["rollout.name=vllm", "rollout.data_parallel_size=2", "trainer.n_gpus_per_node=2"],
        ["rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable"],
        ["rollout.multi_turn.use_inference_chat_template=true"],
        ["model.use_fused_kernels=true"],
    ],
)
def test_keys_that_act_are_not_reported(overrides):
    assert inert_settings(_typed(overrides)) == []


def test_a_startup_limit_that_is_not_positive_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"trainer.ray_wait_register_center_timeout: must be > 0 seconds, got 0"):
        _typed(["trainer.ray_wait_register_center_timeout=0"])


def test_a_key_inert_in_one_group_only_is_reported_there():
    assert [key for key, _, _ in inert_settings(_typed(["+critic.model.use_fused_kernels=true"]))] == [
        "critic.model.use_fused_kernels"
    ]
    assert inert_settings(_typed(["model.use_fused_kernels=true"])) == []  # the actor's and reference's act
    in_blocks = ("global_profiler.", "distillation.")  # keys of blocks that act in part (next test)
    assert {key for key in INERT_KEYS if not key.startswith(in_blocks)} == {
        "critic.model.use_fused_kernels",
        "ref.entropy_checkpointing",
    }


def test_the_inert_keys_of_a_block_that_acts_in_part_are_named():
    typed = _typed(
        [
            "global_profiler.tool=torch",
            "global_profiler.steps=[1]",
            "global_profiler.global_tool_config.nsys.discrete=true",
            "distillation.teacher_key=prompt_source",
            "distillation.distillation_loss.topk=8",
        ]
    )
    assert [key for key, _, _ in inert_settings(typed)] == [
        "global_profiler.steps",
        "global_profiler.global_tool_config.nsys.discrete",
        "distillation.distillation_loss.topk",
        "distillation.teacher_key",
    ]  # global_profiler.tool reaches the workers' environment


def test_dynamic_sampling_keys_are_not_listed():
    """``data.gen_batch_size`` and ``algorithm.filter_groups`` act (DAPO's dynamic sampling); only the number of
    generation batches in flight does not."""
    assert "gen_batch_size" not in INERT_FIELDS["DataConfig"] and "AlgoConfig" not in INERT_FIELDS
    assert set(INERT_FIELDS["FilterGroupsConfig"]) == {"max_inflight_gen_batches"}
    typed = _typed(["algorithm.filter_groups.max_inflight_gen_batches=2"])
    assert [key for key, _, _ in inert_settings(typed)] == ["algorithm.filter_groups.max_inflight_gen_batches"]
