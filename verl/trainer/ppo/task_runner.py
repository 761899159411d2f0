"""``run_ppo(config)``: start or join Ray, then build and run the trainer inside a ``TaskRunner`` Ray actor.

The trainer runs in a Ray actor rather than the driver so that a cluster's head node does not need the
driver's environment, and so that the driver process stays free to report failures.

``TaskRunner`` is a plain class with verl's building steps (``add_actor_rollout_worker``, ``add_critic_worker``,
``add_reward_model_worker``, ``add_ref_policy_worker``, ``init_resource_pool_mgr``, ``run``), so a recipe can
subclass it, override one step (or ``trainer_class``), and hand it to ``run_ppo(config, task_runner_class=...)``
either as it is or already wrapped by ``ray.remote``.
"""

from __future__ import annotations

import logging
import os
from typing import Any, cast

import ray
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.ppo_config import PPOConfig
from verl.trainer.config.resolve import attach_ppo_config, to_ppo_config
from verl.trainer.ppo.utils import Role, need_critic, need_reward_model

logger = logging.getLogger(__name__)

__all__ = [
    "TASK_RUNNER_CPUS",
    "TaskRunner",
    "build_role_worker_mapping",
    "pool_spec",
    "reward_pool_spec",
    "run_ppo",
    "run_task_runner",
    "standalone_rollout",
]

TASK_RUNNER_CPUS = 0.1
# How a dead runner is named: it holds the trainer's loop and drives every weight sync.
TASK_RUNNER_ROLE = "task runner (trainer, parameter sync)"
GLOBAL_POOL = "global_pool"
REWARD_POOL = "reward_pool"


