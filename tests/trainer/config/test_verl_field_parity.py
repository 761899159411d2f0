"""Our config dataclasses carry every field of verl 0.9.1's, under verl's class names and import paths.

Recipes read and build verl's config classes (``self.config.rollout.log_prob_micro_batch_size``,
``RolloutConfig(**block)``), so a field verl has and we lack breaks them. verl's fields are recorded in
verl_0_9_1_config_fields.json (regenerate it with gen_verl_config_fields.py from an unpacked verl 0.9.1): every
dataclass of its verl/workers/config/*.py and verl/trainer/config/*.py, and every ``*Config`` class its
verl/trainer/config/**.yaml names as a ``_target_``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIELDS_FILE = HERE / "verl_0_9_1_config_fields.json"
VERL_FIELDS = json.loads(FIELDS_FILE.read_text())

# (class, field) -> why we do not carry it as a dataclass field; an entry covers the subclasses too. Prefer carrying a
# field (inert if need be). Each one can still be read on an instance; only passing it to the constructor fails.
_OTHER_NAME = (
    "verl's other name of {}: its YAML key is translated to that one (key_rules.py), so a field under verl's name "
    "could not be listed in our YAML; a property reads it"
)
NOT_CARRIED: dict[tuple[str, str], str] = {
    # verl fills it in __post_init__ from loss_mode and documents it as not set by users
    ("DistillationLossConfig", "loss_settings"): "a property derived from loss_mode",
    ("CheckpointEngineConfig", "update_weights_bucket_megabytes"): _OTHER_NAME.format("bucket_megabytes"),
    ("RewardModelConfig", "model_path"): _OTHER_NAME.format("model.path"),
    ("FSDPCriticConfig", "fsdp"): _OTHER_NAME.format("fsdp_config"),
    # verl's workers set it to the backend block (fsdp_config, megatron, ...); so do our classes, as an attribute,
    # since as a field both the YAML and to_dict() would repeat that block
    ("ActorConfig", "engine"): "the backend block under verl's run-time name, set when the config is built",
    ("CriticConfig", "engine"): "the backend block under verl's run-time name, set when the config is built",
}


def _not_carried(cls: type, field_name: str) -> bool:
    return any((base.__name__, field_name) in NOT_CARRIED for base in cls.__mro__)


def _candidate_modules(module: str) -> list[str]:
    """verl's defining module, then its package (verl exports every config class from there, and our module layout
    differs: e.g. verl's verl.trainer.config.algorithm is our verl.trainer.config.algo_config)."""
    return [module, module.rsplit(".", 1)[0]]


def _our_class(name: str, module: str) -> type | None:
    for candidate in _candidate_modules(module):
        try:
            found = getattr(importlib.import_module(candidate), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


CLASSES = sorted(VERL_FIELDS["classes"].items())


def test_the_recorded_fields_cover_verls_config_classes():
    names = {name for name, _ in CLASSES}
    assert {"RolloutConfig", "ActorConfig", "FSDPEngineConfig", "AlgoConfig", "ProfilerConfig"} <= names
    assert len(names) >= 60
    assert "log_prob_micro_batch_size" in VERL_FIELDS["classes"]["RolloutConfig"]["fields"]


@pytest.mark.parametrize("name, spec", CLASSES, ids=[name for name, _ in CLASSES])
def test_our_class_has_every_field_of_verls(name, spec):
    cls = _our_class(name, spec["module"])
    assert cls is not None, f"{name}: not importable from {' or '.join(_candidate_modules(spec['module']))}"
    assert dataclasses.is_dataclass(cls), f"{name} is not a dataclass"
    ours = {f.name for f in dataclasses.fields(cls)}
    # verl's _target_ is a field; ours is a class attribute every config class gets (its own import path)
    missing = [f for f in spec["fields"] if f not in ours and f != "_target_" and not _not_carried(cls, f)]
    assert missing == [], f"{cls.__module__}.{name} lacks verl 0.9.1's fields {missing}"
    if "_target_" in spec["fields"]:
        assert getattr(cls, "_target_", None), f"{name} has no _target_"


@pytest.mark.parametrize("target", VERL_FIELDS["yaml_targets"])
def test_every_class_path_verls_yaml_names_imports(target):
    module, _, name = target.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    assert cls is not None and dataclasses.is_dataclass(cls), f"{target} does not name a config class here"


def test_the_allow_list_names_fields_that_are_still_missing_and_read_them():
    for (name, field_name), reason in NOT_CARRIED.items():
        assert reason
        assert field_name in VERL_FIELDS["classes"][name]["fields"], f"verl has no {name}.{field_name}"
        cls = _our_class(name, VERL_FIELDS["classes"][name]["module"])
        assert field_name not in {f.name for f in dataclasses.fields(cls)}, f"{name}.{field_name} is carried now"
        assert hasattr(cls(), field_name), f"{name}.{field_name} cannot be read"


@pytest.mark.skipif(not os.environ.get("VERL_0_9_1_ROOT"), reason="set VERL_0_9_1_ROOT to an unpacked verl 0.9.1")
def test_the_recorded_fields_match_verl():
    from gen_verl_config_fields import generate

    assert generate(Path(os.environ["VERL_0_9_1_ROOT"])) == VERL_FIELDS


# -- verl's fields that act here --------------------------------------------------------------------------------------
def test_verls_other_names_of_our_fields_read_them():
    from verl.workers.config import (
        CheckpointEngineConfig,
        FSDPActorConfig,
        FSDPCriticConfig,
        OptimizerConfig,
        RewardModelConfig,
        RewardModelPathConfig,
    )

    assert CheckpointEngineConfig(bucket_megabytes=1024).update_weights_bucket_megabytes == 1024
    assert RewardModelConfig(model=RewardModelPathConfig(path="/models/rm")).model_path == "/models/rm"
    critic = FSDPCriticConfig()
    assert critic.fsdp is critic.engine is critic.fsdp_config
    actor = FSDPActorConfig()
    assert actor.engine is actor.fsdp_config and actor["engine"] is actor.fsdp_config
    offloaded = dataclasses.replace(actor, fsdp_config=dataclasses.replace(actor.fsdp_config, param_offload=True))
    assert offloaded.engine is offloaded.fsdp_config and offloaded.engine.param_offload
    assert "engine" not in actor.to_dict()
    assert OptimizerConfig(grad_clip=0.5).clip_grad == 0.5  # verl's deprecated name sets it


def test_a_recipe_reads_verls_rollout_keys_on_the_composed_config():
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config

    overrides = [
        "actor_rollout_ref.rollout.log_prob_micro_batch_size=32",  # verl's spelling: moved to the actor's key
        "actor.log_prob_use_dynamic_bsz=true",
        "trainer.n_gpus_per_node=4",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, typed = resolve_config(compose_ppo_config(overrides))
    assert typed.actor.log_prob_micro_batch_size_per_gpu == 8  # 32 over 4 processes
    rollout = typed.rollout
    assert (rollout.log_prob_micro_batch_size_per_gpu, rollout.log_prob_use_dynamic_bsz) == (8, True)
    assert rollout.log_prob_micro_batch_size is None  # turned into the per-process size, as verl's workers do
    assert cfg.rollout.log_prob_micro_batch_size_per_gpu == 8


def test_a_repetition_penalty_the_rollout_cannot_apply_is_refused_by_key():
    from verl.base_config import ConfigError
    from verl.workers.config import RolloutConfig

    with pytest.raises(ConfigError, match="repetition_penalty"):
        RolloutConfig(repetition_penalty=1.1)
