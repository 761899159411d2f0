"""verl's reward loop: Ray actors that score samples with a reward-loop manager while rollouts go on.

:class:`RewardLoopManager` (driver side) starts ``reward.num_workers`` :class:`RewardLoopWorker` actors, spread over
the cluster's CPU nodes. ``compute_rm_score(batch)`` splits a batch over them and returns a DataProto with
``rm_scores`` (each score at its row's last response token) and one non-tensor column per extra-info key, listed in
``meta_info["reward_extra_keys"]`` (read it back with :func:`verl.trainer.ppo.reward.extract_reward`). Agent loops
can also call the workers directly (``reward_loop_worker_handles``) to score each sample as soon as it is generated.

Each worker builds the manager ``reward.reward_manager`` names (:func:`verl.trainer.ppo.reward.
build_reward_loop_manager`) with the policy's tokenizer. Rule-based and custom scoring (including a custom function
that queries a reward model behind ``reward_router_address``) work here. A reward model that verl would *serve*
itself (``reward.reward_model.enable`` without a custom function: vLLM/SGLang behind verl's router) is not part of
this build; ``main_ppo`` scores reward models with its own reward-model worker instead.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from verl.experimental.reward_loop.migrate import migrate_legacy_reward_impl
from verl.protocol import DataProto, pad_dataproto_to_divisor
from verl.single_controller.ray.errors import default_call_timeout_s, wait_for_workers
from verl.trainer.ppo.reward import RewardSettings, reward_settings, scored_batch
from verl.utils.extras import MissingExtraError, missing_message

__all__ = ["RewardLoopManager", "RewardLoopWorker", "migrate_legacy_reward_impl"]

logger = logging.getLogger(__name__)

# The role a dead reward-loop worker is named by: "reward worker rank 1 died during compute_score_batch() on node
# ..., pid ..." (verl.single_controller.ray.errors.actor_died_error).
REWARD_WORKER_ROLE = "reward worker"

_SERVED_RM_REASON = (
    "verl serves reward models for the reward loop with vLLM/SGLang behind its own router; this package scores "
    "reward models with main_ppo's reward-model worker (reward.reward_model.enable) instead"
)


def _served_reward_model_error(what: str) -> MissingExtraError:
    return MissingExtraError(
        missing_message(
            what,
            "a served reward model (reward.reward_model.enable without a custom reward function)",
            extra="vllm",
            reason=_SERVED_RM_REASON,
        )
    )


def _uses_served_reward_model(settings: RewardSettings) -> bool:
    reward = settings.reward
    return reward.reward_model.enable and not reward.custom_reward_function.path


def _load_policy_tokenizer(config: Any) -> Any:
    """The tokenizer of the policy model group (``model``, or ``actor_rollout_ref.model`` in verl's layout)."""
    from verl.experimental.agent_loop.config import model_group
    from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

    model = model_group(config)
    return load_tokenizer(model, resolve_model_path(model))


class RewardLoopWorker:
    """Scores samples with the configured reward-loop manager (a Ray actor under :class:`RewardLoopManager`).

    Args:
        config: the trainer config.
        reward_router_address: ``host:port`` of a served reward model a custom reward function may query (passed
            to it as ``reward_router_address`` with ``reward_model_tokenizer``).
    """

    def __init__(self, config: Any, reward_router_address: str | None = None) -> None:
        self.config = config
        self.settings = reward_settings(config)
        self.reward_router_address = reward_router_address
        self._init_reward_fn()

    def _init_reward_fn(self) -> None:
        from verl.trainer.ppo.reward import build_reward_loop_manager

        if _uses_served_reward_model(self.settings):
            raise _served_reward_model_error("verl.experimental.reward_loop.RewardLoopWorker")
        self.input_tokenizer = _load_policy_tokenizer(self.config)
        self.reward_model_tokenizer = None
        rm_path = self.settings.reward.reward_model.model.path
        if self.reward_router_address is not None and rm_path:
            from transformers import AutoTokenizer

            self.reward_model_tokenizer = AutoTokenizer.from_pretrained(str(rm_path), trust_remote_code=True)
        kwargs: dict[str, Any] = {}
        if self.reward_router_address is not None:
            kwargs = {
                "reward_router_address": self.reward_router_address,
                "reward_model_tokenizer": self.reward_model_tokenizer,
            }
        self.reward_manager = build_reward_loop_manager(self.config, self.input_tokenizer, **kwargs)

    async def compute_score(self, data: DataProto) -> dict[str, Any]:
        """``run_single`` of the manager on one sample: ``{"reward_score": ..., "reward_extra_info": {...}}``."""
        return await self.reward_manager.run_single(data)

    async def compute_score_batch(self, data: DataProto) -> list[dict[str, Any]]:
        """:meth:`compute_score` of every row, concurrently, in row order."""
        return list(await asyncio.gather(*(self.compute_score(data[i : i + 1]) for i in range(len(data)))))

    async def compute_score_disrm(self, data: DataProto) -> dict[str, Any]:
        """verl's served discriminative reward model: not part of this build (see the module docstring)."""
        raise _served_reward_model_error("verl.experimental.reward_loop.RewardLoopWorker.compute_score_disrm")


def _cpu_node_ids() -> list[str]:
    return [node["NodeID"] for node in ray.nodes() if node.get("Alive") and node["Resources"].get("CPU", 0) > 0]


class RewardLoopManager:
    """Starts the reward-loop workers and scores batches with them (see the module docstring).

    Args:
        config: the trainer config; ``reward.num_workers`` actors are started (at least one).
        rm_resource_pool: verl's resource pool for a served reward model; a served reward model is not part of
            this build, so it must be ``None`` and ``reward.reward_model.enable`` needs a custom reward function.
    """

    def __init__(self, config: Any, rm_resource_pool: Any = None) -> None:
        self.settings = reward_settings(config)
        if _uses_served_reward_model(self.settings) or rm_resource_pool is not None:
            raise _served_reward_model_error("verl.experimental.reward_loop.RewardLoopManager")
        from verl.trainer.ppo.reward import resolve_reward_manager_cls

        self.config = config
        self.reward_model_manager = None
        self.reward_router_address = None
        self.reward_manager_cls = resolve_reward_manager_cls(self.settings)
        self.reward_loop_workers_class = ray.remote(RewardLoopWorker)
        self._init_reward_loop_workers()

    @property
    def reward_loop_worker_handles(self) -> list[Any]:
        """The worker actors, for agent loops that score each sample as soon as it is generated."""
        return self.reward_loop_workers

    def _init_reward_loop_workers(self) -> None:
        count = max(1, self.settings.reward.num_workers)
        node_ids = _cpu_node_ids()
        if not node_ids:
            raise RuntimeError("RewardLoopManager: the Ray cluster has no live node with CPUs for reward workers")
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
        self.reward_loop_workers = [
            self.reward_loop_workers_class.options(
                scheduling_strategy=strategy(node_id=node_ids[i % len(node_ids)], soft=True)
            ).remote(self.config, self.reward_router_address)
            for i in range(count)
        ]

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """Score ``data`` on the workers: ``rm_scores`` plus the extra-info columns (see the module docstring)."""
        workers = self.reward_loop_workers
        padded, _ = pad_dataproto_to_divisor(data, len(workers))
        chunks = padded.chunk(len(workers))
        outputs = wait_for_workers(
            [w.compute_score_batch.remote(c) for w, c in zip(workers, chunks, strict=True)],
            ranks=list(range(len(workers))),
            method="compute_score_batch",
            role=REWARD_WORKER_ROLE,
            timeout_s=default_call_timeout_s(),
            actor_ids=[w._actor_id.hex() for w in workers],
        )
        flat = [item for chunk in outputs for item in chunk][: len(data)]
        scores = [float(item["reward_score"]) for item in flat]
        rm_scores = self.reward_manager_cls.assemble_rm_scores(data, scores)
        extras = [dict(item.get("reward_extra_info") or {}) for item in flat]
        keys = list(dict.fromkeys(key for extra in extras for key in extra))
        return scored_batch(rm_scores, {key: [extra.get(key) for extra in extras] for key in keys})