def _ray_init_kwargs(config: DictConfig) -> dict[str, Any]:
    """``ray.init`` arguments from ``ray_kwargs.ray_init``; the workers' environment is
    ``get_ppo_ray_runtime_env(config)`` under the user's own ``runtime_env.env_vars`` (which win)."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    os.environ.setdefault("RAY_worker_niceness", "0")  # Ray's default 15 starves workers on a busy CPU (bench/)
    ray_init = cast(
        dict[str, Any], OmegaConf.to_container(OmegaConf.select(config, "ray_kwargs.ray_init") or {}, resolve=True)
    )
    kwargs = {key: value for key, value in ray_init.items() if value is not None}
    runtime_env = dict(kwargs.get("runtime_env") or {})
    env_vars = dict(get_ppo_ray_runtime_env(config)["env_vars"])
    env_vars.update(runtime_env.get("env_vars") or {})
    runtime_env["env_vars"] = env_vars
    kwargs["runtime_env"] = runtime_env
    if os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = os.environ["RAY_ADDRESS"]
        if kwargs["address"] != "local":  # "local" starts a new cluster, which takes the resources given
            kwargs.pop("num_cpus", None)
            kwargs.pop("num_gpus", None)
    return kwargs


def _check_strategy(config: DictConfig) -> None:
    strategy = str(config.actor.strategy)
    if strategy not in ("fsdp", "fsdp2"):
        raise ValueError(f"actor.strategy={strategy!r} is not available; supported: fsdp, fsdp2")


class TaskRunner:
    """Builds tokenizer, data sets, reward functions, resource pools and the trainer, then trains.

    ``role_worker_mapping`` maps each Role to its worker class and ``mapping`` each Role to its pool name; the
    ``add_*`` steps fill them, ``init_resource_pool_mgr`` turns them into pools, ``run`` does the rest.
    """

    trainer_class: type | None = None  # a RayPPOTrainer subclass; None: RayPPOTrainer

    def __init__(self) -> None:
        self.role_worker_mapping: dict[Role, Any] = {}
        self.mapping: dict[Role, str] = {}
        self.trainer_kwargs: dict[str, Any] = {}  # extra keyword arguments of the trainer class

    def add_workers(self, config: DictConfig) -> type:
        """Every ``add_*`` step in verl's order; returns the worker-group class."""
        actor_cls, worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_worker(config)
        self.add_ref_policy_worker(config, actor_cls)
        return worker_group_cls

    def add_actor_rollout_worker(self, config: DictConfig) -> tuple[type, type]:
        """The actor (with its colocated rollout engine and, when needed, the reference policy) on the global pool;
        with ``rollout.nnodes > 0`` the actor alone, and the rollout on a pool of its own. Returns the worker class
        and the worker-group class."""
        from verl.single_controller.ray import RayWorkerGroup
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        _check_strategy(config)
        if standalone_rollout(config):
            from verl.experimental.separation.engine_workers import DetachActorWorker
            from verl.experimental.separation.rollout_pool import ROLLOUT_POOL

            self.role_worker_mapping[Role.Actor] = DetachActorWorker
            self.mapping[Role.Actor] = GLOBAL_POOL
            self.mapping[Role.Rollout] = ROLLOUT_POOL
            return DetachActorWorker, RayWorkerGroup
        self.role_worker_mapping[Role.ActorRollout] = ActorRolloutRefWorker
        self.mapping[Role.ActorRollout] = GLOBAL_POOL
        return ActorRolloutRefWorker, RayWorkerGroup

    def add_critic_worker(self, config: DictConfig) -> None:
        """A critic on the global pool when the config needs one (``critic.enable`` or GAE)."""
        if not need_critic(config):
            return
        from verl.workers.fsdp_workers import CriticWorker

        self.role_worker_mapping[Role.Critic] = CriticWorker
        self.mapping[Role.Critic] = GLOBAL_POOL

    def add_reward_model_worker(self, config: DictConfig) -> None:
        """A model-based reward when ``reward.reward_model.enable``: on the global pool, or on a pool of its own
        with ``reward.reward_model.enable_resource_pool`` (see :meth:`add_reward_model_resource_pool`)."""
        self.add_reward_model_resource_pool(config)

    def add_reward_model_resource_pool(self, config: DictConfig) -> None:
        """verl's step that places the reward model: ``reward_pool`` (``reward.reward_model.nnodes`` x
        ``n_gpus_per_node`` processes, built by :meth:`init_resource_pool_mgr`) with
        ``reward.reward_model.enable_resource_pool``, else the global pool. The worker class is ours
        (``RewardModelWorker``) unless the runner mapped its own."""
        if not need_reward_model(config):
            return
        from verl.workers.reward_model import RewardModelWorker

        self.role_worker_mapping.setdefault(Role.RewardModel, RewardModelWorker)
        own_pool = bool(config.reward.reward_model.enable_resource_pool)
        self.mapping[Role.RewardModel] = REWARD_POOL if own_pool else GLOBAL_POOL

    def add_teacher_model_resource_pool(self, config: DictConfig) -> None:
        """verl's step that places a distillation teacher; this build has no distillation trainer, so an enabled
        ``distillation`` block is refused here, by name, before any worker starts."""
        from verl.trainer.ppo.utils import need_teacher_policy

        if need_teacher_policy(config):
            raise ValueError("distillation.enabled=true: this build has no distillation trainer (teacher policy)")

    def add_ref_policy_worker(self, config: DictConfig, ref_policy_cls: type) -> None:
        """The reference policy rides in the colocated actor workers (``ActorRolloutRefWorker``), so no group is
        added; beside a standalone rollout the actor workers host no reference, so it gets a group of its own on
        the global pool. A recipe that wants its own group maps ``Role.RefPolicy`` to its class here."""
        from verl.trainer.ppo.utils import need_reference_policy

        if standalone_rollout(config) and need_reference_policy(config):
            from verl.workers.fsdp_workers import ActorRolloutRefWorker

            self.role_worker_mapping[Role.RefPolicy] = ActorRolloutRefWorker
            self.mapping[Role.RefPolicy] = GLOBAL_POOL

    def init_resource_pool_mgr(self, config: DictConfig) -> Any:
        """One pool of ``trainer.nnodes x trainer.n_gpus_per_node`` processes shared by every training role, plus
        ``rollout.nnodes x rollout.n_gpus_per_node`` for a standalone rollout (placed on nodes of its own first)
        and ``reward_pool`` when a role is mapped to it."""
        from verl.single_controller.ray import ResourcePoolManager

        spec = pool_spec(config)
        if REWARD_POOL in self.mapping.values():
            spec[REWARD_POOL] = reward_pool_spec(config)
        return ResourcePoolManager(
            resource_pool_spec=spec,
            mapping=dict(self.mapping),
            device=str(config.trainer.device),
        )

    def run(self, config: DictConfig | dict) -> Any:
        """Build everything from ``config`` and train; returns :meth:`result` (the run folder by default).

        When a worker process or its node dies, the run fails with the error naming node, role and rank, unless
        ``trainer.max_restarts`` allows a restart: then every worker group is torn down, rebuilt on the resources
        still there (placement waits, bounded, for room) and resumes from the newest checkpoint this run saved
        (or from where the run itself started, when it saved none)."""
        if not isinstance(config, DictConfig):
            config = OmegaConf.create(config)
        worker_group_cls = self.add_workers(config)
        from verl.trainer.ppo.restarts import RestartPolicy
        from verl.utils.ray_utils import settle_task_events

        policy = RestartPolicy(config)

        def attempt(attempt_config: DictConfig) -> Any:
            resource_pool_manager = self.init_resource_pool_mgr(attempt_config)
            trainer = self.build_trainer(attempt_config, resource_pool_manager, worker_group_cls)
            trainer.restarts = policy.restarts
            try:
                trainer.init_workers()
                trainer.fit()
                result = self.result(config, trainer)
                settle_task_events(config)  # a requested timeline gets the workers' last calls
                return result
            finally:
                resource_pool_manager.release_all()

        return policy.run(attempt)

    def result(self, config: DictConfig, trainer: Any) -> Any:
        """What ``run`` returns once ``trainer`` has finished: the run folder (``trainer.default_local_dir``)."""
        return str(config.trainer.default_local_dir)

    def build_trainer(self, config: DictConfig, resource_pool_manager: Any, worker_group_cls: type) -> Any:
        """The trainer over the mapped roles and pools: ``trainer_class`` (default :class:`RayPPOTrainer`) with the
        tokenizer of ``model.path`` and the configured reward functions. Runners that build theirs differently
        override this stage only."""
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.reward import load_reward_manager
        from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

        tokenizer = load_tokenizer(config.model, resolve_model_path(config.model))
        trainer_class = self.trainer_class or RayPPOTrainer
        if standalone_rollout(config):
            from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
            from verl.trainer.ppo.standalone_trainer import StandaloneRolloutTrainer

            trainer_class = self.trainer_class or StandaloneRolloutTrainer
            if not issubclass(trainer_class, SeparateRayPPOTrainer):
                raise ValueError(
                    f"rollout.nnodes={config.rollout.nnodes} asks for a standalone rollout pool, but the trainer "
                    f"class {trainer_class.__name__} drives colocated engines; subclass StandaloneRolloutTrainer "
                    "(verl.trainer.ppo.standalone_trainer) or set rollout.nnodes=0"
                )
        return trainer_class(
            config=config,
            tokenizer=tokenizer,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=resource_pool_manager,
            ray_worker_group_cls=worker_group_cls,
            reward_fn=load_reward_manager(config, tokenizer, num_examine=0),
            val_reward_fn=load_reward_manager(config, tokenizer, num_examine=1),
            **self.trainer_kwargs,
        )


