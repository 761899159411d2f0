"""The rollout side's building blocks, shared by the fully-async Rollouter and the one-step-off trainer.

- :func:`rollout_pool_spec`: ``rollout.nnodes x rollout.n_gpus_per_node`` process slots of a pool of their own.
- :func:`start_rollout_replicas`: one ``StandaloneReplica`` (a rollout server Ray actor) per slot of that pool.
- :func:`build_agent_worker`: an in-process ``AgentLoopWorker`` whose server manager resumes aborted requests.
- :class:`StandaloneAgentLoopManager`: that worker behind ``generate_sequences(batch)``, the body of the Ray actor
  the one-step-off trainer generates through.

Replica servers get a prompt limit of ``prompt_length + response_length - 1`` (the model length is unchanged) so
that a request resumed after an abort, whose prompt is the original prompt plus the tokens generated so far, is
accepted; the trainer-side layout keeps ``rollout.prompt_length``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from verl.experimental.agent_loop.config import rollout_group
from verl.workers.config import RolloutConfig

__all__ = [
    "ROLLOUT_POOL",
    "StandaloneAgentLoopManager",
    "build_agent_worker",
    "build_weight_sync",
    "checkpoint_engine_dtype",
    "run_parallel_or_ordered",
    "continuation_rollout_config",
    "placement_guaranteed",
    "rollout_pool_spec",
    "start_rollout_replicas",
]

ROLLOUT_POOL = "rollout_pool"


def rollout_pool_spec(rollout: Any) -> list[int]:
    """Processes per node of the standalone rollout pool (the async recipes, or ``main_ppo`` with
    ``rollout.nnodes > 0``)."""
    nnodes, per_node = int(rollout.nnodes), int(rollout.n_gpus_per_node)
    if nnodes < 1 or per_node < 1:
        raise ValueError(
            f"a standalone rollout pool (the async recipes; main_ppo with rollout.nnodes > 0) needs rollout.nnodes "
            f">= 1 and rollout.n_gpus_per_node >= 1 (got rollout.nnodes={nnodes}, rollout.n_gpus_per_node={per_node})"
        )
    return [per_node] * nnodes


def continuation_rollout_config(rollout: RolloutConfig) -> RolloutConfig:
    """The replicas' config: prompts may be as long as prompt + response - 1 (resumed requests)."""
    model_len = rollout.max_model_len or rollout.prompt_length + rollout.response_length
    return dataclasses.replace(rollout, prompt_length=model_len - 1, max_model_len=model_len)


def start_rollout_replicas(
    config: Any, pool: Any, server_kwargs: dict[str, Any] | None = None, call_timeout_s: float = 600.0
) -> list[Any]:
    """One StandaloneReplica per process slot of ``pool`` (a RayResourcePool), placed on its bundles."""
    from verl.workers.config import HFModelConfig
    from verl.workers.fsdp.model_loader import resolve_model_path
    from verl.workers.fsdp.worker_config import read_group
    from verl.workers.rollout.replica import standalone_replicas

    rollout = continuation_rollout_config(rollout_group(config))
    model_path = resolve_model_path(read_group(config, "model", HFModelConfig, required=True))
    return standalone_replicas(rollout, model_path, pool, server_kwargs=server_kwargs, call_timeout_s=call_timeout_s)


def placement_guaranteed(*pools: Any) -> bool:
    """True when every pool reserved its slots as placement groups, so actors created on them in parallel cannot
    take each other's resources; otherwise rollout and trainer must be created one after the other."""
    return all(getattr(pool, "pgs", None) for pool in pools)


def build_agent_worker(
    config: Any, replicas: list[Any], *, resume_timeout_s: float = 600.0, request_timeout_s: float | None = 3600.0
) -> Any:
    """An AgentLoopWorker in this process whose requests survive weight syncs (PartialRolloutServerManager)."""
    from verl.experimental.agent_loop.worker import AgentLoopWorker
    from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager

    worker = AgentLoopWorker(config, replicas, reward_in_loop=False, request_timeout_s=request_timeout_s)
    worker.server_manager = PartialRolloutServerManager(
        replicas, resume_timeout_s=resume_timeout_s, request_timeout_s=request_timeout_s
    )
    return worker


class StandaloneAgentLoopManager:
    """Turns a prompt batch into trajectories on standalone replicas (run it as a Ray actor with a high
    ``max_concurrency``); meta-info keys the batch did not bring are dropped from the output."""

    def __init__(self, config: Any, replicas: list[Any]) -> None:
        self.worker = build_agent_worker(config, replicas)

    def ready(self) -> bool:
        return True

    async def generate_sequences(self, batch: Any) -> Any:
        out = await self.worker.generate_sequences(batch)
        out.meta_info = {k: v for k, v in out.meta_info.items() if k in batch.meta_info}
        return out


def run_parallel_or_ordered(parallel: bool, *builders: Callable[[], Any]) -> list[Any]:
    """Run the builders in threads when ``parallel`` (placement is guaranteed), else one after the other."""
    if not parallel:
        return [build() for build in builders]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(builders)) as pool:
        futures = [pool.submit(build) for build in builders]
        return [f.result() for f in futures]


def checkpoint_engine_dtype(config: Any) -> str | None:
    """The dtype the rollout holds weights in (so checksums compare like with like); None keeps fp32 on CPU."""
    from verl.utils.device import get_device_name

    dtype = str(config.rollout.dtype)
    if dtype == "auto":
        return None if get_device_name() == "cpu" else "bfloat16"
    return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)


def build_weight_sync(config: Any, actor_group: Any, replicas: list[Any]) -> Any:
    """A CheckpointEngineManager from ``rollout.checkpoint_engine`` (``naive`` becomes ``ray``: the engines are not
    in the trainer's processes)."""
    from verl.checkpoint_engine import CheckpointEngineManager

    backend = str(config.rollout.checkpoint_engine.backend)
    if backend == "naive":
        backend = "ray"
    return CheckpointEngineManager.from_config(
        config.rollout, trainer=actor_group, replicas=replicas, backend=backend, dtype=checkpoint_engine_dtype(config)
    )
