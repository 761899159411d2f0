"""Every key of the composed PPO config acts or is listed as inert (``inert_keys.py``): a key that nothing reads and
that the inert list does not name is silently ignored, as ``data.gen_batch_size`` once was.

"Read" is decided statically: each name on the key's path is used as an attribute (``cfg.name``) or a string
constant (``"name"``, or a part of ``"group.name"``) in a module of verl/ or recipe/ other than the config
declarations. A name shared by several keys counts for all of them: this finds keys that nothing reads at all.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from functools import cache
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.config.inert_keys import INERT_FIELDS, INERT_KEYS
from verl.trainer.main_ppo import resolve_config

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("verl", "recipe")
# The config classes (the data sets' in verl/utils/dataset/config.py), the YAML translation rules (legacy.py and
# key_rules.py spell every key as a string) and the inert list itself; the SFT trainer and the offline entry points,
# which read their own configs' keys of the same names.
NOT_READERS = ("verl/trainer/config/", "verl/workers/config/", "verl/trainer/sft/", "verl/utils/dataset/config.py")
OFFLINE = ("main_generation", "main_eval", "main_sft", "sft_trainer", "fsdp_sft_trainer")

# Blocks handed on whole (to a library or to the user's code): the block's own name must be read, its keys need not.
PASS_THROUGH = {
    "ray_kwargs.ray_init": "the keyword arguments of ray.init (task_runner)",
    "rollout.engine_kwargs": "per engine name, the engine's own arguments (adapter_utils.engine_kwargs_for)",
    "model.override_config": "Hugging Face config overrides, applied as given",
    "data.apply_chat_template_kwargs": "arguments of tokenizer.apply_chat_template",
    "data.mm_processor_kwargs": "arguments of the multi-modal processor",
    "reward.reward_kwargs": "constructor arguments of the reward manager",
    "reward.custom_reward_function.reward_kwargs": "keyword arguments of the user's scoring function",
}

# Keys consumed while the config is built, in the declaration module named (not scanned above): refused unless left
# at their default, or translated into another key. test_verl_keys.py checks what each does.
CONSUMED_WHEN_BUILT = {
    "model_engine": ("verl/trainer/config/ppo_config.py", "refused unless dp, the only engine"),
    "actor.optim.optimizer_impl": ("verl/workers/config/optimizer.py", "refused unless torch.optim"),
    "critic.optim.optimizer_impl": ("verl/workers/config/optimizer.py", "refused unless torch.optim"),
    "actor.optim.warmup_style": ("verl/workers/config/optimizer.py", "verl's older name of lr_scheduler_type"),
    "critic.optim.warmup_style": ("verl/workers/config/optimizer.py", "verl's older name of lr_scheduler_type"),
    "rollout.checkpoint_engine.custom_backend_module": ("verl/workers/config/rollout.py", "refused when set"),
    # verl's sizes over all processes, turned into the *_per_gpu keys when the config is composed
    "actor.ppo_micro_batch_size": ("verl/trainer/config/legacy.py", "becomes ppo_micro_batch_size_per_gpu"),
    "actor.log_prob_micro_batch_size": ("verl/trainer/config/legacy.py", "becomes log_prob_micro_batch_size_per_gpu"),
    "ref.log_prob_micro_batch_size": ("verl/trainer/config/legacy.py", "becomes log_prob_micro_batch_size_per_gpu"),
    "critic.ppo_micro_batch_size": ("verl/trainer/config/legacy.py", "becomes ppo_micro_batch_size_per_gpu"),
    "critic.forward_micro_batch_size": ("verl/trainer/config/legacy.py", "becomes forward_micro_batch_size_per_gpu"),
}

_KEY = re.compile(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*")


def _names_in(path: Path) -> set[str]:
    """Attribute names and key-like string constants of one module (docstrings and f-string text left out)."""
    names: set[str] = set()
    text: set[int] = set()  # ids of the constants that are prose; ast.walk visits a parent before its children
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, str) and id(node) not in text and _KEY.fullmatch(node.value):
                names.update(node.value.split("."))
        elif isinstance(node, ast.JoinedStr):
            text.update(id(value) for value in node.values)
        elif isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                text.add(id(first.value))
    return names


@cache
def _names_read() -> frozenset[str]:
    names: set[str] = set()
    for source in SOURCES:
        for path in (REPO / source).rglob("*.py"):
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith(NOT_READERS) and not path.name.startswith(OFFLINE):
                names |= _names_in(path)
    return frozenset(names)


@pytest.fixture(scope="module")
def composed():
    """The default config as the entry point resolves it: the DictConfig (as plain containers) and its typed twin."""
    cfg, typed = resolve_config(compose_ppo_config([]))
    return OmegaConf.to_container(cfg, resolve=True), typed


def _leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            if key != "_target_":  # the class of a block, not a setting
                yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def _is_inert(typed, key: str) -> bool:
    """Whether ``key`` or a block above it is listed in INERT_FIELDS (by config class) or INERT_KEYS (by key)."""
    parts = key.split(".")
    node = typed
    for i, name in enumerate(parts):
        dotted = ".".join(parts[: i + 1])
        if dotted in INERT_KEYS:
            return True
        if dataclasses.is_dataclass(node):
            if any(name in INERT_FIELDS.get(cls.__name__, {}) for cls in type(node).__mro__):
                return True
            node = getattr(node, name, None)
        else:
            node = None
    return False


def _unread(key: str, names: frozenset[str]) -> list[str]:
    """The names on ``key``'s path that nothing reads (below a pass-through block: none of its keys)."""
    parts = key.split(".")
    checked = next((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in PASS_THROUGH), len(parts))
    return [name for name in parts[:checked] if name not in names]


def _offenders(data: dict, typed) -> list[str]:
    """``key (nothing reads 'name', ...)`` for each leaf of ``data`` that is neither read nor inert."""
    names = _names_read()
    offenders = []
    for key in _leaves(data):
        if key in CONSUMED_WHEN_BUILT or _is_inert(typed, key):
            continue
        unread = _unread(key, names)
        if unread:
            offenders.append(f"{key} (nothing reads {', '.join(repr(n) for n in unread)})")
    return offenders


def test_every_key_is_read_or_inert(composed):
    offenders = _offenders(*composed)
    assert not offenders, (
        f"{len(offenders)} config keys are neither read nor listed in verl/trainer/config/inert_keys.py "
        "(make them act, or list them there with the reason):\n  " + "\n  ".join(offenders)
    )


def test_a_key_nothing_reads_is_named_by_its_full_path(composed):
    data, typed = composed
    data = {**data, "data": {**data["data"], "no_such_key": 1}, "trainer": {**data["trainer"], "v1": {"x": 1}}}
    data["rollout"] = {**data["rollout"], "engine_kwargs": {"vllm": {"no_such_argument": 1}}}
    assert _offenders(data, typed) == ["data.no_such_key (nothing reads 'no_such_key')"]


def test_the_allowlists_name_keys_that_exist(composed):
    data, _ = composed
    leaves = set(_leaves(data))
    blocks = {".".join(key.split(".")[:i]) for key in leaves for i in range(1, key.count(".") + 2)}
    assert not set(PASS_THROUGH) - blocks
    assert not set(CONSUMED_WHEN_BUILT) - leaves
    for key, (module, _) in CONSUMED_WHEN_BUILT.items():
        assert key.rsplit(".", 1)[-1] in _names_in(REPO / module), f"{module} no longer reads {key}"
