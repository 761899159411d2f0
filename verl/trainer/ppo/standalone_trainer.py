"""StandaloneRolloutTrainer: synchronous PPO whose rollout replicas have a pool (and nodes) of their own.

``main_ppo`` builds it when ``rollout.nnodes > 0``: the actor, critic and reference share the trainer pool
(``trainer.nnodes x trainer.n_gpus_per_node``), one rollout replica runs per slot of the rollout pool
(``rollout.nnodes x rollout.n_gpus_per_node``), and after every actor update the checkpoint engine pushes the new
weights to every replica, which must report the version and the trainer's checksum before the next generation
starts. Step k therefore generates with the weights of update k-1, exactly as the colocated trainer does; only
where the processes live differs. The one-step-off and fully-async recipes build on the same pools and overlap
generation with training instead.
"""

from __future__ import annotations

from typing import Any

import ray

from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.protocol import DataProto
from verl.single_controller.ray.node_placement import on_this_node

__all__ = ["StandaloneRolloutTrainer"]

GENERATE_TIMEOUT_S = 3600.0


class StandaloneRolloutTrainer(SeparateRayPPOTrainer):
    """Colocated PPO's schedule (generate, score, update, publish) over a standalone rollout pool."""

    def __init__(self, *args: Any, generate_timeout_s: float = GENERATE_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.generate_timeout_s = float(generate_timeout_s)
        self.generator: Any = None

    def _init_rollout(self, pool: Any) -> None:
        """One replica per rollout slot, and one agent-loop actor that turns prompt batches into trajectories on
        them (its server manager resumes a request a weight sync aborted)."""
        from verl.experimental.separation.rollout_pool import (
            StandaloneAgentLoopManager,
            start_rollout_replicas,
        )

        self.replicas = start_rollout_replicas(self.config, pool)
        self.generator = (
            ray.remote(StandaloneAgentLoopManager)
            .options(num_cpus=0, max_concurrency=1000, **on_this_node())
            .remote(self.config, self.replicas)
        )
        ray.get(self.generator.ready.remote(), timeout=self.generate_timeout_s)

    def _generate(self, gen_batch: DataProto, what: str) -> DataProto:
        try:
            return ray.get(self.generator.generate_sequences.remote(gen_batch), timeout=self.generate_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"standalone rollout: {what} did not finish within {self.generate_timeout_s:g}s "
                f"on {len(self.replicas)} replica(s)"
            ) from None

    def _generate_sequences(self, gen_batch: DataProto) -> DataProto:
        gen_batch = gen_batch.repeat(repeat_times=self.ppo_config.rollout.n, interleave=True)
        return self._generate(gen_batch, f"generation of step {self.global_steps}")

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        return self._generate(gen_batch, "validation generation")
