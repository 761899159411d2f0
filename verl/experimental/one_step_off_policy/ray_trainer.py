"""OneStepOffRayTrainer: generation of batch k+1 overlaps training on batch k, on a standalone rollout pool.

Order of one step k: take batch k (generated in the background during step k-1), publish the actor's newest weights
if an update happened since the last publish (the rollout is idle at this point, so no request ever mixes two
versions), start generating batch k+1 in the background, then train on batch k with the inherited stages.

The background generation is verl's ``_async_gen_next_batch(continuous_iterator)`` coroutine, run on a helper
thread: it draws the next ``(epoch, batch_dict)`` of ``_create_continuous_iterator()``, generates it on the replicas
and returns ``(metrics, timing_raw, epoch, batch, future_reward)`` with the prompts joined to their responses; a
recipe that overrides either changes what the pipeline trains on.

Policy lag (documented off-by-one): batch k is generated under weight version max(k-2, 0) and trained by the actor
after k-1 updates, so it is exactly one update behind for k >= 2 (zero for k = 1); the synchronous trainer has lag 0.
An update made while no generation is pending (the last step) is published at once, so the rollout ends on the final
weights.

Checkpoints (``trainer.save_freq``) also hold the batch generated in the background (``one_step_off_pending/``): the
save waits for it, and a resumed run trains on exactly that batch next, so resuming reproduces an uninterrupted run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch

from verl.experimental.separation.deaths import GENERATOR, await_from
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.experimental.separation.rollout_pool import StandaloneAgentLoopManager, start_rollout_replicas
from verl.protocol import DataProto
from verl.single_controller.ray.node_placement import on_this_node
from verl.trainer.ppo.ray_trainer import StopTraining, marked_timer

__all__ = ["OneStepOffRayTrainer"]

logger = logging.getLogger(__name__)

PENDING_DIR = "one_step_off_pending"
_PENDING_FILES = ("batch.pkl",)
NEXT_GENERATED = object()  # what fit() iterates over: each step trains on the batch generated in the background


@dataclass
class _Pending:
    """A background generation: its result (or None once the data ran out), the weight version it generates
    under and the step it is for."""

    future: concurrent.futures.Future
    version: int
    step: int


class OneStepOffRayTrainer(SeparateRayPPOTrainer):
    """One-step-off-policy PPO; ``Role.Actor`` on the trainer pool, ``Role.Rollout`` mapped to the rollout pool."""

    def __init__(self, *args: Any, generate_timeout_s: float = 3600.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.generate_timeout_s = float(generate_timeout_s)
        self.generator = None
        self._pending: _Pending | None = None
        self._unpublished_updates = 0
        self._continuous_iterator: Iterator[tuple[int, dict]] | None = None
        self._generation_step = 0  # the step the running background generation is for (seeds, trace)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.generation_versions: dict[int, int] = {}

    def _init_rollout(self, pool: Any) -> None:
        self.replicas = start_rollout_replicas(self.config, pool)
        self.generator = (
            ray.remote(StandaloneAgentLoopManager)
            .options(num_cpus=0, max_concurrency=1000, **on_this_node())
            .remote(self.config, self.replicas)
        )
        ray.get(self.generator.ready.remote(), timeout=self.generate_timeout_s)

    # ------------------------------------------------------------------ the background generation (verl's names)

    def _create_continuous_iterator(self) -> Iterator[tuple[int, dict]]:
        """``(epoch, batch_dict)`` of the dataloader, epoch after epoch."""
        for epoch in range(self.ppo_config.trainer.total_epochs + 1):
            for batch_dict in self.train_dataloader:
                yield epoch, batch_dict

    async def _async_gen_next_batch(self, continuous_iterator: Iterator[tuple[int, dict]]) -> tuple | None:
        """Draw the next batch and generate ``rollout.n`` responses per prompt on the replicas; returns
        ``(metrics, timing_raw, epoch, batch, future_reward)``, ``batch`` holding prompts and responses, or None
        when the data has run out. Runs beside the training step, so it keeps its own metrics and timings."""
        try:
            epoch, batch_dict = next(continuous_iterator)
        except StopIteration:
            return None
        metrics: dict[str, Any] = {}
        timing_raw: dict[str, float] = {}
        with marked_timer("generate_async", timing_raw):
            batch = self._fit_get_batch(batch_dict)
            gen_batch = self._step_gen_batch(batch, self._generation_step)
            output = await self._await_generation(self._submit(gen_batch))
        batch = self._join_generation(batch, output, metrics, timing_raw)
        return metrics, timing_raw, epoch, batch, None

    @staticmethod
    @ray.remote(num_cpus=0)
    def _launch_individual_rewards(batch: DataProto, config: Any, tokenizer: Any) -> tuple[torch.Tensor, dict]:
        """A Ray task scoring ``batch`` with the reward manager ``config`` describes: ``(reward_tensor,
        reward_extra_info)`` (call ``.remote(batch, config, tokenizer)``)."""
        from verl.trainer.ppo.reward import compute_reward, load_reward_manager

        return compute_reward(batch, load_reward_manager(config, tokenizer, num_examine=0))

    def _submit(self, gen_batch: DataProto) -> Any:
        gen_batch = gen_batch.repeat(repeat_times=self.ppo_config.rollout.n, interleave=True)
        return self.generator.generate_sequences.remote(gen_batch)

    async def _await_generation(self, submitted: Any) -> DataProto:
        """The generator's answer to :meth:`_submit`, bounded; its death names the generator (node, pid, call)."""
        if not isinstance(submitted, ray.ObjectRef):  # a recipe's _submit returning its own awaitable
            return await submitted
        return await await_from(
            submitted,
            role=GENERATOR,
            method="generate_sequences",
            actor=self.generator,
            timeout_s=self.generate_timeout_s,
            doing=f"generating the batch of step {self._generation_step}",
        )

    def _schedule_generation(self, step: int) -> None:
        """Start generating the batch of ``step`` in the background under the current weights."""
        if self._continuous_iterator is None:
            self._continuous_iterator = self._create_continuous_iterator()
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="one-step-off")
        self._generation_step = step
        coroutine = self._async_gen_next_batch(self._continuous_iterator)
        future = self._executor.submit(asyncio.run, coroutine)
        self._pending = _Pending(future, int(self.weight_version), step)

    def _wait(self, future: concurrent.futures.Future, what: str) -> Any:
        try:
            return future.result(timeout=self.generate_timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"one-step-off: {what} did not finish within {self.generate_timeout_s:g}s") from None

    def _wait_ray(self, ref: Any, what: str) -> Any:
        try:
            return ray.get(ref, timeout=self.generate_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"one-step-off: {what} did not finish within {self.generate_timeout_s:g}s") from None

    # ------------------------------------------------------------------ the pipeline

    def _iter_batch_dicts(self):
        """One item per step: the batch itself comes from the background generation (``_fit_generate``)."""
        self._continuous_iterator = self._create_continuous_iterator()
        while True:
            yield NEXT_GENERATED

    def _fit_get_batch(self, batch_dict: Any) -> DataProto | None:
        if batch_dict is NEXT_GENERATED:
            return None  # the prompts arrive with their generation
        return super()._fit_get_batch(batch_dict)

    def _publish_weights(self, metrics: dict) -> None:
        """Push the actor's weights if it changed since the last push (only while the rollout is idle)."""
        if self._unpublished_updates:
            self._push_weights(metrics)
            self._unpublished_updates = 0

    def _fit_generate(self, batch: DataProto | None = None) -> DataProto:
        """Batch k from the background generation (started now for the first step), then start k+1."""
        if batch is not None:
            raise ValueError("OneStepOffRayTrainer._fit_generate: the batch comes from the background generation")
        with marked_timer("gen", self.timing_raw):
            if self._pending is None:
                self._schedule_generation(self.global_steps)
            pending, self._pending = self._pending, None
            result = self._wait(pending.future, f"generation of step {self.global_steps}")
            if result is None:
                raise StopTraining(f"the data ran out before step {self.global_steps}")
            metrics, timing_raw, self.epoch, batch, future_reward = result
            if future_reward is not None:
                raise NotImplementedError(
                    "_async_gen_next_batch returned a future_reward: this trainer scores in its reward stage "
                    "(_fit_compute_reward); return None there"
                )
            self.generation_versions[self.global_steps] = pending.version
            published: dict[str, float] = {}
            self._publish_weights(published)
            if self.global_steps < self.total_training_steps:
                self._schedule_generation(self.global_steps + 1)
        self.metrics.update(metrics)
        self.timing_raw.update(timing_raw)
        self.timing_raw["publish_weights"] = published.get("timing_s/update_weights", 0.0)
        self.metrics.update(
            {
                "one_step_off/generation_version": float(pending.version),
                "one_step_off/policy_lag": float(self.global_steps - 1 - pending.version),
            }
        )
        return batch

    def _fit_update_weights(self) -> None:
        """Weights are published at the start of the next generation, when the rollout is idle; with no
        generation pending (the last step) the rollout is idle now, so they are published at once."""
        if not self._actor_warmed_up():
            return
        self._unpublished_updates += 1
        if self._pending is None:
            self._publish_weights(self.metrics)

    def _update_rollout_weights(self, metrics: dict) -> None:
        """``checkpoint_manager.update_weights()``: let the generation in flight finish under its weights, then
        publish."""
        if self._pending is not None:
            concurrent.futures.wait([self._pending.future], timeout=self.generate_timeout_s)
        self._push_weights(metrics)
        self._unpublished_updates = 0

    def _generate_validation(self, gen_batch: DataProto) -> DataProto:
        if self._pending is not None:
            # the pending batch keeps the version it started under; validation sees the newest weights
            concurrent.futures.wait([self._pending.future], timeout=self.generate_timeout_s)
        self._publish_weights({})
        return self._wait_ray(self.generator.generate_sequences.remote(gen_batch), "validation generation")

    def _fit_finish(self, error: BaseException | None) -> None:
        super()._fit_finish(error)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ------------------------------------------------------------------ checkpoints

    def _pending_result(self) -> tuple | None:
        if self._pending is None:
            return None
        return self._wait(self._pending.future, f"generation of step {self._pending.step} (for the checkpoint)")

    def _save_checkpoint(self) -> None:
        """Save the trainer state plus the batch being generated for the next step (waiting for it)."""
        result = self._pending_result()
        if result is not None:
            folder = self.checkpointer.step_dir(self.global_steps) / PENDING_DIR
            folder.mkdir(parents=True, exist_ok=True)
            result[3].save_to_disk(folder / _PENDING_FILES[0])
        super()._save_checkpoint()

    def _checkpoint_state(self) -> dict[str, Any]:
        state = super()._checkpoint_state()
        # the saved actor includes the not yet published update: it is that version
        state["weight_version"] = self.weight_version + self._unpublished_updates
        result = self._pending_result()
        state["pending_version"] = None if result is None else self._pending.version
        if result is not None:
            metrics, timing_raw, epoch, _batch, _ = result
            state["pending"] = {"metrics": metrics, "timing_raw": timing_raw, "epoch": epoch}
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
        batch = DataProto.load_from_disk(folder / _PENDING_FILES[0])
        saved = state.get("pending") or {}
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(
            (dict(saved.get("metrics", {})), dict(saved.get("timing_raw", {})), int(saved.get("epoch", 0)), batch, None)
        )
        self._pending = _Pending(future, int(state["pending_version"]), self.global_steps + 1)

    def _resume_rollout_weights(self, version: int) -> None:
        """Push the restored actor to the idle rollout as ``version`` (not deferred like a step's update)."""
        self.weight_version = version - 1
        self._unpublished_updates = 0
        self._push_weights({})