def standalone_rollout(config: DictConfig) -> bool:
    """``rollout.nnodes > 0``: the rollout replicas get a pool of their own instead of living in the actor."""
    return int(config.rollout.nnodes or 0) > 0


def pool_spec(config: DictConfig) -> dict[str, list[int]]:
    """Processes per node of each pool: the global (training) pool, and the rollout pool when it stands alone."""
    trainer = config.trainer
    spec = {GLOBAL_POOL: [int(trainer.n_gpus_per_node)] * int(trainer.nnodes)}
    if standalone_rollout(config):
        from verl.experimental.separation.rollout_pool import ROLLOUT_POOL, rollout_pool_spec

        spec[ROLLOUT_POOL] = rollout_pool_spec(config.rollout)
    return spec


def reward_pool_spec(config: DictConfig) -> list[int]:
    """Processes per node of the reward model's own pool (``reward.reward_model.nnodes`` x ``n_gpus_per_node``)."""
    settings = config.reward.reward_model
    for key in ("nnodes", "n_gpus_per_node"):
        if int(settings[key]) <= 0:
            raise ValueError(
                f"reward.reward_model.{key}={settings[key]}: must be > 0 with reward.reward_model.enable_resource_pool"
            )
    return [int(settings.n_gpus_per_node)] * int(settings.nnodes)


