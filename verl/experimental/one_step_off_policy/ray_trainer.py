"""OneStepOffRayTrainer: generation of batch k+1 overlaps training on batch k, on a standalone rollout pool.

Order of one step k: take batch k (generated in the background during step k-1), publish the actor's newest weights
if an update happened since the last publish (the rollout is idle at this point, so no request ever mixes two
versions), start generating batch k+1 in the background, then train on batch k with the inherited stages.

Policy lag (documented off-by-one): batch k is generated under weight version max(k-2, 0) and trained by the actor
after k-1 updates, so it is exactly one update behind for k >= 2 (zero for k = 1); the synchronous trainer has lag 0.
An update made while no generation is pending (the last step) is published at once, so the rollout ends on the final
weights.

Checkpoints (``trainer.save_freq``) also hold the batch generated in the background (``one_step_off_pending/``): the
save waits for it, and a resumed run trains on exactly that batch next, so resuming reproduces an uninterrupted run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import ray

from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.experimental.separation.rollout_pool import StandaloneAgentLoopManager, start_rollout_replicas
from verl.protocol import DataProto
from verl.single_controller.ray.node_placement import on_this_node
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, marked_timer

__all__ = ["OneStepOffRayTrainer"]

logger = logging.getLogger(__name__)

PENDING_DIR = "one_step_off_pending"
_PENDING_FILES = ("batch.pkl", "gen_batch.pkl", "output.pkl")


class OneStepOffRayTrainer(SeparateRayPPOTrainer):
    """One-step-off-policy PPO; ``Role.Actor`` on the trainer pool, ``Role.Rollout`` mapped to the rollout pool."""

    def __init__(self, *args: Any, generate_timeout_s: float = 3600.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.generate_timeout_s = float(generate_timeout_s)
        self.generator = None
        self.replicas: list[Any] = []
        self._next_batch_dict: dict | None = None
        self._pending: tuple[dict, DataProto, DataProto, Any, int] | None = None
        self._unpublished_updates = 0
        self._resumed_batch_dict: dict | None = None
        self.generation_versions: dict[int, int] = {}

    def _init_rollout(self, pool: Any) -> None:
        self.replicas = start_rollout_replicas(self.config, pool)
        self.generator = (
            ray.remote(StandaloneAgentLoopManager)
            .options(num_cpus=0, max_concurrency=1000, **on_this_node())
            .remote(self.config, self.replicas)
        )
        ray.get(self.generator.ready.remote(), timeout=self.generate_timeout_s)

    # ------------------------------------------------------------------ the pipeline

    def _iter_batch_dicts(self):
        """Dataloader batches with one batch of lookahead (the one generated in the background)."""
        source = super()._iter_batch_dicts()
        # after a resume, the batch generated before the checkpoint comes first (the dataloader is past it)
        current, self._resumed_batch_dict = self._resumed_batch_dict or next(source, None), None
        while current is not None:
            following = next(source, None)
            self._next_batch_dict = following
            yield current
            current = following

    def _fit_get_batch(self, batch_dict: dict) -> DataProto:
        if self._pending is not None and self._pending[0] is batch_dict:
            return self._pending[1]
        return super()._fit_get_batch(batch_dict)

    def _submit(self, gen_batch: DataProto) -> Any:
        gen_batch = gen_batch.repeat(repeat_times=self.ppo_config.rollout.n, interleave=True)
        return self.generator.generate_sequences.remote(gen_batch)

    def _wait(self, ref: Any, what: str) -> DataProto:
        try:
            return ray.get(ref, timeout=self.generate_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"one-step-off: {what} did not finish within {self.generate_timeout_s:g}s") from None

    def _publish_weights(self, metrics: dict) -> None:
        """Push the actor's weights if it changed since the last push (only while the rollout is idle)."""
        if self._unpublished_updates:
            self._push_weights(metrics)
            self._unpublished_updates = 0

    def _fit_generate(self, batch: DataProto | None = None) -> DataProto:
        """Batch k from the background generation (or generated now for the first step), then start k+1."""
        with marked_timer("gen", self.timing_raw):
            if self._pending is not None and self._pending[1] is batch:
                _, _, _, ref, version = self._pending
            else:
                ref, version = self._submit(self._step_gen_batch(batch, self.global_steps)), self.weight_version
            self._pending = None
            output = self._wait(ref, f"generation of step {self.global_steps}")
            self.generation_versions[self.global_steps] = version
            published: dict[str, float] = {}
            self._publish_weights(published)
            next_dict = self._next_batch_dict
            if next_dict is not None and self.global_steps < self.total_training_steps:
                next_batch = RayPPOTrainer._fit_get_batch(self, next_dict)
                next_gen = self._step_gen_batch(next_batch, self.global_steps + 1)
                self._pending = (next_dict, next_batch, next_gen, self._submit(next_gen), self.weight_version)
        output.meta_info["timing"] = {"publish_weights": published.get("timing_s/update_weights", 0.0)}
        self.metrics.update(
            {
                "one_step_off/generation_version": float(version),
                "one_step_off/policy_lag": float(self.global_steps - 1 - version),
            }
        )
        return self._fit_assemble(batch, output)

    def _fit_update_weights(self) -> None:
        """Weights are published at the start of the next generation, when the rollout is idle; with no
        generation pending (the last step) the rollout is idle now, so they are published at once."""
        if not self._actor_warmed_up():
            return
        self._unpublished_updates += 1
        if self._pending is None:
            self._publish_weights(self.metrics)

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        if self._pending is not None:
            ray.wait([self._pending[3]], timeout=self.generate_timeout_s)
            # the pending batch keeps the version it started under; validation sees the newest weights
        self._publish_weights({})
        return self._wait(self.generator.generate_sequences.remote(gen_batch), "validation generation")

    # ------------------------------------------------------------------ checkpoints

    def _save_checkpoint(self) -> None:
        """Save the trainer state plus the batch being generated for the next step (waiting for it)."""
        if self._pending is not None:
            _, batch, gen_batch, ref, _version = self._pending
            output = self._wait(ref, f"generation of step {self.global_steps + 1} (for the checkpoint)")
            folder = self.checkpointer.step_dir(self.global_steps) / PENDING_DIR
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in zip(_PENDING_FILES, (batch, gen_batch, output)):
                data.save_to_disk(folder / name)
        super()._save_checkpoint()

    def _checkpoint_state(self) -> dict[str, Any]:
        state = super()._checkpoint_state()
        # the saved actor includes the not yet published update: it is that version
        state["weight_version"] = self.weight_version + self._unpublished_updates
        state["pending_version"] = None if self._pending is None else self._pending[4]
        return state

    def _restore_checkpoint(self, step_dir: Path, state: dict[str, Any]) -> None:
        super()._restore_checkpoint(step_dir, state)
        if state.get("pending_version") is None:
            return
        folder = step_dir / PENDING_DIR
        missing = [name for name in _PENDING_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(
                f"one-step-off checkpoint {step_dir} records a pending batch but {folder} lacks "
                f"{missing}; it was not written by a complete save"
            )
        batch, gen_batch, output = (DataProto.load_from_disk(folder / name) for name in _PENDING_FILES)
        self._resumed_batch_dict = {"resumed_from": str(step_dir)}
        self._pending = (self._resumed_batch_dict, batch, gen_batch, ray.put(output), int(state["pending_version"]))

    def _resume_rollout_weights(self, version: int) -> None:
        """Push the restored actor to the idle rollout as ``version`` (not deferred like a step's update)."""
        self.weight_version = version - 1
        self._unpublished_updates = 0
        self._push_weights({})
