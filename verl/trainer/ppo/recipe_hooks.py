"""The helpers verl's ``RayPPOTrainer`` hands to subclasses that write their own ``fit()`` (DAPO and friends).

Our own ``fit_step`` does not need them, but a recipe's loop calls them by name: dumping generations in the
background, logging validation samples, grouping validation metrics, switching worker profilers around a step,
the data-parallel size of a group, and scoring with a colocated reward model. They share ``RayPPOTrainer``'s
attributes (``config``, ``tokenizer``, ``global_steps``, the worker groups), so they live in this mixin.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from verl.protocol import DataProto
from verl.trainer.ppo.generation_dump import decode_samples, pick_samples
from verl.trainer.ppo.validation_metrics import flatten_validation_metrics, process_validation_metrics

if TYPE_CHECKING:
    from verl.trainer.config.ppo_config import PPOConfig

__all__ = ["RecipeHooks"]


class RecipeHooks:
    """Methods of verl's trainer template that a subclass's ``fit()`` may call (mixed into ``RayPPOTrainer``)."""

    _dump_executor: ThreadPoolExecutor
    _dump_futures: list[Future]
    # Set by RayPPOTrainer, which this class is mixed into (declared here for the type checker only).
    global_steps: int
    ppo_config: PPOConfig
    tokenizer: Any
    validation_generations_logger: Any
    use_rm: bool
    rm_wg: Any
    reward_loop_manager: Any

    # ------------------------------------------------------------------ generations on disk
    def _init_dump_executor(self) -> None:
        """(Re)create the one background thread that writes generation dumps, so a step never waits on a disk."""
        self._dump_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dump-generations")
        self._dump_futures = []

    def _shutdown_dump_executor(self) -> None:
        """Wait for every pending dump (raising the first failure) and stop the thread."""
        pending, self._dump_futures = self._dump_futures, []
        try:
            for future in pending:
                future.result()
        finally:
            self._dump_executor.shutdown(wait=True)

    @staticmethod
    def _write_generations(
        inputs: Sequence[str],
        outputs: Sequence[str],
        gts: Sequence[Any],
        scores: Sequence[float],
        reward_extra_infos_dict: dict[str, Sequence[Any]],
        dump_path: str,
        global_steps: int,
    ) -> str:
        """``<dump_path>/<global_steps>.jsonl``: one line per sample with input, output, gts, score, step and every
        per-sample reward-extra column; returns the file's path."""
        os.makedirs(dump_path, exist_ok=True)
        path = os.path.join(dump_path, f"{global_steps}.jsonl")
        count = len(inputs)
        columns: dict[str, Sequence[Any]] = {"input": inputs, "output": outputs, "gts": gts, "score": scores}
        columns.update({key: values for key, values in reward_extra_infos_dict.items() if len(values) == count})
        with open(path, "w", encoding="utf-8") as out:
            for row in range(count):
                record = {key: values[row] for key, values in columns.items()}
                record["step"] = global_steps
                out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        return path

    def _dump_generations(
        self,
        inputs: Sequence[str],
        outputs: Sequence[str],
        gts: Sequence[Any],
        scores: Sequence[float],
        reward_extra_infos_dict: dict[str, Sequence[Any]],
        dump_path: str,
    ) -> None:
        """Queue :meth:`_write_generations` for this step; a dump that already failed raises here."""
        if getattr(self, "_dump_executor", None) is None or self._dump_executor._shutdown:
            self._init_dump_executor()
        args = (inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, self.global_steps)
        self._dump_futures.append(self._dump_executor.submit(self._write_generations, *args))
        pending = []
        for future in self._dump_futures:
            if future.done():
                future.result()
            else:
                pending.append(future)
        self._dump_futures = pending

    def _log_rollout_data(
        self, batch: DataProto, reward_extra_infos_dict: dict, timing_raw: dict, rollout_data_dir: str
    ) -> None:
        """Dump the step's scored samples (prompt and response text, ground truth, score, extra info)."""
        from verl.trainer.ppo.ray_trainer import marked_timer

        with marked_timer("dump_rollout_generations", timing_raw):
            inputs, outputs = decode_samples(self.tokenizer, batch)
            scores = batch.batch["token_level_scores"].sum(-1).cpu().tolist()
            reward_models: Any = batch.non_tensor_batch.get("reward_model")  # an object array, or a list of None
            if reward_models is None:
                reward_models = [None] * len(batch)
            gts = [None if rm is None else dict(rm).get("ground_truth") for rm in reward_models]
            extra = {key: (np.asarray(v).tolist()) for key, v in reward_extra_infos_dict.items()}
            if "request_id" in batch.non_tensor_batch:
                extra.setdefault("request_id", batch.non_tensor_batch["request_id"].tolist())
            self._dump_generations(inputs, outputs, gts, scores, extra, rollout_data_dir)

    # ------------------------------------------------------------------ validation
    def _maybe_log_val_generations(self, inputs: list[str], outputs: list[str], scores: list[float]) -> None:
        """``trainer.log_val_generations`` samples (the same prompts every time) to every ``trainer.logger``."""
        count = int(self.ppo_config.trainer.log_val_generations)
        if count <= 0:
            return
        samples = pick_samples(inputs, outputs, scores, count)
        self.validation_generations_logger.log(list(self.ppo_config.trainer.logger), samples, self.global_steps)

    def _val_metrics_update(
        self,
        data_sources: Sequence[str] | np.ndarray,
        sample_uids: Sequence[str],
        reward_extra_infos_dict: Mapping[str, Sequence[Any]],
        sample_turns: Sequence[np.ndarray],
    ) -> dict[str, float]:
        """verl's flat validation metrics: ``val-core/<source>/<var>/<metric>`` for the mean/maj/best@n of the
        core variable (``acc`` when reported, else ``reward``) at the largest n, ``val-aux/...`` for the rest."""
        nested = process_validation_metrics(list(data_sources), list(sample_uids), reward_extra_infos_dict)
        metrics = flatten_validation_metrics(nested)
        if len(sample_turns) > 0:
            turns = np.concatenate([np.asarray(t) for t in sample_turns])
            metrics.update(
                {
                    "val-aux/num_turns/min": float(turns.min()),
                    "val-aux/num_turns/max": float(turns.max()),
                    "val-aux/num_turns/mean": float(turns.mean()),
                }
            )
        return metrics

    def _merge_validation_results(self, result_a: dict | None, result_b: dict | None) -> dict[str, float]:
        """Metrics of two partial validation results (``data_sources``, ``sample_uids``, ``sample_turns``,
        ``reward_extra_infos_dict`` each), e.g. from two validators; ``{}`` when neither has samples."""
        parts = [r for r in (result_a, result_b) if r is not None and len(r.get("data_sources") or []) > 0]
        if not parts:
            return {}
        sources = np.concatenate([np.concatenate(list(r["data_sources"]), axis=0) for r in parts], axis=0)
        uids = [uid for r in parts for uid in r["sample_uids"]]
        turns = [t for r in parts for t in r.get("sample_turns", [])]
        keys = dict.fromkeys(key for r in parts for key in r.get("reward_extra_infos_dict", {}))
        infos = {key: [v for r in parts for v in r.get("reward_extra_infos_dict", {}).get(key, [])] for key in keys}
        return self._val_metrics_update(sources, uids, infos, turns)

    # ------------------------------------------------------------------ profiling
    def _profiled_groups(self) -> list[Any]:
        """Each distinct trainer-side worker group once (the colocated reference is the actor group itself)."""
        groups, seen = [], set()
        for name in ("actor_rollout_wg", "ref_policy_wg", "critic_wg"):
            group = getattr(self, name, None)
            if group is not None and id(group) not in seen:
                seen.add(id(group))
                groups.append(group)
        return groups

    def _start_profiling(self, do_profile: bool) -> None:
        """Start the worker profilers for this step (``global_profiler.steps``); nothing when ``do_profile`` is
        false. Worker groups whose class has no profiler are named in the error."""
        if not do_profile:
            return
        for group in self._profiled_groups():
            self._profiler_method(group, "start_profile")(profile_step=self.global_steps)

    def _stop_profiling(self, do_profile: bool, run_command: bool = False) -> None:
        """Stop the worker profilers (``run_command``: also the finish command, on the last profiled step)."""
        if not do_profile:
            return
        for group in self._profiled_groups():
            self._profiler_method(group, "stop_profile")(run_command=run_command)

    def _reset_profile_steps(self) -> None:
        """Profile flags of the step window: ``prev``/``curr``/``next_step_profile`` (``global_profiler.steps``)."""
        self.prev_step_profile = False
        self.curr_step_profile = self._is_profiled_step(self.global_steps + 1)
        self.next_step_profile = False

    def _is_profiled_step(self, step: int) -> bool:
        steps = self.ppo_config.global_profiler.get("steps")
        if not steps:
            return False
        return step in steps

    def _fit_start_profile(self) -> None:
        """Start profiling at the current step when ``global_profiler.steps`` lists it (continuous windows:
        only at the window's first step, ``global_profiler.profile_continuous_steps``)."""
        continuous = bool(self.ppo_config.global_profiler.get("profile_continuous_steps"))
        self.curr_step_profile = self._is_profiled_step(self.global_steps)
        self._start_profiling(self.curr_step_profile and not (continuous and self.prev_step_profile))

    def _fit_stop_profile(self) -> None:
        """Stop profiling after the current step (continuous windows: only at the window's last step); the finish
        command runs on the last profiled step."""
        continuous = bool(self.ppo_config.global_profiler.get("profile_continuous_steps"))
        steps = self.ppo_config.global_profiler.get("steps") or []
        self.next_step_profile = self._is_profiled_step(self.global_steps + 1)
        last = bool(steps) and self.global_steps == max(steps)
        stop = self.curr_step_profile and not (continuous and self.next_step_profile)
        self._stop_profiling(stop, run_command=self.curr_step_profile and last)
        self.prev_step_profile, self.curr_step_profile = self.curr_step_profile, self.next_step_profile

    @staticmethod
    def _profiler_method(group: Any, name: str) -> Any:
        method = getattr(group, name, None)
        if method is None:
            raise NotImplementedError(
                f"{name}: worker group {getattr(group, 'name_prefix', type(group).__name__)!r} has no profiler; this "
                "build's workers are not profiled by step (global_profiler is inert). Mix "
                "verl.utils.profiler.DistProfilerExtension into a worker class to profile it"
            )
        return method

    # ------------------------------------------------------------------ worker groups
    def _get_dp_size(self, worker_group: Any, role: str) -> int:
        """Data-parallel ranks of ``worker_group`` for ``role``: every rank holds whole sequences and a whole
        model replica's shard group here (no tensor/pipeline/sequence parallelism), so it is the group's size."""
        return int(worker_group.world_size)

    def _compute_reward_colocate(self, batch: DataProto) -> DataProto:
        """``rm_scores`` (and the reward-extra columns) of ``batch``: from the reward-model worker group when one
        is configured, else from the trainer's reward manager (``reward_loop_manager``)."""
        if self.use_rm:
            return self.rm_wg.compute_rm_score(batch)
        if self.reward_loop_manager is None:
            raise ValueError("_compute_reward_colocate: no reward model and no reward function is configured")
        return self.reward_loop_manager.compute_rm_score(batch)
