"""bench/trl_comparison.py: every verl variant's command line composes into the layout its label promises."""

import argparse

import pytest

from bench.trl_comparison import ENTRY_POINTS, VARIANTS, ours_overrides

ARGS = argparse.Namespace(prompts=32, n=8, response_length=16, steps=60, data="train.parquet")


def _compose(variant, run_dir):
    overrides = ours_overrides(ARGS, str(run_dir), variant, seed=0)
    if variant.mode == "one_step_off":
        from recipe._entry import compose_recipe_config
        from recipe.one_step_off_policy.main_ppo import CONFIG_DIR, CONFIG_NAME

        return compose_recipe_config(CONFIG_DIR, CONFIG_NAME, overrides)
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config

    return resolve_config(compose_ppo_config(overrides))[0]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.trainer == "verl"], ids=lambda v: v.key)
def test_verl_variants_compose_with_their_process_layout(variant, tmp_path):
    config = _compose(variant, tmp_path)
    trainers = int(config.trainer.n_gpus_per_node)
    rollouts = int(config.rollout.nnodes) * int(config.rollout.n_gpus_per_node)
    assert trainers + rollouts == variant.processes  # the cores the comparison credits the variant with
    assert rollouts == (1 if variant.mode == "one_step_off" else 0)
    # one micro-batch per worker and step: the same update work as TRL's single backward per step
    assert int(config.actor.ppo_micro_batch_size_per_gpu) * trainers == ARGS.prompts * ARGS.n
    assert ENTRY_POINTS[variant.mode].startswith("recipe." if variant.mode == "one_step_off" else "verl.")
