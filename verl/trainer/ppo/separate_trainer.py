"""SeparateRayPPOTrainer: the PPO step as a template of overridable stages, shared by every trainer.

One training step is a fixed sequence of stages (DESIGN.md section 3); each stage is a named method (`_fit_*`) so
the synchronous trainer (`RayPPOTrainer`, colocated rollout) and the async recipes (one-step-off, fully async: rollout
on its own resource pool) override exactly the stage they change and no stage is written twice. This class owns the
trainer-side worker groups (actor, critic, ref, reward model) on their pools; how a batch is generated
(`_fit_generate`) and how new weights reach the rollout (`_fit_update_weights`) are the recipe's business.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from codetiming import Timer
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from verl.protocol import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    create_colocated_worker_cls,
)
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.checkpointing import STATE_FILE, TrainerCheckpointer
from verl.trainer.ppo.generation_dump import decode_samples, dump_generations, pick_samples
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    process_validation_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.reward import compute_reward
from verl.trainer.ppo.roles import Role
from verl.trainer.ppo.rollout_corr import IN_UPDATE_KEY, apply_rollout_correction, in_update_spec
from verl.utils.dataset.collate import collate_fn as default_collate_fn
from verl.utils.dataset.dataloader import check_loader_state, create_stateful_dataloader
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance
from verl.utils.tracking import Tracking

logger = logging.getLogger(__name__)

WorkerType = type


@contextmanager
def marked_timer(name: str, timing_raw: dict[str, float]):
    """Accumulate the wall time of a stage into `timing_raw[name]` (seconds)."""
    with Timer(name=name, logger=None) as timer:
        yield
    timing_raw[name] = timing_raw.get(name, 0.0) + timer.last


def need_critic(config: DictConfig) -> bool:
    """A critic is trained when asked explicitly, or by default when the estimator needs values (GAE)."""
    enable = config.critic.get("enable", None)
    if enable is not None:
        return bool(enable)
    return config.algorithm.adv_estimator == core_algos.AdvantageEstimator.GAE.value


def need_reference_policy(config: DictConfig) -> bool:
    return bool(config.algorithm.use_kl_in_reward or config.actor.use_kl_loss)


def build_dataloaders(config: DictConfig, tokenizer: Any, processor: Any = None, train_dataset: Any = None,
                      val_dataset: Any = None, collate_fn: Callable | None = None,
                      train_sampler: Any = None) -> tuple[Any, Any, Any, Any]:
    """(train set, val set, train loader, val loader) exactly as every trainer and the rollouter build them, so a
    rollouter iterating its own loader sees the prompts in the trainer's order."""
    from verl.utils.dataset.factory import create_rl_dataset
    from verl.utils.dataset.sampler import create_rl_sampler, create_val_sampler

    data = config.data
    # data.seed orders the prompts when set; otherwise trainer.seed does
    order_seed = data.get("seed") if data.get("seed") is not None else config.trainer.get("seed")
    if train_dataset is None:
        train_dataset = create_rl_dataset(data.train_files, data, tokenizer, processor, is_train=True)
    if val_dataset is None and data.get("val_files"):
        val_dataset = create_rl_dataset(data.val_files, data, tokenizer, processor, is_train=False)
    if train_sampler is None:
        train_sampler = create_rl_sampler(data, train_dataset, seed=order_seed)
    collate_fn = collate_fn or default_collate_fn
    train_dataloader = create_stateful_dataloader(
        train_dataset, batch_size=int(data.train_batch_size), sampler=train_sampler, collate_fn=collate_fn,
        num_workers=int(data.get("dataloader_num_workers", 0)), drop_last=True,
    )
    if len(train_dataloader) == 0:
        raise ValueError(
            f"data.train_batch_size={data.train_batch_size} is larger than the train set "
            f"({len(train_dataset)} rows in {data.train_files}); lower it or add data"
        )
    val_dataloader = None
    if val_dataset is not None:
        val_batch_size = data.get("val_batch_size") or len(val_dataset)
        val_sampler = create_val_sampler(data, val_dataset, seed=order_seed)
        val_dataloader = create_stateful_dataloader(
            val_dataset, batch_size=int(val_batch_size), sampler=val_sampler, collate_fn=collate_fn, drop_last=False,
        )
    return train_dataset, val_dataset, train_dataloader, val_dataloader


