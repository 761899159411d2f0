"""verl 0.8's main_ppo_sync: PPOTrainer built from the config alone, and its task runner end to end."""

from __future__ import annotations

import warnings

import pytest
from omegaconf import OmegaConf, open_dict

from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.config.legacy_view import add_legacy_view
from verl.trainer.demo import demo_overrides
from verl.trainer.main_ppo import resolve_config
from verl.trainer.main_ppo_sync import PPOTrainer, TaskRunner, _flattened
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role


def _demo(*extra, drop=()):
    overrides = [o for o in demo_overrides() if not o.startswith(("trainer.default_local_dir", *drop))]
    return compose_ppo_config([*overrides, *extra])


def test_flattened_translates_verl_blocks_and_keeps_the_alias_view():
    config = _demo(drop=("rollout.n",))
    with open_dict(config):
        config.actor_rollout_ref = {"rollout": {"n": 3}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = _flattened(config)
    assert flat.rollout.n == 3 and "actor_rollout_ref" not in flat
    viewed = add_legacy_view(OmegaConf.create(OmegaConf.to_container(_demo(), resolve=True)))
    assert _flattened(viewed) is viewed and viewed.actor_rollout_ref.rollout.n == viewed.rollout.n


def test_ppo_trainer_loads_tokenizer_data_and_rewards_from_the_config(tmp_path):
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    config, _ = resolve_config(_demo(f"trainer.default_local_dir={tmp_path}"))
    trainer = PPOTrainer(config, {Role.ActorRollout: ActorRolloutRefWorker}, resource_pool_manager=None)
    assert isinstance(trainer, RayPPOTrainer) and trainer.tokenizer is not None
    assert trainer.reward_fn is not None and trainer.val_reward_fn is not None
    assert len(trainer.train_dataloader) > 0 and trainer.config.actor_rollout_ref.rollout.n == config.rollout.n
    with pytest.raises(ValueError, match="needs an actor role"):
        PPOTrainer(config, {}, resource_pool_manager=None, tokenizer=trainer.tokenizer)


@pytest.mark.ray
@pytest.mark.slow
def test_task_runner_trains_with_the_config_built_trainer(ray_cluster, tmp_path):
    from verl.trainer.ppo.task_runner import run_ppo
    from verl.utils.tracking import read_metrics

    config, _ = resolve_config(
        _demo(
            f"trainer.default_local_dir={tmp_path}",
            "trainer.total_training_steps=1",
            "trainer.n_gpus_per_node=1",
            "trainer.logger=[file]",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            f"ray_kwargs.timeline_json_file={tmp_path}/trace/timeline.json",
            drop=(
                "trainer.total_training_steps",
                "trainer.n_gpus_per_node",
                "trainer.logger",
                "trainer.test_freq",
                "trainer.val_before_train",
            ),
        )
    )
    assert TaskRunner.trainer_class is PPOTrainer
    run_ppo(config, task_runner_class=TaskRunner)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1] and "critic/score/mean" in records[0]
    # ray_kwargs.timeline_json_file: Ray's record of the run's actor calls, as bench/timeline.py reads it
    from bench.timeline import GENERATION, TRAINING, analyse

    timeline = analyse(tmp_path / "trace" / "timeline.json", skip_updates=0)
    kinds = {call.kind for lane in timeline.lanes for call in lane.calls}
    assert {GENERATION, TRAINING} <= kinds
    assert 0 < timeline.summary["pipeline_efficiency"] <= 1


def test_replace_overrides_puts_each_key_once_with_the_new_value():
    from verl.trainer.demo import replace_overrides

    merged = replace_overrides(["a.b=1", "+c=2", "d=3"], ["c=5", "a.b=null"])
    assert merged == ["d=3", "c=5", "a.b=null"]
