"""SeparateRayPPOTrainer: the PPO template of :class:`RayPPOTrainer` with the rollout on a pool of its own.

The trainer-side groups (actor, critic, ref, reward model) live on their pools as in the colocated trainer; the
rollout replicas live on ``Role.Rollout``'s pool (``rollout.nnodes x rollout.n_gpus_per_node``), and new weights
reach them through the checkpoint engine (``self.weight_sync``), which refuses to return unless every replica
reports the version and the trainer's checksum. How a batch is generated on those replicas is the subclass's
business: the one-step-off trainer overlaps it with training, the fully-async trainer reads it from a queue.

``init_workers`` runs verl's steps in verl's order, each a method a recipe can override: ``_init_resource_pools``,
``_create_worker_classes`` (``_create_actor_rollout_classes``, ``_create_critic_class``,
``_create_reference_policy_class``, ``_create_reward_model_class``), ``_init_reward_loop``, then the trainer side
(``_init_worker_groups``, ``_init_models``) beside the rollout side (``_init_async_rollout_manager``), and last
``_setup_checkpoint_manager``. Each step wraps the template's ``fit_step`` in verl's ``_fit_prepare_step`` /
``_fit_start_profile`` before and ``_fit_stop_profile`` / ``_fit_postprocess_step`` after.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.separation.checkpoint_manager import SeparateCheckpointManager
from verl.experimental.separation.deaths import GENERATOR, await_from, get_from
from verl.protocol import DataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role

__all__ = ["SeparateRayPPOTrainer"]


class RemoteGenerator:
    """A generation actor (``generate_sequences(batch)`` as a Ray method) behind verl's blocking
    ``generate_sequences``, bounded by ``timeout_s``; its death is a ``WorkerDiedError`` naming ``role``."""

    def __init__(self, actor: Any, timeout_s: float, what: str, role: str = GENERATOR) -> None:
        self.actor, self.timeout_s, self.what, self.role = actor, float(timeout_s), what, role

    def generate_sequences(self, batch: DataProto) -> DataProto:
        return get_from(
            self.actor.generate_sequences.remote(batch),
            role=self.role,
            method="generate_sequences",
            actor=self.actor,
            timeout_s=self.timeout_s,
            doing=f"generation for {self.what}",
        )

    async def generate_sequences_async(self, batch: DataProto) -> DataProto:
        return await await_from(
            self.actor.generate_sequences.remote(batch),
            role=self.role,
            method="generate_sequences",
            actor=self.actor,
            timeout_s=self.timeout_s,
            doing=f"generation for {self.what}",
        )


class SeparateRayPPOTrainer(RayPPOTrainer):
    """PPO trainer whose rollout has its own resource pool. Subclasses implement ``_init_rollout(pool)`` (which
    must set ``self.replicas``) and generation (``_generate_sequences`` or ``_fit_generate``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.weight_sync: Any = None  # the CheckpointEngineManager, built by _setup_checkpoint_manager
        self.replicas: list[Any] = []
        self.all_wg: dict[str, RayWorkerGroup] = {}  # worker role name -> its group, set by _init_worker_groups
        self.orig_critic_cfg: Any = None  # the critic's typed config, set by _create_critic_class
        self.future_reward: Any = None  # a step's background reward; None: the reward stage scores the batch

    def _standalone_rollout(self) -> bool:
        return True

    # ------------------------------------------------------------------ init_workers, in verl's steps

    def init_workers(self) -> None:
        """Reserve the pools, build the trainer workers and the rollout side (in parallel only when both pools
        are placement groups, so neither can take the other's slots), then check the replicas hold the trainer's
        weights."""
        from verl.experimental.separation.rollout_pool import placement_guaranteed, run_parallel_or_ordered

        self._init_resource_pools()
        self._create_worker_classes()
        self._init_reward_loop()
        manager = self.resource_pool_manager
        parallel = placement_guaranteed(manager.get_resource_pool(Role.Rollout), *self.resource_pool_to_cls)
        run_parallel_or_ordered(parallel, self._init_trainer_side, self._init_async_rollout_manager)
        self._setup_checkpoint_manager()

    def _init_trainer_side(self) -> None:
        self._init_worker_groups()
        self._init_models()

    def _init_resource_pools(self) -> None:
        """Create every pool and reserve its slots; ``resource_pool_to_cls`` gets an empty class table per
        trainer-side pool (the rollout pool holds replicas, not worker groups)."""
        manager = self.resource_pool_manager
        manager.create_resource_pool()
        rollout_pool = manager.get_resource_pool(Role.Rollout)
        trainer_pools = [manager.get_resource_pool(role) for role in self.role_worker_mapping if role != Role.Rollout]
        for pool in [rollout_pool, *trainer_pools]:
            pool.get_placement_groups()
        self.resource_pool_to_cls = {pool: {} for pool in trainer_pools}

    def _create_worker_classes(self) -> None:
        self._create_actor_rollout_classes()
        self._create_critic_class()
        self._create_reference_policy_class()
        self._create_reward_model_class()

    def _add_worker_class(self, role: Role, role_name: str) -> None:
        """Put ``role``'s worker class (built with the typed worker config) in its pool's class table under
        ``role_name``, the key of ``all_wg``."""
        pool = self.resource_pool_manager.get_resource_pool(role)
        cls = RayClassWithInitArgs(self.role_worker_mapping[role], config=self.worker_config, role=role_name)
        self.resource_pool_to_cls.setdefault(pool, {})[role_name] = cls

    def _create_actor_rollout_classes(self) -> None:
        """The actor (``Role.Actor``: it publishes weights, it hosts no engine)."""
        self._add_worker_class(self.actor_role, self.actor_role_name)

    def _create_critic_class(self) -> None:
        if self.use_critic:
            self.orig_critic_cfg = self.ppo_config.critic
            self._add_worker_class(Role.Critic, str(Role.Critic))

    def _create_reference_policy_class(self) -> None:
        if self.use_reference_policy and not self.ref_in_actor:
            self._add_worker_class(Role.RefPolicy, str(Role.RefPolicy))

    def _create_reward_model_class(self) -> None:
        if self.use_rm:
            self._add_worker_class(Role.RewardModel, str(Role.RewardModel))

    def _init_worker_groups(self) -> None:
        """Spawn one colocated group per trainer-side pool; ``all_wg`` maps each role name to its group."""
        startup_timeout_s = float(self.ppo_config.trainer.ray_wait_register_center_timeout)
        all_wg: dict[str, RayWorkerGroup] = {}
        for pool, class_dict in self.resource_pool_to_cls.items():
            if not class_dict:
                continue
            group = self.ray_worker_group_cls(
                resource_pool=pool,
                ray_cls_with_init=create_colocated_worker_cls(class_dict),
                startup_timeout_s=startup_timeout_s,
            )
            all_wg.update(group.spawn(prefix_set=class_dict.keys()))
        self.all_wg = all_wg

    def _init_models(self) -> None:
        """Load the models into the groups; the actor last (``actor_wg``, also ``actor_rollout_wg``)."""
        if self.use_critic:
            self.critic_wg = self.all_wg[str(Role.Critic)]
            self.critic_wg.init_model()
        if self.use_reference_policy and not self.ref_in_actor:
            self.ref_policy_wg = self.all_wg[str(Role.RefPolicy)]
            self.ref_policy_wg.init_model()
        if self.use_rm:
            self.rm_wg = self.all_wg[str(Role.RewardModel)]
            self.rm_wg.init_model()
        self.actor_wg = self.actor_rollout_wg = self.all_wg[self.actor_role_name]
        self.actor_wg.init_model()

    def _init_reward_loop(self) -> None:
        """``reward_loop_manager``: scores batches with the trainer's reward manager, in this process (a reward
        model, when configured, scores through its worker group in ``_compute_reward_colocate``)."""
        from verl.trainer.ppo.scored_generation import DriverRewardLoop

        self.reward_loop_manager = None if self.reward_fn is None else DriverRewardLoop(self.reward_fn)

    def _init_async_rollout_manager(self) -> None:
        """Start the rollout side on ``Role.Rollout``'s pool (:meth:`_init_rollout`), then verl's names over it:
        ``llm_server_manager`` (the replicas) and ``async_rollout_manager`` (generation that returns scored
        batches)."""
        from verl.workers.rollout.llm_server import LLMServerManager

        self._init_rollout(self.resource_pool_manager.get_resource_pool(Role.Rollout))
        self.llm_server_manager = LLMServerManager(self.config, replicas=self.replicas)
        self._init_generation_client()
        self.async_rollout_mode = True

    def _init_generation_client(self) -> None:
        """``async_rollout_manager`` over :meth:`_generation_actor` (None when there is no such actor)."""
        from verl.trainer.ppo.scored_generation import ScoredRolloutManager

        actor = self._generation_actor()
        if actor is None:
            self.async_rollout_manager = None
            return
        generator = RemoteGenerator(actor, self._generation_timeout_s(), type(self).__name__, self._generation_role())
        self.async_rollout_manager = ScoredRolloutManager(generator, None if self.use_rm else self.reward_loop_manager)

    def _init_rollout(self, pool: Any) -> None:
        """Start the rollout replicas on ``pool`` and whatever drives them; sets ``self.replicas``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _init_rollout(pool)")

    def _generation_actor(self) -> Any:
        """The Ray actor whose ``generate_sequences(batch)`` generates on the replicas (None: there is none)."""
        return getattr(self, "generator", None)

    def _generation_timeout_s(self) -> float:
        return float(getattr(self, "generate_timeout_s", 3600.0))

    def _generation_role(self) -> str:
        """What a death of :meth:`_generation_actor` is reported as (the first word of its error)."""
        return GENERATOR

    def _setup_checkpoint_manager(self) -> None:
        """The checkpoint engine over the actor group and the replicas (``weight_sync``), verl's
        ``checkpoint_manager`` over it, and a first publish of the trainer's current weights, which every replica
        must confirm with the trainer's checksum."""
        from verl.experimental.separation.rollout_pool import build_weight_sync

        self.weight_sync = build_weight_sync(self.config, self.actor_rollout_wg, self.replicas)
        self.checkpoint_manager = SeparateCheckpointManager(self, self.weight_sync)
        report = self.weight_sync.update_weights(int(self.weight_version))
        self.weight_checksums[int(self.weight_version)] = str(report.get("checksum"))

    # ------------------------------------------------------------------ one step

    def fit_step(self, batch_dict: dict | None = None) -> dict[str, Any]:
        """The template's step between verl's step hooks."""
        self._fit_prepare_step()
        self._fit_start_profile()
        super().fit_step(batch_dict)
        self._fit_stop_profile()
        self._fit_postprocess_step()
        return self.metrics

    def _fit_prepare_step(self) -> None:
        """Before a step: whether it is the last one, and no reward state left from the previous step."""
        self.is_last_step = self.global_steps >= self.total_training_steps
        self.future_reward = None
        self.reward_tensor = None
        self.reward_extra_infos_dict = {}

    def _fit_postprocess_step(self) -> None:
        """After a step's metrics are collected, before ``fit`` logs them and moves to the next step: the step's
        epoch and the longest step so far."""
        self.metrics["training/epoch"] = self.epoch
        self.max_steps_duration = max(self.max_steps_duration, self.timing_raw.get("step", 0.0))

    # ------------------------------------------------------------------ generation and weights

    def _generate_sequences(self, gen_batch: DataProto) -> DataProto:
        raise NotImplementedError(f"{type(self).__name__} must implement _generate_sequences or _fit_generate")

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        raise NotImplementedError(f"{type(self).__name__} must implement _generate_validation to validate")

    def _update_rollout_weights(self, metrics: dict) -> None:
        """What ``checkpoint_manager.update_weights()`` does: publish the actor's weights as the next version
        (subclasses first settle their rollout, e.g. wait for a generation or pause the rollouter)."""
        self._push_weights(metrics)

    def _push_weights(self, metrics: dict) -> None:
        """Publish the actor's weights as the next version through the checkpoint engine (every replica must report
        the version and the trainer's checksum, or ``WeightSyncError`` names the culprit)."""
        if self.weight_sync is None:
            raise RuntimeError(
                f"{type(self).__name__}: no weight_sync (CheckpointEngineManager) was set up in "
                "init_workers; the rollout would keep serving stale weights"
            )
        self.weight_version += 1
        report = self.weight_sync.update_weights(self.weight_version)
        self.weight_checksums[self.weight_version] = str(report.get("checksum"))
        # what each replica reported loading (the manager already refused one differing from the trainer's)
        self.replica_checksums = {name: r.get("checksum") for name, r in report.get("replicas", {}).items()}
        metrics.update(report.get("metrics", {}))
        metrics["rollout/weight_version"] = self.weight_version