def build_role_worker_mapping(config: DictConfig) -> tuple[dict[Role, type], dict[Role, str], dict[str, list[int]]]:
    """Worker class per role, pool per role, and processes per node of each pool, as ``TaskRunner`` builds them."""
    runner = TaskRunner()
    runner.add_workers(config)
    return runner.role_worker_mapping, runner.mapping, pool_spec(config)


def _as_actor_class(task_runner_class: Any) -> Any:
    """``task_runner_class`` as a Ray actor class: a plain class is wrapped, an actor class is used as it is."""
    if task_runner_class is None:
        task_runner_class = TaskRunner
    if hasattr(task_runner_class, "remote"):
        return task_runner_class
    if not (isinstance(task_runner_class, type) and callable(getattr(task_runner_class, "run", None))):
        raise TypeError(
            f"run_ppo: task_runner_class must be a class with a run(config) method, got {task_runner_class!r}"
        )
    return ray.remote(num_cpus=TASK_RUNNER_CPUS)(task_runner_class)


def _flattened(config: DictConfig) -> tuple[DictConfig, PPOConfig]:
    """``config`` in the flattened groups, and its typed twin: the one ``main_ppo`` built and attached, or built
    here. A config composed by a recipe's own ``@hydra.main`` still holds verl's spellings (``actor_rollout_ref.*``,
    ``custom_reward_function.*``), which are translated and validated here as ``main_ppo`` does before Hydra hands
    over."""
    from verl.trainer.config.legacy import LEGACY_ROOTS

    if not any(root in config for root in LEGACY_ROOTS):
        return config, to_ppo_config(config)
    from verl.trainer.main_ppo import resolve_config

    config, typed = resolve_config(config)
    from verl.trainer.config.recipe_keys import warn_recipe_keys

    warn_recipe_keys(typed)  # a recipe's own main: main_ppo's start-up checks did not run
    return config, typed


def run_ppo(config: DictConfig, task_runner_class: Any = None) -> str:
    """Train with ``config`` in a ``task_runner_class`` actor (default ``TaskRunner``); returns the run folder
    (``trainer.default_local_dir``). A config in verl's spelling is translated first."""
    result = run_task_runner(config, task_runner_class)
    return str(config.trainer.default_local_dir) if result is None else str(result)


def run_task_runner(config: DictConfig, task_runner_class: Any = None, *init_args: Any, **init_kwargs: Any) -> Any:
    """Start or join Ray, create the ``task_runner_class`` actor (default ``TaskRunner``) with ``init_args`` /
    ``init_kwargs``, and return what its ``run(config)`` returns (the async recipes' runner: the run's summary)."""
    from verl.trainer.config.legacy_view import add_legacy_view, legacy_leaf_aliases

    leaf_aliases = legacy_leaf_aliases(config)  # what a recipe's YAML set under verl's reward blocks
    config, typed = _flattened(config)
    if not ray.is_initialized():
        ray.init(**_ray_init_kwargs(config))
    # resolved, then verl's spellings added back as read-only aliases for the runner (config.actor_rollout_ref.*,
    # config.reward_model.*)
    resolved = add_legacy_view(OmegaConf.create(OmegaConf.to_container(config, resolve=True)), leaf_aliases)
    attach_ppo_config(resolved, typed)  # the runner, its trainer and the workers reuse it: built once per run
    from verl.single_controller.ray.node_placement import on_this_node
    from verl.utils.ray_utils import dump_ray_timeline

    actor_class = _as_actor_class(task_runner_class)
    runner = actor_class.options(**on_this_node(TASK_RUNNER_CPUS)).remote(*init_args, **init_kwargs)
    try:
        return ray.get(runner.run.remote(resolved))
    except ray.exceptions.RayError as err:
        raise _named(err, runner) from None
    finally:  # a failed run's timeline shows where it stopped
        dump_ray_timeline(config)


def _named(err: Exception, runner: Any) -> Exception:
    """The error whose first line names the root cause: a dead worker or actor the run already named (not Ray's
    wrapper of the runner's call); the runner itself, where the trainer and the weight sync run, when it died."""
    from verl.single_controller.ray.errors import actor_died_error, is_actor_death, worker_error_in

    named = worker_error_in(err)
    if named is not None:
        return named
    if is_actor_death(err):
        return actor_died_error(
            err, role=TASK_RUNNER_ROLE, index=0, method="run", actor=runner, context="the run's trainer process"
        )
    return err