class StopTraining(Exception):
    """Raised by a stage when the run has no more data (e.g. the rollouter's stream ended): `fit` ends cleanly."""


ACTOR_ROLES = (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor)


def generation_seed(config: DictConfig, step: int) -> int | None:
    """Base sampling seed of step ``step`` from ``rollout.seed`` (default ``trainer.seed``): row ``i`` of the
    step's repeated batch samples with ``generation_seed + i``, whichever process generates it, so runs that see
    the same prompts in the same order draw the same responses (the async-vs-sync equivalence and exact resume
    rely on it). None: unseeded sampling."""
    seed = config.rollout.get("seed", None)
    if seed is None:
        # Fall back to the run's seed: per-row seeds make sampling independent of how requests share a batch,
        # which is what lets a killed and resumed run draw exactly the responses of an uninterrupted one.
        seed = (config.get("trainer") or {}).get("seed", None)
    if seed is None:
        return None
    return int(seed) * 1_000_003 + int(step) * 100_003


class SeparateRayPPOTrainer:
    """PPO trainer template; rollout and training may live on separate resource pools.

    Subclasses implement `_fit_generate` (and `_generate_validation` for validation) and, when the rollout does
    not share the actor's processes, set `self.weight_sync` (a `CheckpointEngineManager`) in `init_workers`.
    """

    def __init__(
        self,
        config: DictConfig,
        tokenizer: Any,
        role_worker_mapping: dict[Role, WorkerType],
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls: type[RayWorkerGroup] = RayWorkerGroup,
        processor: Any = None,
        reward_fn: Callable | None = None,
        val_reward_fn: Callable | None = None,
        train_dataset: torch.utils.data.Dataset | None = None,
        val_dataset: torch.utils.data.Dataset | None = None,
        collate_fn: Callable | None = None,
        train_sampler: torch.utils.data.Sampler | None = None,
        device_name: str | None = None,
    ):
        self.config = config
        self.tokenizer = tokenizer
        self.processor = processor
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.device_name = device_name or config.trainer.get("device", "auto")
        if not any(role in role_worker_mapping for role in ACTOR_ROLES):
            raise ValueError("role_worker_mapping needs an actor role: Role.ActorRollout, Role.ActorRolloutRef or "
                             "Role.Actor")
        self.use_critic = need_critic(config)
        self.use_reference_policy = need_reference_policy(config)
        self.ref_in_actor = self.use_reference_policy and Role.RefPolicy not in role_worker_mapping
        self.use_rm = Role.RewardModel in role_worker_mapping
        self.kl_ctrl_in_reward = (
            core_algos.get_kl_controller(config.algorithm.kl_ctrl) if config.algorithm.use_kl_in_reward else None
        )
        self.bypass_mode = bool(config.algorithm.rollout_correction.get("bypass_mode", False))
        self.global_steps = 0
        self.weight_version = 0
        self.weight_sync: Any = None  # CheckpointEngineManager when the rollout has processes of its own
        self.weight_checksums: dict[int, str] = {}  # version -> checksum every replica reported for it
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        self.checkpointer = TrainerCheckpointer(config.trainer)
        self._unfinished_checkpoint: tuple[int, dict[str, Any]] | None = None  # async save in flight
        self._val_generations: list[dict[str, Any]] | None = None  # picked by the last validation

    # ------------------------------------------------------------------ setup
    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        loaders = build_dataloaders(self.config, self.tokenizer, self.processor, train_dataset, val_dataset,
                                    collate_fn, train_sampler)
        self.train_dataset, self.val_dataset, self.train_dataloader, self.val_dataloader = loaders
        total = len(self.train_dataloader) * int(self.config.trainer.total_epochs)
        if self.config.trainer.get("total_training_steps") is not None:
            total = int(self.config.trainer.total_training_steps)
        self.total_training_steps = total
        logger.info("train steps: %d (%d batches per epoch)", total, len(self.train_dataloader))

    @property
    def actor_role(self) -> Role:
        return next(role for role in ACTOR_ROLES if role in self.role_worker_mapping)

    @property
    def actor_role_name(self) -> str:
        """Worker role string of the actor group; the reference rides along only in the colocated hybrid roles."""
        role = self.actor_role
        if role == Role.Actor:
            if self.ref_in_actor:
                raise ValueError("a reference policy is needed (actor.use_kl_loss or algorithm.use_kl_in_reward) but "
                                 "Role.Actor cannot host it: add Role.RefPolicy to role_worker_mapping")
            return "actor"
        return "actor_rollout_ref" if self.ref_in_actor else "actor_rollout"

    def init_workers(self) -> None:
        """Create resource pools, one colocated worker class per pool, then init the models in each role."""
        self.resource_pool_manager.create_resource_pool()
        self._init_trainer_workers()

    def _init_trainer_workers(self) -> None:
        """Spawn and init the trainer-side groups (actor, critic, ref, reward model) on their created pools."""
        pool_to_roles: dict[Any, dict[str, RayClassWithInitArgs]] = {}

        def add(role: Role, role_name: str) -> None:
            pool = self.resource_pool_manager.get_resource_pool(role)
            cls = RayClassWithInitArgs(
                self.role_worker_mapping[role], config=self.config, role=role_name
            )
            pool_to_roles.setdefault(pool, {})[role_name] = cls

        actor_role = self.actor_role
        actor_name = self.actor_role_name
        add(actor_role, actor_name)
        if self.use_critic:
            add(Role.Critic, "critic")
        if self.use_reference_policy and not self.ref_in_actor:
            add(Role.RefPolicy, "ref")
        if self.use_rm:
            add(Role.RewardModel, "rm")

        all_groups: dict[str, RayWorkerGroup] = {}
        # how long each group may take to start every process (verl's name for the wait on its rank 0)
        startup_timeout_s = float(self.config.trainer.get("ray_wait_register_center_timeout", 300))
        for pool, class_dict in pool_to_roles.items():
            colocated = create_colocated_worker_cls(class_dict)
            group = self.ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=colocated,
                                              startup_timeout_s=startup_timeout_s)
            all_groups.update(group.spawn(prefix_set=class_dict.keys()))

        if self.use_critic:
            self.critic_wg = all_groups["critic"]
            self.critic_wg.init_model()
        if self.use_reference_policy and not self.ref_in_actor:
            self.ref_policy_wg = all_groups["ref"]
            self.ref_policy_wg.init_model()
        if self.use_rm:
            self.rm_wg = all_groups["rm"]
            self.rm_wg.init_model()
        self.actor_rollout_wg = all_groups[actor_name]
        self.actor_rollout_wg.init_model()
        if self.use_reference_policy and self.ref_in_actor:
            self.ref_policy_wg = self.actor_rollout_wg

    # ------------------------------------------------------------------ stages of one step
    def _fit_get_batch(self, batch_dict: dict) -> tuple[DataProto, DataProto]:
        """Turn a dataloader batch into the full batch (with uids) and the prompts-only batch sent to rollout."""
        batch = DataProto.from_single_dict(batch_dict)
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        gen_keys = [k for k in ("input_ids", "attention_mask", "position_ids") if k in batch.batch.keys()]
        gen_non_tensor = [k for k in ("raw_prompt_ids", "raw_prompt", "tools_kwargs", "agent_name", "index")
                          if k in batch.non_tensor_batch]
        gen_batch = batch.select(batch_keys=gen_keys, non_tensor_batch_keys=gen_non_tensor + ["uid"])
        gen_batch.meta_info["global_steps"] = self.global_steps
        seed = generation_seed(self.config, self.global_steps)
        if seed is not None:
            gen_batch.meta_info["seed"] = seed
        return batch, gen_batch

    def _fit_generate(self, gen_batch: DataProto) -> DataProto:
        """Generate `rollout.n` responses per prompt (rows repeated, interleaved). Implemented by each trainer."""
        raise NotImplementedError(f"{type(self).__name__} must implement _fit_generate")

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        """Generate for validation (`gen_batch` is already repeated `val_kwargs.n` times and flagged `validate`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _generate_validation to validate")

    def _fit_assemble(self, batch: DataProto | None, gen_output: DataProto, metrics: dict) -> DataProto:
        """Join prompts and generations (`batch` None: the generation already carries every column)."""
        if batch is None:
            batch = gen_output
        else:
            batch = batch.repeat(repeat_times=int(self.config.rollout.n), interleave=True)
            for key in ("input_ids", "attention_mask", "position_ids"):
                batch.batch.pop(key, None)
            batch = batch.union(gen_output)
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = core_algos.compute_response_mask(batch)
        if self.config.trainer.get("balance_batch", True):
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        return batch

    def _balance_batch(self, batch: DataProto, metrics: dict, logging_prefix: str = "global_seqlen") -> None:
        """Reorder samples so every data-parallel rank receives about the same number of tokens."""
        world_size = self.actor_rollout_wg.world_size
        if world_size <= 1 or len(batch) % world_size != 0:
            return
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)
        order = torch.tensor([i for part in partitions for i in part])
        batch.reorder(order)
        metrics.update(log_seqlen_unbalance(seqlens, partitions, prefix=logging_prefix))

    def _fit_compute_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.use_rm:
            batch = batch.union(self.rm_wg.compute_rm_score(batch))
        if "rm_scores" in batch.batch.keys() and self.reward_fn is None:
            reward_tensor, extra = batch.batch["rm_scores"], {}
            reward_metrics = {}
        else:
            reward_tensor, extra, reward_metrics = compute_reward(batch, self.reward_fn, return_metrics=True)
        batch.batch["token_level_scores"] = reward_tensor
        for key, values in extra.items():
            batch.non_tensor_batch[key] = np.asarray(values, dtype=object)
        metrics.update(reward_metrics)
        return batch

    def _fit_dump_generations(self, batch: DataProto) -> None:
        """``trainer.rollout_data_dir``: this step's prompts, responses and scores as ``<dir>/<step>.jsonl``."""
        directory = self.config.trainer.get("rollout_data_dir")
        if directory:
            scores = batch.batch["token_level_scores"].sum(-1)
            dump_generations(directory, self.global_steps, self.tokenizer, batch, scores)

    def _fit_compute_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.bypass_mode:
            if "rollout_log_probs" not in batch.batch.keys():
                raise ValueError(
                    "algorithm.rollout_correction.bypass_mode=true needs rollout log-probs: "
                    "set rollout.calculate_log_probs=true"
                )
            batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
            return batch
        if self._update_supplies_old_log_probs(batch):
            if "rollout_log_probs" in batch.batch.keys():
                batch.meta_info[IN_UPDATE_KEY] = in_update_spec(self.config.algorithm.rollout_correction)
            return batch
        old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)
        entropys = old_log_prob.batch.pop("entropys", None) if old_log_prob.batch is not None else None
        if entropys is not None:
            metrics["actor/entropy"] = core_algos.agg_loss(
                entropys, batch.batch["response_mask"], self.config.actor.loss_agg_mode
            ).item()
        old_log_prob.meta_info.pop("metrics", None)
        return batch.union(old_log_prob)

    def _update_supplies_old_log_probs(self, batch: DataProto) -> bool:
        """True when the actor update is on-policy (one epoch over one mini-batch holding the whole batch) and
        nothing but the update reads ``old_log_probs``: the update then takes them from its own forward pass, where
        they equal a separate pass's values, and the pass is skipped (``actor.skip_on_policy_log_prob``). A rollout
        correction that weights tokens one by one (``rollout_is``) is then applied inside the update too; one that
        needs the whole batch first (rejection, the token veto, batch normalisation) keeps the pass."""
        actor = self.config.actor
        if not bool(actor.get("skip_on_policy_log_prob", True)) or int(actor.ppo_epochs) != 1:
            return False
        if int(actor.ppo_mini_batch_size) * int(self.config.rollout.n) < len(batch):
            return False
        if self.config.algorithm.get("use_kl_in_reward", False):
            return False
        correction = self.config.algorithm.rollout_correction
        if "rollout_log_probs" in batch.batch.keys() and in_update_spec(correction) is None:
            return False
        return self.global_steps > int(self.config.trainer.get("critic_warmup", 0))

    def _fit_compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        if not self.use_reference_policy:
            return batch
        return batch.union(self.ref_policy_wg.compute_ref_log_prob(batch))

    def _fit_compute_critic(self, batch: DataProto) -> DataProto:
        if not self.use_critic:
            return batch
        return batch.union(self.critic_wg.compute_values(batch))

    def _fit_compute_advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        algorithm = self.config.algorithm
        if algorithm.use_kl_in_reward:
            batch, kl_metrics = core_algos.apply_kl_penalty(
                batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algorithm.kl_penalty
            )
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        metrics.update(apply_rollout_correction(batch, algorithm.rollout_correction))
        return core_algos.compute_advantage(
            batch,
            adv_estimator=algorithm.adv_estimator,
            gamma=algorithm.gamma,
            lam=algorithm.lam,
            num_repeat=int(self.config.rollout.n),
            norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
            config=algorithm,
        )

    def _fit_update_critic(self, batch: DataProto, metrics: dict) -> None:
        if not self.use_critic:
            return
        critic_output = self.critic_wg.update_critic(batch)
        metrics.update(reduce_metrics(critic_output.meta_info["metrics"]))

    def _fit_update_actor(self, batch: DataProto, metrics: dict) -> bool:
        """Update the policy once the critic has warmed up; returns whether the weights changed."""
        if self.global_steps <= int(self.config.trainer.get("critic_warmup", 0)):
            return False
        batch.meta_info["multi_turn"] = bool(self.config.rollout.multi_turn.get("enable", False))
        actor_output = self.actor_rollout_wg.update_actor(batch)
        metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        return True

    def _fit_update_weights(self, metrics: dict) -> None:
        """Publish the actor's weights as the next version through the checkpoint engine (every replica must report
        the version and the trainer's checksum, or `WeightSyncError` names the culprit)."""
        if self.weight_sync is None:
            raise RuntimeError(f"{type(self).__name__}: no weight_sync (CheckpointEngineManager) was set up in "
                               "init_workers; the rollout would keep serving stale weights")
        self.weight_version += 1
        report = self.weight_sync.update_weights(self.weight_version)
        self.weight_checksums[self.weight_version] = str(report.get("checksum"))
        metrics.update(report.get("metrics", {}))
        metrics["rollout/weight_version"] = self.weight_version

    def _fit_validate(self, metrics: dict, is_last_step: bool) -> None:
        test_freq = int(self.config.trainer.get("test_freq", -1))
        if self.val_reward_fn is None or self.val_dataloader is None or test_freq <= 0:
            return
        if is_last_step or self.global_steps % test_freq == 0:
            metrics.update(self._validate())

    def _fit_save_checkpoint(self, is_last_step: bool) -> None:
        save_freq = int(self.config.trainer.get("save_freq", -1))
        if save_freq > 0 and (is_last_step or self.global_steps % save_freq == 0):
            self._save_checkpoint()

    # ------------------------------------------------------------------ one step and the loop
    def fit_step(self, batch_dict: dict) -> dict[str, float]:
        """One PPO step over one dataloader batch; returns the step's metrics."""
        metrics: dict[str, float] = {}
        timing_raw: dict[str, float] = {}
        is_last_step = self.global_steps >= self.total_training_steps
        with marked_timer("step", timing_raw):
            batch, gen_batch = self._fit_get_batch(batch_dict)
            with marked_timer("gen", timing_raw):
                gen_output = self._fit_generate(gen_batch)
            timing_raw.update(gen_output.meta_info.pop("timing", {}) or {})
            metrics.update(gen_output.meta_info.pop("metrics", {}) or {})  # agent_loop/* counters and times
            batch = self._fit_assemble(batch, gen_output, metrics)
            with marked_timer("reward", timing_raw):
                batch = self._fit_compute_reward(batch, metrics)
            self._fit_dump_generations(batch)
            with marked_timer("old_log_prob", timing_raw):
                batch = self._fit_compute_log_prob(batch, metrics)
            with marked_timer("ref", timing_raw):
                batch = self._fit_compute_ref_log_prob(batch)
            with marked_timer("values", timing_raw):
                batch = self._fit_compute_critic(batch)
            with marked_timer("adv", timing_raw):
                batch = self._fit_compute_advantage(batch, metrics)
            with marked_timer("update_critic", timing_raw):
                self._fit_update_critic(batch, metrics)
            with marked_timer("update_actor", timing_raw):
                updated = self._fit_update_actor(batch, metrics)
            if updated:
                with marked_timer("update_weights", timing_raw):
                    self._fit_update_weights(metrics)
            with marked_timer("testing", timing_raw):
                self._fit_validate(metrics, is_last_step)
            with marked_timer("save_checkpoint", timing_raw):
                self._fit_save_checkpoint(is_last_step)
        metrics["training/global_step"] = self.global_steps
        metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch, timing_raw))
        metrics.update(compute_throughout_metrics(batch, timing_raw, n_gpus=self.resource_pool_manager.get_n_gpus()))
        return metrics

    def fit(self) -> None:
        """Train until `total_training_steps`, validating and saving as configured; resumes when asked."""
        trainer_cfg = self.config.trainer
        tracker = self._create_tracker()
        self._load_checkpoint()
        if self.global_steps == 0 and self.val_reward_fn is not None and trainer_cfg.get("val_before_train", True):
            val_metrics = self._validate()
            if val_metrics:
                tracker.log(val_metrics, step=0)
            self._log_val_generations(tracker, step=0)
            if trainer_cfg.get("val_only", False):
                tracker.finish()
                return
        progress = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.global_steps += 1
        error: BaseException | None = None
        try:
            self._fit_start()
            for batch_dict in self._iter_batch_dicts():
                try:
                    metrics = self.fit_step(batch_dict)
                except StopTraining as stop:
                    logger.info("training stopped at step %d: %s", self.global_steps, stop)
                    return
                tracker.log(metrics, step=self.global_steps)
                self._log_val_generations(tracker, step=self.global_steps)
                progress.update(1)
                if self.global_steps >= self.total_training_steps:
                    return
                self.global_steps += 1
        except BaseException as exc:
            error = exc
            raise
        finally:
            progress.close()
            try:
                if error is None:
                    self._finish_checkpoint()
            finally:
                self._fit_finish(error)
                tracker.finish()

    def _iter_batch_dicts(self):
        """Dataloader batches, epoch after epoch (the async recipes feed steps from elsewhere)."""
        for _epoch in range(int(self.config.trainer.total_epochs) + 1):
            yield from self.train_dataloader

    def _fit_start(self) -> None:
        """Hook before the first step (async recipes start their rollout here)."""

    def _fit_finish(self, error: BaseException | None) -> None:
        """Hook after the last step or a failure (async recipes stop their rollout here)."""

    def _create_tracker(self) -> Tracking:
        trainer_cfg = self.config.trainer
        return Tracking(
            project_name=trainer_cfg.project_name,
            experiment_name=trainer_cfg.experiment_name,
            default_backend=list(trainer_cfg.logger),
            config=OmegaConf.to_container(self.config, resolve=True),
            local_dir=trainer_cfg.default_local_dir,
        )

    # ------------------------------------------------------------------ validation
    def _log_val_generations(self, tracker: Tracking, step: int) -> None:
        """``trainer.log_val_generations``: the samples the last validation picked, to every logger backend."""
        samples, self._val_generations = self._val_generations, None
        if samples:
            tracker.log_generations(samples, step)

    def _validate(self) -> dict[str, float]:
        """Generate on the validation set with `rollout.val_kwargs` and report mean@n / best@n / pass@n."""
        val_kwargs = self.config.rollout.val_kwargs
        n = int(val_kwargs.get("n", 1))
        sources, uids, scores = [], [], []
        dump_dir = self.config.trainer.get("validation_data_dir")
        log_count = int(self.config.trainer.get("log_val_generations", 0) or 0)
        scored: list[DataProto] = []
        for batch_dict in self.val_dataloader:
            batch, gen_batch = self._fit_get_batch(batch_dict)
            gen_batch.meta_info.update(
                {
                    "do_sample": bool(val_kwargs.do_sample),
                    "temperature": float(val_kwargs.temperature),
                    "top_p": float(val_kwargs.top_p),
                    "top_k": int(val_kwargs.top_k),
                    "validate": True,
                }
            )
            gen_batch = gen_batch.repeat(repeat_times=n, interleave=True)
            output = self._generate_validation(gen_batch)
            batch = batch.repeat(repeat_times=n, interleave=True)
            for key in ("input_ids", "attention_mask", "position_ids"):
                batch.batch.pop(key, None)
            batch = batch.union(output)
            reward_tensor, _ = compute_reward(batch, self.val_reward_fn)
            scores.extend(reward_tensor.sum(-1).tolist())
            if dump_dir or log_count > 0:
                scored.append(batch)
            uids.extend(batch.non_tensor_batch["uid"].tolist())
            key = self.config.data.get("reward_fn_key", "data_source")
            sources.extend(batch.non_tensor_batch.get(key, np.array(["unknown"] * len(batch), dtype=object)).tolist())
        if scored:
            everything = DataProto.concat(scored)
            if dump_dir:
                dump_generations(dump_dir, self.global_steps, self.tokenizer, everything, scores)
            if log_count > 0:
                inputs, outputs = decode_samples(self.tokenizer, everything)
                self._val_generations = pick_samples(inputs, outputs, scores, log_count)
        return process_validation_metrics(sources, uids, scores)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self) -> None:
        """Save every worker group and the trainer state of this step. ``trainer_state.pt`` and the tracker file
        are written once the workers' files are complete: at once, or with ``checkpoint.async_save`` when the
        shards written in the background are done (before the next save and when training ends)."""
        self._finish_checkpoint()
        step_dir = self.checkpointer.step_dir(self.global_steps)
        # Old checkpoints are pruned as whole global_step_* folders by the checkpointer, not per worker.
        self.actor_rollout_wg.save_checkpoint(local_path=str(step_dir / "actor"), global_step=self.global_steps)
        if self.use_critic:
            self.critic_wg.save_checkpoint(local_path=str(step_dir / "critic"), global_step=self.global_steps)
        state = self._checkpoint_state()
        if self._async_checkpoint():
            self._unfinished_checkpoint = (self.global_steps, state)
        else:
            self.checkpointer.save_trainer_state(self.global_steps, state)

    def _async_checkpoint(self) -> bool:
        roles = [self.config.actor] + ([self.config.critic] if self.use_critic else [])
        return any(bool(OmegaConf.select(role, "checkpoint.async_save", default=False)) for role in roles)

    def _finish_checkpoint(self) -> None:
        """Wait for the shards of an asynchronous save, then write its trainer state and point the tracker at it."""
        unfinished, self._unfinished_checkpoint = self._unfinished_checkpoint, None
        if unfinished is None:
            return
        step, state = unfinished
        self.actor_rollout_wg.wait_for_checkpoint()
        if self.use_critic:
            self.critic_wg.wait_for_checkpoint()
        self.checkpointer.save_trainer_state(step, state)

    def _checkpoint_state(self) -> dict[str, Any]:
        """What ``trainer_state.pt`` holds besides the global step; recipes add their own keys."""
        return {
            "dataloader": self.train_dataloader.state_dict(),
            "weight_version": self.weight_version,
            "kl_ctrl": None if self.kl_ctrl_in_reward is None else self.kl_ctrl_in_reward.value,
        }

    def _load_checkpoint(self) -> None:
        step_dir = self.checkpointer.find_resume_dir()
        if step_dir is None:
            return
        self._restore_checkpoint(Path(step_dir), self.checkpointer.load_trainer_state(step_dir))
        logger.info("resumed from %s at step %d", step_dir, self.global_steps)
        if self.checkpointer.del_after_load:
            self.checkpointer.delete_loaded(step_dir)
            logger.info("deleted %s after loading it (trainer.del_local_ckpt_after_load)", step_dir)

    def _restore_checkpoint(self, step_dir: Path, state: dict[str, Any]) -> None:
        """Restore workers, data position and counters from a checkpoint, then give the rollout the restored
        actor's weights (recipes extend it with their own state)."""
        self.global_steps = int(state["global_step"])
        check_loader_state(self.train_dataloader, state.get("dataloader"), str(step_dir / STATE_FILE))
        # trainer.del_local_ckpt_after_load deletes the whole folder in _load_checkpoint, once every part (and a
        # recipe's own state) has loaded: a worker deleting its shards first would leave half a checkpoint behind
        # when a later part fails to load
        self.actor_rollout_wg.load_checkpoint(str(step_dir / "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(str(step_dir / "critic"))
        self.train_dataloader.load_state_dict(state["dataloader"])
        if self.kl_ctrl_in_reward is not None and state.get("kl_ctrl") is not None:
            self.kl_ctrl_in_reward.value = state["kl_ctrl"]
        self._resume_rollout_weights(int(state.get("weight_version", 0)))

    def _resume_rollout_weights(self, version: int) -> None:
        """The rollout starts from the base weights: push the restored actor to it as ``version``."""
        self.weight_version = version - 1
        self._fit_update_weights({})
