"""Old log-probs under the weights that generated each sample (the behaviour policy), not the current actor's.

With ``trigger_parameter_sync_step = T > 1`` the trainer updates the actor T times per sync period while every
sample of the period was generated with the weights pushed at the period's start; with ``staleness_threshold > 0``
some samples come from earlier versions still. The PPO ratio must be taken against the policy that generated the
sample, so the trainer keeps a CPU copy of the actor (each rank its own shard) of every version it pushes while a
sample could still carry it, and computes a batch's old log-probs once per version its rows carry. Rows of the
version the actor still holds (nothing updated since the push) use the actor as it is: with ``T = 1`` and no
staleness no copy is ever made. Nor is one in bypass mode, where the rollout's own log-probs are the old ones and
no pass runs: a copy would cost two worker calls per sync and a model's worth of CPU memory per kept version.

A row's version is ``param_version_end``: the newest weights that produced any of its tokens (a partial rollout
resumed after a sync spans two versions; its last tokens, like upstream's period-start weights, come from the
newest).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["CURRENT_WEIGHTS_KEY", "PolicySnapshots", "row_versions"]

CURRENT_WEIGHTS_KEY = -1  # the CPU copy of the actor's own weights while another version is loaded


def row_versions(batch: DataProto, default: int) -> np.ndarray:
    """Each row's generating weight version (``param_version_end``; ``default`` where the batch has none)."""
    versions = batch.non_tensor_batch.get("param_version_end")
    if versions is None:
        return np.full(len(batch), int(default), dtype=np.int64)
    return np.asarray([int(v) for v in versions], dtype=np.int64)


class PolicySnapshots:
    """The versions the actor worker group keeps on CPU and the per-version old-log-prob pass.

    ``worker_group`` has verl's ``save_model_to_cpu(n)`` / ``restore_model_from_cpu(n)`` / ``clear_cpu_model(n)``;
    ``old_log_prob_pass`` is False when the trainer never recomputes old log-probs (bypass mode): nothing is kept.
    A sample is consumed at most ``ceil(staleness_threshold) + 1`` syncs after the version it carries was pushed
    (leftovers at a sync are at most ``s`` periods' worth of groups, and the queue hands them out first), so older
    copies are dropped at each push.
    """

    def __init__(
        self,
        worker_group: Any,
        trigger_parameter_sync_step: int,
        staleness_threshold: float,
        *,
        old_log_prob_pass: bool = True,
    ) -> None:
        self.worker_group = worker_group
        off_policy = int(trigger_parameter_sync_step) > 1 or float(staleness_threshold) > 0
        self.enabled = off_policy and bool(old_log_prob_pass)
        self.versions_kept = math.ceil(float(staleness_threshold)) + 2
        self.saved: list[int] = []

    def pushed(self, version: int) -> None:
        """The actor's weights were just published as ``version``: keep a copy, drop those no sample can carry."""
        if not self.enabled:
            return
        self.worker_group.save_model_to_cpu(int(version))
        self.saved = sorted(set(self.saved) | {int(version)})
        while len(self.saved) > self.versions_kept:
            self.worker_group.clear_cpu_model(self.saved.pop(0))

    def compute(
        self,
        batch: DataProto,
        versions: np.ndarray,
        current_version: int | None,
        compute_log_prob: Callable[[DataProto], tuple[DataProto, float | None]],
    ) -> tuple[DataProto, float | None]:
        """Old log-probs (and entropies) of ``batch``, each row under the weights of its version.

        ``current_version`` is the version the actor holds right now (None when it was updated since its last
        push); ``compute_log_prob`` is one pass under whatever weights are loaded."""
        needed = sorted(set(int(v) for v in versions))
        if needed == [current_version]:
            return compute_log_prob(batch)
        missing = [v for v in needed if v != current_version and v not in self.saved]
        if missing:
            raise RuntimeError(
                f"old log-probs: rows carry weight version(s) {missing} of which no CPU copy is kept (kept: "
                f"{self.saved}, actor at {current_version}); the staleness bound async_training.staleness_threshold "
                "let a sample outlive its weights"
            )
        merged: DataProto | None = None
        mfu: float | None = None
        order = ([current_version] if current_version in needed else []) + [v for v in needed if v != current_version]
        swapped = False
        try:
            for version in order:
                if version != current_version:
                    if not swapped:
                        self.worker_group.save_model_to_cpu(CURRENT_WEIGHTS_KEY)
                        swapped = True
                    self.worker_group.restore_model_from_cpu(version)
                output, mfu = compute_log_prob(batch)
                merged = output if merged is None else _take_rows(merged, output, versions == version)
        finally:
            if swapped:
                self.worker_group.restore_model_from_cpu(CURRENT_WEIGHTS_KEY)
                self.worker_group.clear_cpu_model(CURRENT_WEIGHTS_KEY)
        assert merged is not None
        return merged, mfu


def _take_rows(into: DataProto, source: DataProto, rows: np.ndarray) -> DataProto:
    """``into`` with the tensors of ``rows`` replaced by ``source``'s."""
    mask = torch.as_tensor(rows, dtype=torch.bool)
    assert into.batch is not None and source.batch is not None
    for key in into.batch.keys():
        into.batch[key][mask] = source.batch[key][mask]
    return into
