"""RayPPOTrainer: the PPO/GRPO loop driven from the single controller, as a template of named stages.

One training step is a fixed sequence of stages (``fit_step``), each a method a recipe can override:

    _fit_get_batch -> _fit_generate -> _fit_compute_reward -> _fit_compute_log_prob -> _fit_compute_ref_log_prob
    -> _fit_compute_critic -> _fit_compute_advantage -> _fit_update_critic -> _fit_update_actor
    -> _fit_update_weights -> _fit_validate -> _fit_save_checkpoint -> _fit_collect_metrics

The stages share the step's ``self.metrics`` and ``self.timing_raw``. The worker calls behind them are methods of
their own, with verl's names and signatures (``_compute_old_log_prob``, ``_compute_ref_log_prob``,
``_compute_values``, ``_update_actor``, ``_update_critic``, ``_balance_batch``, ``_validate``), so a recipe that
overrides one of those keeps working.

This class runs the colocated "hybrid engine": actor, rollout and reference share processes and take turns, and
new weights reach the engines inside the actor workers. :class:`verl.experimental.separation.ray_trainer.
SeparateRayPPOTrainer` gives the rollout a pool of its own; the one-step-off and fully-async trainers build on it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, open_dict
from torch.utils.data import Dataset, Sampler
from tqdm import tqdm

from verl.experimental.agent_loop.concurrency import MAX_IN_FLIGHT_KEY, validation_max_in_flight
from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    create_colocated_worker_cls,
)
from verl.single_controller.ray.errors import WorkerDiedError, is_actor_death
from verl.trainer.config.legacy_view import add_legacy_view, without_legacy_view
from verl.trainer.config.ppo_config import PPOConfig, with_total_training_steps
from verl.trainer.config.resolve import to_ppo_config
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.checkpointing import STATE_FILE, TrainerCheckpointer
from verl.trainer.ppo.colocated_sync import ColocatedCheckpointManager
from verl.trainer.ppo.core_algos import (
    AdvantageEstimator,
    agg_loss,
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
)
from verl.trainer.ppo.dataloaders import build_dataloaders
from verl.trainer.ppo.dynamic_sampling import GroupFilter
from verl.trainer.ppo.generation_dump import decode_samples, dump_generations, pick_samples
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_spec_decode_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
    process_validation_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.recipe_hooks import RecipeHooks
from verl.trainer.ppo.reward import compute_reward, extract_reward
from verl.trainer.ppo.rollout_corr import IN_UPDATE_KEY, apply_rollout_correction, in_update_spec
from verl.trainer.ppo.scored_generation import DriverRewardLoop, ScoredRolloutManager
from verl.trainer.ppo.utils import Role, WorkerType, need_critic, need_reference_policy, need_teacher_policy
from verl.utils.dataset.dataloader import check_loader_state
from verl.utils.profiler.performance import marked_timer
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance
from verl.utils.tracking import Tracking, ValidationGenerationsLogger

__all__ = [
    "AdvantageEstimator",
    "DataProto",
    "Dataset",
    "RayPPOTrainer",
    "ResourcePoolManager",
    "Role",
    "Sampler",
    "StopTraining",
    "WorkerType",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_data_metrics",
    "compute_response_mask",
    "compute_spec_decode_metrics",
    "compute_throughout_metrics",
    "compute_timing_metrics",
    "compute_variance_proxy_metrics",
    "extract_reward",
    "generation_seed",
    "marked_timer",
    "need_critic",
    "need_reference_policy",
    "pad_dataproto_to_divisor",
    "reduce_metrics",
    "unpad_dataproto",
]

logger = logging.getLogger(__name__)

ACTOR_ROLES = (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor)
PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")
# the columns the reward needs stay in the step's batch and also travel with the prompts (verl scores in the loop)
REWARD_KEYS = ("data_source", "reward_model", "extra_info", "uid")


_timer = marked_timer  # the name verl releases before 0.5 used


class StopTraining(Exception):
    """Raised by a stage when the run has no more data (e.g. the rollouter's stream ended): ``fit`` ends cleanly."""


def generation_seed(config: PPOConfig | DictConfig, step: int) -> int | None:
    """Base sampling seed of step ``step`` from ``rollout.seed`` (default ``trainer.seed``): row ``i`` of the
    step's repeated batch samples with ``generation_seed + i``, whichever process generates it, so runs that see
    the same prompts in the same order draw the same responses (the async-vs-sync equivalence and exact resume
    rely on it). None: unseeded sampling."""
    # Falls back to the run's seed: per-row seeds make sampling independent of how requests share a batch, which
    # is what lets a killed and resumed run draw exactly the responses of an uninterrupted one.
    seed = config.rollout.seed if config.rollout.seed is not None else config.trainer.seed
    if seed is None:
        return None
    return int(seed) * 1_000_003 + int(step) * 100_003


class RayPPOTrainer(RecipeHooks):
    """PPO trainer on the single controller; actor, rollout and reference share processes, critic optional.

    ``reward_fn`` / ``val_reward_fn`` are the reward managers that score training and validation samples; when
    not given they are built from the config (``reward.*``), as verl 0.9 builds them inside the trainer.

    A subclass that writes its own ``fit()`` finds verl's attributes: ``async_rollout_manager`` (generation outputs
    arrive scored, with ``meta_info["timing"]``), ``checkpoint_manager`` (``update_weights`` / ``sleep_replicas``),
    ``reward_loop_manager``, the worker groups, ``_get_gen_batch`` (pops the prompt columns) and the helpers of
    :class:`~verl.trainer.ppo.recipe_hooks.RecipeHooks`.
    """

    # The run state _init_run_state derives from the config (verl's names where verl has them).
    use_critic: bool
    use_reference_policy: bool
    ref_in_actor: bool
    use_rm: bool
    use_teacher_policy: bool
    hybrid_engine: bool
    use_prefix_grouper: bool
    checkpoint_manager: Any
    async_rollout_manager: Any
    async_rollout_mode: bool
    llm_server_manager: Any
    teacher_model_manager: Any
    distillation_config: Any
    resource_pool_to_cls: dict[Any, dict[str, RayClassWithInitArgs]]
    reward_loop_manager: Any
    max_steps_duration: float
    gen_steps: int
    global_steps: int
    weight_version: int
    restarts: int
    weight_checksums: dict[int, str]
    metrics: dict[str, Any]
    timing_raw: dict[str, float]
    is_last_step: bool
    epoch: int
    logger: Tracking | None
    progress_bar: tqdm | None
    last_val_metrics: dict[str, float] | None
    reward_tensor: torch.Tensor | None
    reward_extra_infos_dict: dict[str, Any]
    checkpointer: TrainerCheckpointer
    _unfinished_checkpoint: tuple[int, dict[str, Any]] | None
    _val_generations: list[dict[str, Any]] | None

    def __init__(
        self,
        config: DictConfig,
        tokenizer: Any,
        role_worker_mapping: dict[Role, WorkerType],
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls: type[RayWorkerGroup] = RayWorkerGroup,
        processor: Any = None,
        train_dataset: Dataset | None = None,
        val_dataset: Dataset | None = None,
        collate_fn: Callable | None = None,
        train_sampler: Sampler | None = None,
        device_name: str | None = None,
        reward_fn: Callable | None = None,
        val_reward_fn: Callable | None = None,
    ):
        # What the trainer reads its own settings from, and (with the sizes the trainer derives) what every worker
        # receives: the object main_ppo built when ``config`` carries it, else built and validated here.
        self.ppo_config: PPOConfig = to_ppo_config(config)
        self.config = config = add_legacy_view(config)  # recipe code may read config.actor_rollout_ref.*
        self.tokenizer = tokenizer
        self.processor = processor
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.device_name = device_name or self.ppo_config.trainer.device
        if not any(role in role_worker_mapping for role in ACTOR_ROLES):
            raise ValueError(
                "role_worker_mapping needs an actor role: Role.ActorRollout, Role.ActorRolloutRef or Role.Actor"
            )
        if need_teacher_policy(config):
            raise ValueError("distillation.enabled=true: this build has no distillation trainer (teacher policy)")
        self.reward_fn, self.val_reward_fn = self._reward_functions(reward_fn, val_reward_fn)
        self._init_run_state()
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)

    def _init_run_state(self) -> None:
        """The trainer's state besides what its arguments set, each attribute only where it is missing.

        ``__init__`` calls it; so does the first read of one of these attributes on a trainer whose recipe subclass
        wrote its own ``__init__`` without calling ours (setting ``config``, ``tokenizer``, the workers' mapping and
        whatever else verl's ``__init__`` sets): what the recipe set is kept, the rest is derived from ``config``."""
        self.__dict__["_run_state_ready"] = True
        state = self.__dict__
        typed = self.ppo_config
        mapping = state.get("role_worker_mapping") or {}
        state.setdefault("processor", None)
        state.setdefault("device_name", typed.trainer.device)
        state.setdefault("ray_worker_group_cls", RayWorkerGroup)
        state.setdefault("reward_fn", None)
        state.setdefault("val_reward_fn", None)
        state.setdefault("use_critic", typed.use_critic)
        state.setdefault("use_reference_policy", typed.use_reference_policy)
        state.setdefault("ref_in_actor", self.use_reference_policy and Role.RefPolicy not in mapping)
        state.setdefault("use_rm", Role.RewardModel in mapping)
        state.setdefault("use_teacher_policy", False)  # no distillation trainer here (refused in __init__)
        state.setdefault("hybrid_engine", not self._standalone_rollout())
        state.setdefault("use_prefix_grouper", bool(typed.actor.use_prefix_grouper))
        if "validation_generations_logger" not in state:
            self.validation_generations_logger = ValidationGenerationsLogger(
                project_name=typed.trainer.project_name, experiment_name=typed.trainer.experiment_name
            )
        # set by init_workers, as in verl
        for name in (
            "checkpoint_manager",
            "async_rollout_manager",
            "llm_server_manager",
            "teacher_model_manager",
            "distillation_config",
        ):
            state.setdefault(name, None)
        state.setdefault("async_rollout_mode", False)
        state.setdefault("resource_pool_to_cls", {})
        state.setdefault("reward_loop_manager", None if self.reward_fn is None else DriverRewardLoop(self.reward_fn))
        state.setdefault("max_steps_duration", 0.0)  # the longest step so far (seconds), as verl keeps it
        state.setdefault("gen_steps", 0)  # generation batches drawn (more than global_steps under dynamic sampling)
        if "group_filter" not in state:
            self.group_filter = GroupFilter.from_config(typed) if self._dynamic_sampling() else None
        algorithm = typed.algorithm
        if "kl_ctrl_in_reward" not in state:
            use_kl = algorithm.use_kl_in_reward
            self.kl_ctrl_in_reward = core_algos.get_kl_controller(algorithm.kl_ctrl) if use_kl else None
        if "bypass_mode" not in state:
            self.bypass_mode = algorithm.rollout_correction.bypass_mode
            if self.bypass_mode:
                self._route_bypass_loss()
        state.setdefault("global_steps", 0)
        state.setdefault("weight_version", 0)
        state.setdefault("restarts", 0)  # how often the task runner rebuilt this run's workers (trainer.max_restarts)
        state.setdefault("weight_checksums", {})  # version -> checksum every replica reported for it
        state.setdefault("metrics", {})  # the current step's metrics, filled by the stages
        state.setdefault("timing_raw", {})  # the current step's stage times (seconds)
        state.setdefault("is_last_step", False)
        state.setdefault("epoch", 0)
        state.setdefault("logger", None)  # the running fit()'s tracker
        state.setdefault("progress_bar", None)
        state.setdefault("last_val_metrics", None)  # the final step's validation
        state.setdefault("reward_tensor", None)  # the last scored batch's token-level scores
        state.setdefault("reward_extra_infos_dict", {})
        state.setdefault("checkpointer", TrainerCheckpointer(typed.trainer))
        state.setdefault("_unfinished_checkpoint", None)  # async save in flight
        state.setdefault("_val_generations", None)  # picked by the last validation
        state.setdefault("_batch_dicts", None)  # the running fit()'s dataloader batches (dynamic sampling draws more)
        if "_dump_executor" not in state:
            self._init_dump_executor()

    def __getattr__(self, name: str) -> Any:
        # Reached only for a missing attribute: a recipe's own __init__ skipped ours, so derive the state once.
        if not name.startswith("__") and not self.__dict__.get("_run_state_ready") and "config" in self.__dict__:
            self._init_run_state()
            if name in self.__dict__:
                return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _standalone_rollout(self) -> bool:
        """Whether the rollout replicas live outside the actor workers (the separated trainers)."""
        return False

    def _dynamic_sampling(self) -> bool:
        """``algorithm.filter_groups.enable``: steps fill their batch with groups that carry signal (DAPO)."""
        return bool(self.ppo_config.algorithm.filter_groups.enable)

    # ------------------------------------------------------------------ setup
    def _reward_functions(self, reward_fn: Callable | None, val_reward_fn: Callable | None) -> tuple[Any, Any]:
        """The given reward managers, else the configured ones (a recipe written for verl 0.9 passes none)."""
        if reward_fn is not None and val_reward_fn is not None:
            return reward_fn, val_reward_fn
        from verl.trainer.ppo.reward import load_reward_manager

        if reward_fn is None:
            reward_fn = load_reward_manager(self.config, self.tokenizer, num_examine=0)
        if val_reward_fn is None:
            val_reward_fn = load_reward_manager(self.config, self.tokenizer, num_examine=1)
        return reward_fn, val_reward_fn

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        loaders = build_dataloaders(
            self.config,
            self.tokenizer,
            self.processor,
            train_dataset,
            val_dataset,
            collate_fn,
            train_sampler,
            ppo_config=self.ppo_config,
        )
        self.train_dataset, self.val_dataset, self.train_dataloader, self.val_dataloader = loaders
        trainer = self.ppo_config.trainer
        total = len(self.train_dataloader) * trainer.total_epochs
        if trainer.total_training_steps is not None:
            total = trainer.total_training_steps
        self.total_training_steps = total
        logger.info("train steps: %d (%d batches per epoch)", total, len(self.train_dataloader))

    @property
    def ppo_config(self) -> PPOConfig:
        """The typed twin of ``self.config``: built in ``__init__``, or here on first use when a recipe's own
        ``__init__`` set ``self.config`` without calling ours."""
        typed = self.__dict__.get("_ppo_config")
        if typed is None:
            config = self.__dict__.get("config")
            if config is None:
                raise AttributeError(
                    f"{type(self).__name__}.ppo_config: the trainer has no config; a subclass __init__ that does not "
                    "call RayPPOTrainer.__init__ must set self.config first"
                )
            typed = self.__dict__["_ppo_config"] = to_ppo_config(config)
        return typed

    @ppo_config.setter
    def ppo_config(self, value: PPOConfig) -> None:
        self.__dict__["_ppo_config"] = value

    @property
    def worker_config(self) -> PPOConfig:
        """The typed config every worker group is built with: ``self.ppo_config`` with the optimizers'
        ``total_training_steps`` filled in from this run's step count where the user left it unset."""
        return with_total_training_steps(self.ppo_config, self.total_training_steps)

    @property
    def actor_role(self) -> Role:
        return next(role for role in ACTOR_ROLES if role in self.role_worker_mapping)

    @property
    def actor_role_name(self) -> str:
        """Worker role string of the actor group; the reference rides along only in the colocated hybrid roles."""
        role = self.actor_role
        if role == Role.Actor:
            if self.ref_in_actor:
                raise ValueError(
                    "a reference policy is needed (actor.use_kl_loss or algorithm.use_kl_in_reward) but "
                    "Role.Actor cannot host it: add Role.RefPolicy to role_worker_mapping"
                )
            return "actor"
        return "actor_rollout_ref" if self.ref_in_actor else "actor_rollout"

    def init_workers(self) -> None:
        """Create the resource pools and the worker groups, then the agent-loop manager over the rollout engines
        that live in the actor workers."""
        from verl.experimental.agent_loop import AgentLoopManager

        self.resource_pool_manager.create_resource_pool()
        self._init_trainer_workers()
        self.agent_loop_manager = AgentLoopManager.create_blocking(self.config, worker_group=self.actor_rollout_wg)
        self.checkpoint_manager = ColocatedCheckpointManager(self)
        self._init_recipe_managers()

    def _init_recipe_managers(self) -> None:
        """verl's names over the agent-loop manager: ``async_rollout_manager`` returns scored batches (a reward
        model scores later, in ``_compute_reward_colocate``) and wakes engines a recipe put to sleep."""
        reward_loop = None if self.use_rm else self.reward_loop_manager
        wake = getattr(self.checkpoint_manager, "ensure_awake", None)
        self.async_rollout_manager = ScoredRolloutManager(self.agent_loop_manager, reward_loop, before_generate=wake)
        self.llm_server_manager = self.agent_loop_manager
        self.async_rollout_mode = True

    def _init_trainer_workers(self) -> None:
        """Spawn and init the trainer-side groups (actor, critic, ref, reward model) on their created pools."""
        pool_to_roles = self.resource_pool_to_cls = {}

        def add(role: Role, role_name: str) -> None:
            pool = self.resource_pool_manager.get_resource_pool(role)
            cls = RayClassWithInitArgs(self.role_worker_mapping[role], config=self.worker_config, role=role_name)
            pool_to_roles.setdefault(pool, {})[role_name] = cls

        actor_name = self.actor_role_name
        add(self.actor_role, actor_name)
        if self.use_critic:
            add(Role.Critic, "critic")
        if self.use_reference_policy and not self.ref_in_actor:
            add(Role.RefPolicy, "ref")
        if self.use_rm:
            add(Role.RewardModel, "rm")

        all_groups: dict[str, RayWorkerGroup] = {}
        # how long each group may take to start every process (verl's name for the wait on its rank 0)
        startup_timeout_s = float(self.ppo_config.trainer.ray_wait_register_center_timeout)
        for pool, class_dict in pool_to_roles.items():
            colocated = create_colocated_worker_cls(class_dict)
            group = self.ray_worker_group_cls(
                resource_pool=pool, ray_cls_with_init=colocated, startup_timeout_s=startup_timeout_s
            )
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

    # ------------------------------------------------------------------ worker calls (verl's stage methods)
    def _get_gen_batch(self, batch: DataProto) -> DataProto:
        """What the rollout needs, taken out of ``batch`` as verl does: the prompt tensors and the columns that
        only generation reads are popped; the reward columns (``data_source``, ``reward_model``, ``extra_info``,
        ``uid`` when already assigned) stay in ``batch`` and are copied along, so scores can be computed from the
        generation output and ``batch.repeat(n).union(output)`` joins without conflicts."""
        prompt_keys = [k for k in PROMPT_KEYS if batch.batch is not None and k in batch.batch.keys()]
        reward_keys = [k for k in REWARD_KEYS if k in batch.non_tensor_batch]
        generation_only = [k for k in batch.non_tensor_batch if k not in reward_keys]
        gen_batch = batch.pop(batch_keys=prompt_keys, non_tensor_batch_keys=generation_only)
        gen_batch.non_tensor_batch.update({k: batch.non_tensor_batch[k] for k in reward_keys})
        gen_batch.meta_info = dict(batch.meta_info)
        return gen_batch

    def _generate_sequences(self, gen_batch: DataProto) -> DataProto:
        """Generate ``rollout.n`` responses per prompt (rows repeated, interleaved): the one place the trainer
        talks to the rollout."""
        gen_batch = gen_batch.repeat(repeat_times=self.ppo_config.rollout.n, interleave=True)
        return self.agent_loop_manager.generate_sequences(gen_batch)

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        """Generate for validation (``gen_batch`` is already repeated ``val_kwargs.n`` times, flagged ``validate``)."""
        return self.agent_loop_manager.generate_sequences(gen_batch)

    def _compute_old_log_prob(self, batch: DataProto) -> tuple[DataProto, float | None]:
        """``old_log_probs`` and ``entropys`` of the batch under the current actor, and the pass's MFU if known."""
        output = self.actor_rollout_wg.compute_log_prob(batch)
        mfu = (output.meta_info.pop("metrics", None) or {}).get("mfu")
        return output, mfu

    def _compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        """``ref_log_prob`` of the batch under the reference policy."""
        return self.ref_policy_wg.compute_ref_log_prob(batch)

    def _compute_values(self, batch: DataProto) -> DataProto:
        """The critic's ``values`` of the batch."""
        return self.critic_wg.compute_values(batch)

    def _update_actor(self, batch: DataProto) -> DataProto:
        """One actor update over the batch; the output's ``meta_info["metrics"]`` holds its metrics."""
        batch.meta_info["multi_turn"] = bool(self.ppo_config.rollout.multi_turn.enable)
        return self.actor_rollout_wg.update_actor(batch)

    def _update_critic(self, batch: DataProto) -> DataProto:
        """One critic update over the batch; the output's ``meta_info["metrics"]`` holds its metrics."""
        return self.critic_wg.update_critic(batch)

    def _balance_batch(
        self, batch: DataProto, metrics: dict, logging_prefix: str = "global_seqlen", keep_minibatch: bool = False
    ) -> None:
        """Reorder samples so every data-parallel rank receives about the same number of tokens; with
        ``keep_minibatch`` each mini-batch is balanced on its own (samples never change mini-batch)."""
        world_size = self.actor_rollout_wg.world_size
        if world_size <= 1 or len(batch) % world_size != 0:
            return
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        blocks = [range(len(seqlens))]
        if keep_minibatch:
            size = self.ppo_config.actor.ppo_mini_batch_size * self.ppo_config.rollout.n
            if size % world_size == 0 and len(seqlens) % size == 0:
                blocks = [range(start, start + size) for start in range(0, len(seqlens), size)]
        partitions: list[list[int]] = [[] for _ in range(world_size)]
        for block in blocks:
            local = get_seqlen_balanced_partitions(
                [seqlens[i] for i in block], k_partitions=world_size, equal_size=True
            )
            for rank, part in enumerate(local):
                partitions[rank].extend(block[i] for i in part)
        batch.reorder(torch.tensor([i for part in partitions for i in part]))
        metrics.update(log_seqlen_unbalance(seqlens, partitions, prefix=logging_prefix))

    # ------------------------------------------------------------------ stages of one step
    def _fit_get_batch(self, batch_dict: dict | None) -> DataProto | None:
        """This step's prompts (a recipe whose prompts come from elsewhere overrides it)."""
        assert batch_dict is not None  # fit() passes each dataloader batch; only such recipes call fit_step(None)
        return self._batch_from_dict(batch_dict)

    def _batch_from_dict(self, batch_dict: dict) -> DataProto:
        """Turn a dataloader batch into a DataProto with one ``uid`` per prompt."""
        batch = DataProto.from_single_dict(batch_dict)
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        return batch

    def _step_gen_batch(self, batch: DataProto, step: int) -> DataProto:
        """The prompts of ``batch`` as step ``step`` sends them to the rollout (step number and sampling seed)."""
        gen_batch = self._get_gen_batch(batch)
        gen_batch.meta_info["global_steps"] = step
        seed = generation_seed(self.ppo_config, step)
        if seed is not None:
            gen_batch.meta_info["seed"] = seed
        return gen_batch

    def _fit_generate(self, batch: DataProto | None = None) -> DataProto:
        """Generate ``rollout.n`` responses per prompt and join them to the prompts' columns."""
        assert batch is not None  # the base _fit_get_batch always returns the step's prompts
        with marked_timer("gen", self.timing_raw):
            gen_output = self._generate_sequences(self._step_gen_batch(batch, self.global_steps))
        return self._fit_assemble(batch, gen_output)

    def _fit_assemble(self, batch: DataProto | None, gen_output: DataProto) -> DataProto:
        """Join prompts and generations into the step's batch (its metrics and stage times into the step's)."""
        return self._join_generation(batch, gen_output, self.metrics, self.timing_raw)

    def _join_generation(
        self, batch: DataProto | None, gen_output: DataProto, metrics: dict, timing_raw: dict
    ) -> DataProto:
        """Prompts repeated ``rollout.n`` times joined to their generations (``batch`` None: the generation already
        carries every column), balanced over the ranks; the generation's ``metrics`` and ``timing`` go to the
        given dicts."""
        timing_raw.update(gen_output.meta_info.pop("timing", {}) or {})
        metrics.update(gen_output.meta_info.pop("metrics", {}) or {})  # agent_loop/* counters and times
        if batch is None:
            batch = gen_output
        else:
            batch = batch.repeat(repeat_times=self.ppo_config.rollout.n, interleave=True)
            for key in PROMPT_KEYS:
                batch.batch.pop(key, None)
            batch = batch.union(gen_output)
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = compute_response_mask(batch)
        if self.ppo_config.trainer.balance_batch:
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        return batch

    def _fit_compute_reward(self, batch: DataProto) -> DataProto:
        """``token_level_scores`` from the reward model and/or the reward manager."""
        if self.use_rm:
            batch = batch.union(self.rm_wg.compute_rm_score(batch))
        extra: dict[str, list]
        reward_metrics: dict[str, float]
        if "rm_scores" in batch.batch.keys() and self.reward_fn is None:
            reward_tensor, extra, reward_metrics = batch.batch["rm_scores"], {}, {}
        else:
            reward_tensor, extra, reward_metrics = compute_reward(batch, self.reward_fn, return_metrics=True)
        batch.batch["token_level_scores"] = reward_tensor
        for key, values in extra.items():
            batch.non_tensor_batch[key] = np.asarray(values, dtype=object)
        self.reward_tensor, self.reward_extra_infos_dict = reward_tensor, extra  # the step's, as verl keeps them
        self.metrics.update(reward_metrics)
        return batch

    def _fit_dump_data(self, batch: DataProto) -> None:
        """``trainer.rollout_data_dir``: this step's prompts, responses and scores as ``<dir>/<step>.jsonl``."""
        directory = self.ppo_config.trainer.rollout_data_dir
        if directory:
            scores = batch.batch["token_level_scores"].sum(-1)
            dump_generations(directory, self.global_steps, self.tokenizer, batch, scores)

    def _route_bypass_loss(self) -> None:
        """Bypass mode trains on the rollout's log-probs, so the actor's loss becomes ``bypass_mode`` and applies
        ``algorithm.rollout_correction`` itself (importance weights, rejection, their metrics), as in verl."""
        typed = self.ppo_config
        if typed.actor.policy_loss.loss_mode not in ("vanilla", "bypass_mode"):
            logger.warning(
                "algorithm.rollout_correction.bypass_mode=true replaces actor.policy_loss.loss_mode=%s "
                "with bypass_mode",
                typed.actor.policy_loss.loss_mode,
            )
        correction = typed.algorithm.rollout_correction.to_dict()
        policy_loss = replace(typed.actor.policy_loss, loss_mode="bypass_mode", rollout_correction=correction)
        self.ppo_config = replace(typed, actor=replace(typed.actor, policy_loss=policy_loss))
        with open_dict(self.config):  # recipes reading self.config see the loss the workers run
            self.config.actor.policy_loss.loss_mode = "bypass_mode"
            self.config.actor.policy_loss.rollout_correction = correction

    def _fit_compute_log_prob(self, batch: DataProto) -> DataProto:
        """``old_log_probs``: the rollout's own (bypass mode), left to the on-policy update, or a separate pass
        (``training/old_log_prob_pass`` says whether one ran)."""
        self.metrics["training/old_log_prob_pass"] = 0.0
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
                batch.meta_info[IN_UPDATE_KEY] = in_update_spec(self.ppo_config.algorithm.rollout_correction)
            return batch
        old_log_prob, mfu = self._compute_old_log_prob(batch)
        self.metrics["training/old_log_prob_pass"] = 1.0
        entropys = old_log_prob.batch.pop("entropys", None) if old_log_prob.batch is not None else None
        if entropys is not None:
            self.metrics["actor/entropy"] = core_algos.agg_loss(
                entropys, batch.batch["response_mask"], self.ppo_config.actor.loss_agg_mode
            ).item()
        if mfu is not None:
            self.metrics["perf/mfu/actor_infer"] = mfu
        old_log_prob.meta_info.pop("metrics", None)
        return batch.union(old_log_prob)

    def _update_supplies_old_log_probs(self, batch: DataProto) -> bool:
        """True when the actor update is on-policy (one epoch over one mini-batch holding the whole batch) and
        nothing but the update reads ``old_log_probs``: the update then takes them from its own forward pass, where
        they equal a separate pass's values, and the pass is skipped (``actor.skip_on_policy_log_prob``). A rollout
        correction that weights tokens one by one (``rollout_is``) is then applied inside the update too; one that
        needs the whole batch first (rejection, the token veto, batch normalisation) keeps the pass. A recipe that
        overrides ``_compute_old_log_prob`` always gets its pass."""
        if type(self)._compute_old_log_prob is not RayPPOTrainer._compute_old_log_prob:
            return False
        return self._on_policy_update(batch)

    def _on_policy_update(self, batch: DataProto) -> bool:
        """True when the update's own forward pass can supply ``old_log_probs`` (see
        ``_update_supplies_old_log_probs``): one epoch, one mini-batch, nothing else reading them first."""
        actor = self.ppo_config.actor
        if not actor.skip_on_policy_log_prob or actor.ppo_epochs != 1:
            return False
        if actor.ppo_mini_batch_size * self.ppo_config.rollout.n < len(batch):
            return False
        if self.ppo_config.algorithm.use_kl_in_reward:
            return False
        correction = self.ppo_config.algorithm.rollout_correction
        if "rollout_log_probs" in batch.batch.keys() and in_update_spec(correction) is None:
            return False
        return self._actor_warmed_up()

    def _fit_compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        if not self.use_reference_policy:
            return batch
        return batch.union(self._compute_ref_log_prob(batch))

    def _fit_compute_critic(self, batch: DataProto) -> DataProto:
        if not self.use_critic:
            return batch
        return batch.union(self._compute_values(batch))

    def _fit_compute_advantage(self, batch: DataProto) -> DataProto:
        """Rewards (with the in-reward KL penalty), the rollout correction, then advantages on the driver."""
        algorithm = self.ppo_config.algorithm
        if algorithm.use_kl_in_reward:
            assert self.kl_ctrl_in_reward is not None  # built by _init_run_state when use_kl_in_reward
            batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algorithm.kl_penalty)
            self.metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        self.metrics.update(apply_rollout_correction(batch, algorithm.rollout_correction))
        return compute_advantage(
            batch,
            adv_estimator=algorithm.adv_estimator,
            gamma=algorithm.gamma,
            lam=algorithm.lam,
            num_repeat=self.ppo_config.rollout.n,
            norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
            config=algorithm,
        )

    def _fit_update_critic(self, batch: DataProto) -> DataProto:
        if self.use_critic:
            critic_output = self._update_critic(batch)
            self.metrics.update(reduce_metrics(critic_output.meta_info["metrics"]))
        return batch

    def _actor_warmed_up(self) -> bool:
        """The actor trains once ``trainer.critic_warmup`` steps have trained the critic alone."""
        return self.global_steps > self.ppo_config.trainer.critic_warmup

    def _fit_update_actor(self, batch: DataProto) -> DataProto:
        """Update the policy once the critic has warmed up."""
        if self._actor_warmed_up():
            actor_output = self._update_actor(batch)
            self.metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        return batch

    def _fit_update_weights(self) -> dict[str, Any] | None:  # a recipe's override may return its sync metrics
        """After an actor update, publish its weights to the rollout as the next version."""
        if self._actor_warmed_up():
            self._push_weights(self.metrics)
        return None

    def _push_weights(self, metrics: dict) -> None:
        """Push the actor's weights into the colocated engines as the next version; every engine must report it."""
        self.weight_version += 1
        reports = self.actor_rollout_wg.update_rollout_weights(self.weight_version)
        versions = {report["version"] for report in reports}
        if versions != {self.weight_version}:
            raise RuntimeError(f"rollout replicas report weight versions {versions}, expected {self.weight_version}")
        metrics["rollout/weight_version"] = self.weight_version

    def _fit_validate(self) -> None:
        test_freq = self.ppo_config.trainer.test_freq
        if self.val_reward_fn is None or self.val_dataloader is None or test_freq <= 0:
            return
        if self.is_last_step or self.global_steps % test_freq == 0:
            val_metrics = self._validate()
            if self.is_last_step:
                self.last_val_metrics = val_metrics
            self.metrics.update(val_metrics)

    def _fit_save_checkpoint(self) -> None:
        save_freq = self.ppo_config.trainer.save_freq
        if save_freq > 0 and (self.is_last_step or self.global_steps % save_freq == 0):
            self._save_checkpoint()

    def _fit_collect_metrics(self, batch: DataProto) -> None:
        self.metrics["training/global_step"] = self.global_steps
        self.metrics["training/restarts"] = self.restarts
        self.metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
        self.metrics.update(compute_timing_metrics(batch, self.timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        self.metrics.update(compute_throughout_metrics(batch, self.timing_raw, n_gpus=n_gpus))

    def _fit_experimental(self, batch: DataProto) -> None:
        """Let the data react to the finished step: a curriculum sampler's ``update(batch)`` and a data set's
        ``on_batch_end(batch)`` (both verl hooks), when they exist."""
        from verl.experimental.dataset.sampler import AbstractCurriculumSampler

        sampler = getattr(self.train_dataloader, "sampler", None)
        if isinstance(sampler, AbstractCurriculumSampler):
            sampler.update(batch=batch)
        on_batch_end = getattr(self.train_dataset, "on_batch_end", None)
        if callable(on_batch_end):
            on_batch_end(batch=batch)

    # ------------------------------------------------------------------ one step and the loop
    def fit_step(self, batch_dict: dict | None = None) -> dict[str, Any]:
        """One PPO step over one dataloader batch; returns the step's metrics (also kept in ``self.metrics``)."""
        self.metrics, self.timing_raw = {}, {}
        self.is_last_step = self.global_steps >= self.total_training_steps
        self.gen_steps += 1
        timing = self.timing_raw
        with marked_timer("step", timing):
            batch = self._fit_get_batch(batch_dict)
            batch = self._fit_generate(batch)
            with marked_timer("reward", timing):
                batch = self._fit_compute_reward(batch)
            if self.group_filter is not None:
                batch = self._fit_filter_groups(batch)
            self._fit_dump_data(batch)
            with marked_timer("old_log_prob", timing):
                batch = self._fit_compute_log_prob(batch)
            with marked_timer("ref", timing):
                batch = self._fit_compute_ref_log_prob(batch)
            with marked_timer("values", timing):
                batch = self._fit_compute_critic(batch)
            with marked_timer("adv", timing):
                batch = self._fit_compute_advantage(batch)
            with marked_timer("update_critic", timing):
                batch = self._fit_update_critic(batch)
            with marked_timer("update_actor", timing):
                batch = self._fit_update_actor(batch)
            with marked_timer("update_weights", timing):
                self._fit_update_weights()
            with marked_timer("testing", timing):
                self._fit_validate()
            with marked_timer("save_checkpoint", timing):
                self._fit_save_checkpoint()
        self.max_steps_duration = max(self.max_steps_duration, timing["step"])
        self._fit_collect_metrics(batch)
        self._fit_experimental(batch)
        return self.metrics

    def _fit_filter_groups(self, batch: DataProto) -> DataProto:
        """Dynamic sampling: keep the groups of ``batch`` with reward spread and draw further generation batches
        from the dataloader until ``data.train_batch_size`` groups are kept (see ``dynamic_sampling``)."""
        group_filter = self.group_filter
        assert group_filter is not None  # fit_step calls this only when dynamic sampling is on
        group_filter.add(batch)
        while not group_filter.full:
            group_filter.check_budget()
            batch_dict = next(self._batch_dicts, None) if self._batch_dicts is not None else None
            if batch_dict is None:
                raise StopTraining(f"the data ran out while dynamic sampling filled step {self.global_steps}")
            self.gen_steps += 1
            more = self._fit_generate(self._fit_get_batch(batch_dict))
            with marked_timer("reward", self.timing_raw):
                more = self._fit_compute_reward(more)
            group_filter.add(more)
        batch, sampling_metrics = group_filter.take()
        self.metrics.update(sampling_metrics)
        if self.ppo_config.trainer.balance_batch:
            self._balance_batch(batch, self.metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        return batch

    def fit(self) -> None:
        """Train until ``total_training_steps``, validating and saving as configured; resumes when asked."""
        trainer_cfg = self.ppo_config.trainer
        tracker = self.logger = self._create_tracker()  # verl's recipes log through self.logger
        self.last_val_metrics = None
        self._reset_profile_steps()
        self._load_checkpoint()
        if self.global_steps == 0 and self.val_reward_fn is not None and trainer_cfg.val_before_train:
            val_metrics = self._validate()
            if val_metrics:
                tracker.log(val_metrics, step=0)
            self._log_val_generations(tracker, step=0)
            if trainer_cfg.val_only:
                tracker.finish()
                return
        progress = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.progress_bar = progress
        self.global_steps += 1
        error: BaseException | None = None
        try:
            self._fit_start()
            self._batch_dicts = self._iter_batch_dicts()
            for batch_dict in self._batch_dicts:
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
                self._shutdown_dump_executor()

    def _iter_batch_dicts(self):
        """Dataloader batches, epoch after epoch (the async recipes feed steps from elsewhere)."""
        for epoch in range(self.ppo_config.trainer.total_epochs + 1):
            self.epoch = epoch
            yield from self.train_dataloader

    def _fit_start(self) -> None:
        """Hook before the first step (async recipes start their rollout here)."""

    def _fit_finish(self, error: BaseException | None) -> None:
        """Hook after the last step or a failure (async recipes stop their rollout here)."""

    def _create_tracker(self) -> Tracking:
        trainer_cfg = self.ppo_config.trainer
        return Tracking(
            project_name=trainer_cfg.project_name,
            experiment_name=trainer_cfg.experiment_name,
            default_backend=list(trainer_cfg.logger),
            config=without_legacy_view(self.config),
            local_dir=trainer_cfg.default_local_dir,
        )

    # ------------------------------------------------------------------ validation
    def _log_val_generations(self, tracker: Tracking, step: int) -> None:
        """``trainer.log_val_generations``: the samples the last validation picked, to every logger backend."""
        samples, self._val_generations = self._val_generations, None
        if samples:
            tracker.log_generations(samples, step)

    def _validate(self, merged: bool = False) -> dict[str, float]:
        """Generate on the validation set with ``rollout.val_kwargs`` and report mean@n / best@n / pass@n.
        (``merged`` is verl's flag for merging partial results from several validators; one validator here.)"""
        val_kwargs = self.ppo_config.rollout.val_kwargs
        n = int(val_kwargs.n)
        sources, uids, scores = [], [], []
        dump_dir = self.ppo_config.trainer.validation_data_dir
        log_count = self.ppo_config.trainer.log_val_generations
        source_key = self.ppo_config.data.reward_fn_key
        scored: list[DataProto] = []
        peak_in_flight = 0
        for batch_dict in self.val_dataloader:
            batch = self._batch_from_dict(batch_dict)
            gen_batch = self._step_gen_batch(batch, self.global_steps)
            gen_batch.meta_info.update(
                {
                    "do_sample": bool(val_kwargs.do_sample),
                    "temperature": float(val_kwargs.temperature),
                    "top_p": float(val_kwargs.top_p),
                    "top_k": int(val_kwargs.top_k),
                    "validate": True,
                    MAX_IN_FLIGHT_KEY: validation_max_in_flight(self.config),
                }
            )
            output = self._generate_validation(gen_batch.repeat(repeat_times=n, interleave=True))
            generation_metrics = output.meta_info.get("metrics") or {}
            peak_in_flight = max(peak_in_flight, int(generation_metrics.get("agent_loop/peak_in_flight", 0)))
            batch = batch.repeat(repeat_times=n, interleave=True)
            for key in PROMPT_KEYS:
                batch.batch.pop(key, None)
            batch = batch.union(output)
            reward_tensor, _ = compute_reward(batch, self.val_reward_fn)
            scores.extend(reward_tensor.sum(-1).tolist())
            if dump_dir or log_count > 0:
                scored.append(batch)
            uids.extend(batch.non_tensor_batch["uid"].tolist())
            unknown = np.array(["unknown"] * len(batch), dtype=object)
            sources.extend(batch.non_tensor_batch.get(source_key, unknown).tolist())
        if scored:
            everything = DataProto.concat(scored)
            if dump_dir:
                dump_generations(dump_dir, self.global_steps, self.tokenizer, everything, scores)
            if log_count > 0:
                inputs, outputs = decode_samples(self.tokenizer, everything)
                self._val_generations = pick_samples(inputs, outputs, scores, log_count)
        metrics = process_validation_metrics(sources, uids, scores)
        metrics["val-aux/peak_in_flight"] = float(peak_in_flight)
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self) -> None:
        """Save every worker group and the trainer state of this step. ``trainer_state.pt`` and the tracker file
        are written once the workers' files are complete: at once, or with ``checkpoint.async_save`` when the
        shards written in the background are done (before the next save and when training ends)."""
        self._finish_checkpoint()
        step_dir = self.checkpointer.step_dir(self.global_steps)
        try:
            # Old checkpoints are pruned as whole global_step_* folders by the checkpointer, not per worker.
            self.actor_rollout_wg.save_checkpoint(local_path=str(step_dir / "actor"), global_step=self.global_steps)
            if self.use_critic:
                self.critic_wg.save_checkpoint(local_path=str(step_dir / "critic"), global_step=self.global_steps)
            state = self._checkpoint_state()
            if self._async_checkpoint():
                self._unfinished_checkpoint = (self.global_steps, state)
            else:
                self.checkpointer.save_trainer_state(self.global_steps, state)
        except Exception as exc:
            named = self.checkpointer.save_failed(self.global_steps, exc)
            if named is None:
                raise
            raise named from exc

    def _async_checkpoint(self) -> bool:
        roles = [self.ppo_config.actor] + ([self.ppo_config.critic] if self.use_critic else [])
        return any(role.checkpoint.async_save for role in roles)

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
        """Resume per ``trainer.resume_mode``. With ``auto`` a checkpoint that fails to load (a corrupt or truncated
        file) gives way to the previous complete one, with a warning naming both; a dead worker is never taken for a
        bad checkpoint, and when no checkpoint loads the first failure is raised rather than starting afresh."""
        candidates = self.checkpointer.resume_candidates()
        if not candidates:
            return
        failures: list[str] = []
        for step_dir in candidates:
            try:
                self._restore_checkpoint(Path(step_dir), self.checkpointer.load_trainer_state(step_dir))
            except Exception as exc:
                if isinstance(exc, WorkerDiedError) or is_actor_death(exc):
                    raise
                failures.append(f"{step_dir}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                if step_dir == candidates[-1]:
                    if len(failures) == 1:
                        raise
                    raise RuntimeError(
                        f"no checkpoint under {self.checkpointer.root} could be loaded: {'; '.join(failures)}"
                    ) from exc
                logger.warning(
                    "checkpoint %s cannot be loaded (%s); resuming from the previous complete checkpoint instead",
                    step_dir,
                    failures[-1].split(": ", 1)[1],
                )
                continue
            break
        if failures:
            logger.warning("resumed from %s after skipping %d unloadable checkpoint(s)", step_dir, len(failures))
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
        self._push_weights({})
