"""The batch plan: derived sizes, padding where exact, refusal (naming keys) where not."""

import pytest

from verl.base_config import ConfigError
from verl.trainer.config import AlgoConfig, DataConfig, PPOConfig, TrainerConfig, compute_batch_plan, format_batch_plan
from verl.workers.config import FSDPActorConfig, FSDPCriticConfig, RolloutConfig


def _config(prompts=32, n=4, mini=8, micro=4, world=2, critic=True, kl=False, **rollout):
    actor = FSDPActorConfig(
        ppo_mini_batch_size=mini,
        ppo_micro_batch_size_per_gpu=micro,
        rollout_n=n,
        log_prob_micro_batch_size_per_gpu=6,
        use_kl_loss=kl,
    )
    return PPOConfig(
        data=DataConfig(train_batch_size=prompts),
        actor=actor,
        ref=FSDPActorConfig(rollout_n=n, log_prob_micro_batch_size_per_gpu=5),
        critic=FSDPCriticConfig(
            enable=critic,
            ppo_mini_batch_size=mini,
            ppo_micro_batch_size_per_gpu=micro,
            forward_micro_batch_size_per_gpu=7,
            rollout_n=n,
        ),
        rollout=RolloutConfig(n=n, **rollout),
        algorithm=AlgoConfig(adv_estimator="gae" if critic else "grpo"),
        trainer=TrainerConfig(n_gpus_per_node=world),
    )


def test_numbers_of_a_regular_plan():
    plan = compute_batch_plan(_config())
    assert plan["prompts_per_step"] == 32 and plan["samples_per_step"] == 128
    assert plan["trainer_world_size"] == 2 and plan["rollout_world_size"] == 2 and plan["rollout_replicas"] == 2
    assert plan["forward_pad_samples"] == 0 and plan["forward_samples_per_rank"] == 64
    actor = plan["actor"]
    assert actor["mini_batches_per_step"] == 4 and actor["samples_per_mini_batch"] == 32
    assert actor["samples_per_rank_per_mini_batch"] == 16
    assert actor["micro_batch_size_per_gpu"] == 4 and actor["micro_batches_per_mini_batch"] == 4
    assert actor["optimizer_steps_per_step"] == 4
    assert actor["forward_micro_batch_size_per_gpu"] == 6 and actor["forward_micro_batches_per_rank"] == 11
    assert plan["critic"]["forward_micro_batches_per_rank"] == 10  # ceil(64 / 7): the last one is smaller
    assert plan["ref"] is None


def test_ref_appears_with_a_kl_loss_and_critic_disappears_without_gae():
    plan = compute_batch_plan(_config(critic=False, kl=True))
    assert plan["critic"] is None
    assert plan["ref"] == {"forward_micro_batch_size_per_gpu": 5, "forward_micro_batches_per_rank": 13}


def test_uneven_mini_batches_are_reported_not_refused():
    plan = compute_batch_plan(_config(prompts=20, mini=8, n=1, micro=2))
    assert plan["actor"]["mini_batches_per_step"] == 3 and plan["actor"]["last_mini_batch_prompts"] == 4


def test_standalone_rollout_pool_and_tensor_parallel_replicas():
    plan = compute_batch_plan(_config(nnodes=2, n_gpus_per_node=4, tensor_model_parallel_size=2))
    assert plan["rollout_world_size"] == 8 and plan["rollout_replicas"] == 4
    with pytest.raises(ConfigError, match=r"^rollout.tensor_model_parallel_size: \(3\) does not divide the 8 rollout"):
        _config(nnodes=2, n_gpus_per_node=4, tensor_model_parallel_size=3)


def test_data_parallel_engines_make_fewer_larger_replicas():
    plan = compute_batch_plan(
        _config(name="vllm", nnodes=2, n_gpus_per_node=4, tensor_model_parallel_size=2, data_parallel_size=2)
    )
    assert plan["rollout_world_size"] == 8 and plan["rollout_replicas"] == 2  # 4 GPUs per replica
    with pytest.raises(
        ConfigError,
        match=r"^rollout.data_parallel_size: \(3\) x rollout.tensor_model_parallel_size "
        r"\(2\) = 6 GPUs per replica does not divide the 8 rollout processes",
    ):
        _config(name="sglang", nnodes=2, n_gpus_per_node=4, tensor_model_parallel_size=2, data_parallel_size=3)


def test_data_parallel_size_on_the_hf_engine_is_refused_by_name():
    from verl.trainer.config.compose import compose_ppo_config
    from verl.trainer.main_ppo import resolve_config

    with pytest.raises(ConfigError, match=r"rollout.data_parallel_size: is 2, but the hf engine"):
        resolve_config(compose_ppo_config(["rollout.data_parallel_size=2"]))


