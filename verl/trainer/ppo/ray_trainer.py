"""RayPPOTrainer: the synchronous PPO/GRPO loop driven from the single controller.

Actor, rollout and reference share processes (the hybrid engine) and take turns. Every stage of a step is
inherited from :class:`~verl.trainer.ppo.separate_trainer.SeparateRayPPOTrainer`; this class only says how the
colocated rollout generates (`_fit_generate`, the single place generation happens) and receives new weights.
"""

from __future__ import annotations

from verl.protocol import DataProto
from verl.trainer.ppo.separate_trainer import (
    SeparateRayPPOTrainer,
    WorkerType,
    generation_seed,
    marked_timer,
    need_critic,
    need_reference_policy,
)

__all__ = [
    "RayPPOTrainer",
    "WorkerType",
    "generation_seed",
    "marked_timer",
    "need_critic",
    "need_reference_policy",
]


class RayPPOTrainer(SeparateRayPPOTrainer):
    """Synchronous PPO trainer: actor, rollout and reference share processes (hybrid engine); critic optional."""

    def init_workers(self) -> None:
        """Spawn the worker groups, then the agent-loop manager over the rollout engines in the actor workers."""
        from verl.experimental.agent_loop import AgentLoopManager

        super().init_workers()
        self.agent_loop_manager = AgentLoopManager.create_blocking(self.config, worker_group=self.actor_rollout_wg)

    def _fit_generate(self, gen_batch: DataProto) -> DataProto:
        """Generate `rollout.n` responses per prompt. The one place the trainer talks to the rollout."""
        gen_batch = gen_batch.repeat(repeat_times=int(self.config.rollout.n), interleave=True)
        return self.agent_loop_manager.generate_sequences(gen_batch)

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        return self.agent_loop_manager.generate_sequences(gen_batch)

    def _fit_update_weights(self, metrics: dict) -> None:
        """Push the new actor weights to the colocated engines as the next version and check the versions."""
        self.weight_version += 1
        reports = self.actor_rollout_wg.update_rollout_weights(self.weight_version)
        versions = {report["version"] for report in reports}
        if versions != {self.weight_version}:
            raise RuntimeError(f"rollout replicas report weight versions {versions}, expected {self.weight_version}")
        metrics["rollout/weight_version"] = self.weight_version
