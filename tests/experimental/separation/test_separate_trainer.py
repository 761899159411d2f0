"""SeparateRayPPOTrainer in verl's steps: ``init_workers`` runs them in verl's order (an override takes effect), the
worker-group steps build verl's tables, ``fit_step`` wraps the template in verl's step hooks, and
``checkpoint_manager`` publishes the trainer's next version whatever label the caller passes."""

from __future__ import annotations

import asyncio

import pytest

from verl.experimental.separation import ray_trainer as separation
from verl.experimental.separation.checkpoint_manager import SeparateCheckpointManager
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.single_controller.ray.class_with_init_args import user_class
from verl.trainer.config import PPOConfig
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

INIT_STEPS = (
    "_init_resource_pools",
    "_create_actor_rollout_classes",
    "_create_critic_class",
    "_create_reference_policy_class",
    "_create_reward_model_class",
    "_init_reward_loop",
    "_init_worker_groups",
    "_init_models",
    "_init_async_rollout_manager",
    "_setup_checkpoint_manager",
)


class _Pool:
    """A pool without placement groups: trainer and rollout sides then start one after the other."""

    pgs = None

    def __init__(self, name: str) -> None:
        self.name, self.reserved = name, False

    def get_placement_groups(self) -> None:
        self.reserved = True


class _Pools:
    def __init__(self, pools: dict[Role, _Pool]) -> None:
        self.pools, self.created = pools, False

    def create_resource_pool(self) -> None:
        self.created = True

    def get_resource_pool(self, role: Role) -> _Pool:
        return self.pools[role]


def test_init_workers_runs_verl_steps_in_order_and_overrides_take_effect():
    trainer = object.__new__(SeparateRayPPOTrainer)
    trainer.resource_pool_manager = _Pools({Role.Rollout: _Pool("rollout")})
    trainer.resource_pool_to_cls = {_Pool("trainer"): {}}
    calls: list[str] = []
    for name in INIT_STEPS:
        setattr(trainer, name, lambda name=name: calls.append(name))
    trainer.init_workers()
    assert calls == list(INIT_STEPS)


def _worker_trainer(order: list[str]) -> SeparateRayPPOTrainer:
    trainer = object.__new__(SeparateRayPPOTrainer)
    trainer.ppo_config, trainer.total_training_steps = PPOConfig(), 3
    trainer.role_worker_mapping = {
        Role.Actor: DetachActorWorker,
        Role.Critic: CriticWorker,
        Role.RefPolicy: ActorRolloutRefWorker,
    }
    trainer.use_critic = trainer.use_reference_policy = True
    trainer.ref_in_actor = trainer.use_rm = False
    pool, rollout_pool = _Pool("trainer"), _Pool("rollout")
    trainer.resource_pool_manager = _Pools(
        {Role.Actor: pool, Role.Critic: pool, Role.RefPolicy: pool, Role.Rollout: rollout_pool}
    )

    class Group:
        def __init__(self, name: str) -> None:
            self.name = name

        def init_model(self) -> None:
            order.append(self.name)

    class GroupClass:
        def __init__(self, resource_pool, ray_cls_with_init, startup_timeout_s) -> None:
            assert resource_pool is pool and startup_timeout_s == 300

        def spawn(self, prefix_set):
            return {name: Group(name) for name in prefix_set}

    trainer.ray_worker_group_cls = GroupClass
    return trainer


def test_worker_group_steps_build_verl_tables_and_init_the_actor_last(monkeypatch):
    monkeypatch.setattr(separation, "create_colocated_worker_cls", dict)
    order: list[str] = []
    trainer = _worker_trainer(order)
    trainer._init_resource_pools()
    manager = trainer.resource_pool_manager
    assert manager.created and all(pool.reserved for pool in manager.pools.values())
    [(pool, table)] = trainer.resource_pool_to_cls.items()  # the rollout pool holds replicas, no worker class
    assert pool is manager.pools[Role.Actor] and table == {}
    trainer._create_worker_classes()
    assert set(table) == {"actor", "critic", "ref"}
    assert user_class(table["actor"].cls) is DetachActorWorker and table["actor"].kwargs["role"] == "actor"
    assert trainer.orig_critic_cfg is trainer.ppo_config.critic
    trainer._init_worker_groups()
    assert set(trainer.all_wg) == {"actor", "critic", "ref"}
    trainer._init_models()
    assert order == ["critic", "ref", "actor"]
    assert trainer.actor_wg is trainer.actor_rollout_wg is trainer.all_wg["actor"]
    assert trainer.critic_wg.name == "critic" and trainer.ref_policy_wg.name == "ref"


def test_fit_step_wraps_the_template_in_verl_step_hooks(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(RayPPOTrainer, "fit_step", lambda self, batch_dict=None: calls.append("template"))
    trainer = object.__new__(SeparateRayPPOTrainer)
    trainer.metrics = {}
    for name in ("_fit_prepare_step", "_fit_start_profile", "_fit_stop_profile", "_fit_postprocess_step"):
        setattr(trainer, name, lambda name=name: calls.append(name))
    assert trainer.fit_step({}) is trainer.metrics
    hooks = ["_fit_prepare_step", "_fit_start_profile", "template", "_fit_stop_profile", "_fit_postprocess_step"]
    assert calls == hooks


def test_prepare_and_postprocess_keep_verl_step_state():
    trainer = object.__new__(SeparateRayPPOTrainer)
    trainer.global_steps, trainer.total_training_steps, trainer.epoch = 3, 3, 1
    trainer.future_reward, trainer.reward_tensor, trainer.reward_extra_infos_dict = object(), object(), {"a": [1]}
    trainer._fit_prepare_step()
    assert trainer.is_last_step
    assert trainer.future_reward is None and trainer.reward_tensor is None and trainer.reward_extra_infos_dict == {}
    trainer.metrics, trainer.timing_raw, trainer.max_steps_duration = {}, {"step": 2.5}, 1.0
    trainer._fit_postprocess_step()
    assert trainer.metrics["training/epoch"] == 1 and trainer.max_steps_duration == 2.5


class _Engine:
    def __init__(self) -> None:
        self.versions: list[int] = []
        self.replicas = {"replica0": "r0"}

    def update_weights(self, version: int) -> dict:
        self.versions.append(version)
        return {"checksum": f"c{version}", "metrics": {"timing_s/update_weights": 0.5}}


def test_checkpoint_manager_publishes_the_trainers_next_version_sync_or_awaited():
    trainer = object.__new__(SeparateRayPPOTrainer)
    engine = _Engine()
    trainer.weight_sync, trainer.weight_version, trainer.weight_checksums = engine, 4, {}
    manager = SeparateCheckpointManager(trainer, engine)
    metrics = manager.update_weights(global_steps=17)  # verl passes the step: only a label here
    assert metrics == {"timing_s/update_weights": 0.5, "rollout/weight_version": 5}
    assert engine.versions == [5] and trainer.weight_checksums == {5: "c5"}

    async def in_a_loop() -> dict:
        await manager.sleep_replicas()  # the rollout pool is never shared with training: nothing to free
        await manager.wake_up_replicas()
        return await manager.update_weights(18)

    assert asyncio.run(in_a_loop())["rollout/weight_version"] == 6
    assert manager.replicas == {"replica0": "r0"}  # the engine's own attributes
    with pytest.raises(NotImplementedError, match="abort_replicas.*update_weights"):
        manager.abort_replicas()