def test_dynamic_batch_size_has_no_fixed_micro_batches():
    cfg = _config()
    actor = FSDPActorConfig(
        ppo_mini_batch_size=8,
        rollout_n=4,
        use_dynamic_bsz=True,
        log_prob_use_dynamic_bsz=True,
        ppo_micro_batch_size_per_gpu=3,
    )
    plan = compute_batch_plan(PPOConfig(**{**cfg, "actor": actor}))
    assert plan["actor"]["micro_batch_size_per_gpu"] is None
    assert plan["actor"]["micro_batches_per_mini_batch"].startswith("dynamic")


def test_deprecated_global_micro_batch_size_is_split_over_ranks():
    cfg = _config()
    actor = FSDPActorConfig(
        ppo_mini_batch_size=8, rollout_n=4, ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=None
    )
    plan = compute_batch_plan(PPOConfig(**{**cfg, "actor": actor}))
    assert plan["actor"]["micro_batch_size_per_gpu"] == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prompts": 4, "mini": 8}, r"^actor.ppo_mini_batch_size: \(8\) is larger than data.train_batch_size \(4\)"),
        (
            {"prompts": 9, "n": 1, "mini": 3, "micro": 1},
            r"^data.train_batch_size: \(9\) x rollout.n \(1\) = 9 samples do not split evenly over the 2 trainer",
        ),
        (
            {"prompts": 12, "n": 1, "mini": 3, "micro": 1},
            r"^actor.ppo_mini_batch_size: \(3\) x rollout.n \(1\) = 3 samples do not split evenly",
        ),
    ],
)
def test_impossible_plans_name_the_keys(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        _config(**kwargs)


def test_format_is_a_table_with_every_role():
    text = format_batch_plan(compute_batch_plan(_config()))
    lines = text.splitlines()
    assert lines[0] == "Batch plan" and lines[1] == "| quantity | value | from |"
    assert "| samples per step | 128 | train_batch_size x rollout.n |" in lines
    assert "| actor: micro-batches per mini-batch | 4 | gradient accumulation steps |" in lines
    assert "| ref | off | |" in lines
    assert all(line.startswith("|") for line in lines[1:])


def test_plan_from_a_composed_config():
    from verl.trainer.config import compose_ppo_config, to_ppo_config

    plan = compute_batch_plan(
        to_ppo_config(
            compose_ppo_config(
                [
                    "data.train_batch_size=16",
                    "actor.ppo_mini_batch_size=4",
                    "rollout.n=2",
                    "actor.ppo_micro_batch_size_per_gpu=2",
                ]
            )
        )
    )
    assert plan["samples_per_step"] == 32 and plan["actor"]["micro_batches_per_mini_batch"] == 4


def test_committed_reference_matches_the_dataclasses():
    import pathlib

    from verl.trainer.config.reference import render_reference

    committed = pathlib.Path(__file__).parents[3] / "docs" / "config_reference.md"
    assert committed.read_text() == render_reference(), "regenerate: python -m verl.trainer.config.reference"


def test_uneven_and_oversized_micro_batches_are_planned_not_refused():
    uneven = compute_batch_plan(_config(micro=3))["actor"]
    assert uneven["micro_batch_size_per_gpu"] == 3
    assert uneven["micro_batches_per_mini_batch"] == 6 and uneven["last_micro_batch_size"] == 1
    oversized = compute_batch_plan(_config(micro=64))["actor"]
    assert oversized["micro_batch_size_per_gpu"] == 16 and oversized["micro_batches_per_mini_batch"] == 1


@pytest.mark.parametrize(("mini", "micro", "world"), [(8, 4, 2), (8, 64, 2), (4, 3, 4), (2, None, 1)])
def test_the_plan_prints_the_sizes_the_workers_train_with(mini, micro, world):
    """The worker's per-rank sizes are the plan's (one function computes both), under verl's actor keys."""
    from verl.workers.fsdp.worker_config import per_rank_update_sizes

    config = _config(mini=mini, micro=micro, world=world)
    for group in ("actor", "critic"):
        planned = compute_batch_plan(config)[group]
        sizes = per_rank_update_sizes(getattr(config, group), group, config.rollout.n, world)
        assert sizes["ppo_mini_batch_size"] == planned["samples_per_rank_per_mini_batch"] == mini * 4 // world
        assert sizes["ppo_micro_batch_size_per_gpu"] == planned["micro_batch_size_per_gpu"]
        assert sizes["ppo_micro_batch_size_per_gpu"] == min(micro or mini * 4 // world, mini * 4 // world)
