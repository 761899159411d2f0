"""Recipes resolve the composed config in their own ``main`` before handing it over (``OmegaConf.resolve``). For every
leaf of the ``actor_rollout_ref`` mirror set to a value of its own, the translated config must be the same whether
or not it was resolved first, and a key set once is never "set twice"."""

from __future__ import annotations

import warnings

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.compose import default_ppo_config
from verl.trainer.config.key_rules import config_leaves
from verl.trainer.config.legacy import translate_legacy_config, translate_legacy_key
from verl.trainer.config.ppo_config import build_ppo_config

MIRROR = "actor_rollout_ref"
# a null leaf of the mirror whose name says it holds a size or a switch gets a value of that kind
_NULL_SIZES = ("micro_batch_size", "max_token_len", "megabytes", "_size")
_GLOBAL_SIZES = ("ppo_micro_batch_size", "log_prob_micro_batch_size", "forward_micro_batch_size")


@pytest.fixture(scope="module")
def packaged() -> DictConfig:
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer")


def _value_of_its_own(key: str, value):
    """A value for ``key`` that differs from its packaged one, of the same kind; None when no such value is safe."""
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value + 0.25
    if value is None and leaf.startswith("log_prob_use_dynamic_bsz"):
        return True
    if value is None and any(part in leaf for part in _NULL_SIZES):
        return 3
    return None  # strings name implementations (refused or checked elsewhere); lists and nulls of unknown kind


def _mirror_cases(packaged: DictConfig) -> list[tuple[str, object]]:
    resolved = OmegaConf.to_container(packaged, resolve=True)[MIRROR]
    cases = []
    for key, value in config_leaves(resolved, MIRROR):
        own = _value_of_its_own(key, value)
        if own is not None:
            cases.append((key, own))
    return cases


def _translated(cfg: DictConfig, resolve_first: bool) -> dict:
    cfg = cfg.copy()
    if resolve_first:
        OmegaConf.resolve(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg, _ = translate_legacy_config(cfg, defaults=default_ppo_config())
    return OmegaConf.to_container(cfg, resolve=True)


def test_every_mirror_key_translates_the_same_resolved_or_not(packaged):
    cases = _mirror_cases(packaged)
    assert len(cases) > 150, "the mirror lost its groups"
    # keys that land on the same flattened key as another mirror key are set in runs of their own, not "set twice":
    # verl's rollout.log_prob_* (our actor.log_prob_*), the deprecated global sizes (per-process sizes) and verl's
    # checkpoint_engine.update_weights_bucket_megabytes (bucket_megabytes)
    alone = [
        [c for c in cases if c[0].startswith(f"{MIRROR}.rollout.log_prob_")],
        [c for c in cases if c[0].rsplit(".", 1)[-1] in _GLOBAL_SIZES],
        [c for c in cases if c[0].endswith("update_weights_bucket_megabytes")],
    ]
    main = [c for c in cases if not any(c in batch for batch in alone)]
    for batch in (main, *alone):
        cfg = packaged.copy()
        for key, value in batch:
            OmegaConf.update(cfg, key, value, merge=False)
        raw, resolved = _translated(cfg, False), _translated(cfg, True)
        assert dict(config_leaves(resolved, "")) == dict(config_leaves(raw, ""))
        if batch is not main:
            continue
        lost, arrived = [], OmegaConf.create(resolved)
        for key, value in batch:
            new_key = translate_legacy_key(key)
            if isinstance(new_key, str) and OmegaConf.select(arrived, new_key) != value:
                lost.append(f"{key}={value!r} -> {new_key}")
        assert not lost, "values set in the mirror did not arrive:\n" + "\n".join(lost)


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.use_dynamic_bsz=true"],
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.strategy=fsdp"],
        ["actor_rollout_ref.actor.ppo_mini_batch_size=32", "data.train_batch_size=64"],
    ],
)
def test_a_recipe_that_resolves_gets_its_values(overrides):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    # what a recipe reads from the mirror before the hand-over follows what it set there
    if "actor_rollout_ref.rollout.n=8" in overrides:
        assert cfg.actor_rollout_ref.actor.rollout_n == 8 and cfg.actor_rollout_ref.ref.rollout_n == 8
    if "actor_rollout_ref.actor.strategy=fsdp" in overrides:
        assert cfg.actor_rollout_ref.ref.strategy == "fsdp"
    typed = []
    for resolve_first in (False, True):
        copy = cfg.copy()
        if resolve_first:
            OmegaConf.resolve(copy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copy, _ = translate_legacy_config(copy, defaults=default_ppo_config())
        OmegaConf.resolve(copy)
        typed.append(build_ppo_config(copy))
    assert typed[0] == typed[1]
    if "actor_rollout_ref.rollout.n=8" in overrides:
        assert typed[1].rollout.n == typed[1].actor.rollout_n == typed[1].ref.rollout_n == 8
        assert typed[1].actor.log_prob_use_dynamic_bsz is True
    if "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16" in overrides:
        assert typed[1].actor.log_prob_micro_batch_size_per_gpu == 16
        assert typed[1].ref.log_prob_micro_batch_size_per_gpu == 16
