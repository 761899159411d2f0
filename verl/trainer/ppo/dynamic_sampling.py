"""Dynamic sampling (DAPO): keep generating until the step's batch is full of prompt groups that carry signal.

A GRPO-style group whose ``rollout.n`` responses all score the same has zero advantage everywhere, so it adds
nothing to the update but its cost. With ``algorithm.filter_groups.enable`` each generation batch
(``data.gen_batch_size`` prompts, default ``data.train_batch_size``) is scored, groups whose
``filter_groups.metric`` has zero spread are dropped (a group of one response is kept), and further generation
batches are drawn until ``data.train_batch_size`` prompts are kept; at most ``filter_groups.max_num_gen_batches``
batches per step (0: no limit), after which the step fails naming the key, as verl's DAPO recipe does.

The metric is a per-response value: ``seq_reward`` (also ``reward`` / ``score``) is the summed
``token_level_scores``, ``seq_final_reward`` the summed ``token_level_rewards`` (scores after an in-reward KL
penalty), and any other name is a non-tensor column of the batch, typically a reward-extra key such as ``acc``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from verl.protocol import DataProto

__all__ = ["GroupFilter", "group_metric_values", "keep_first_groups"]

_SCORE_METRICS = ("seq_reward", "reward", "score")
_PER_BATCH_META = ("global_token_num",)


def group_metric_values(batch: DataProto, metric: str) -> np.ndarray:
    """One value per response of ``batch`` for ``filter_groups.metric``; the culprit key is named when absent."""
    if metric in _SCORE_METRICS or metric == "seq_final_reward":
        tensors = batch.batch
        # before an in-reward KL penalty is applied the final reward is the score itself
        final = metric == "seq_final_reward" and "token_level_rewards" in tensors.keys()
        source = "token_level_rewards" if final else "token_level_scores"
        if source not in tensors.keys():
            raise KeyError(f"algorithm.filter_groups.metric={metric!r} needs '{source}'; score the batch first")
        return tensors[source].sum(dim=-1).float().cpu().numpy()
    if metric not in batch.non_tensor_batch:
        raise KeyError(
            f"algorithm.filter_groups.metric={metric!r} is neither seq_reward, seq_final_reward nor a column of the "
            f"batch (columns: {sorted(batch.non_tensor_batch)}); name a reward-extra key the reward function returns"
        )
    return np.asarray(batch.non_tensor_batch[metric], dtype=np.float64)


def keep_first_groups(batch: DataProto, max_groups: int) -> DataProto:
    """The rows of the first ``max_groups`` prompt groups (by first appearance of their ``uid``): the step's batch
    is cut at group boundaries even after rows were reordered for balance."""
    uids = batch.non_tensor_batch["uid"]
    first = list(dict.fromkeys(uids.tolist()))[:max_groups]
    wanted = set(first)
    return batch[[i for i, uid in enumerate(uids) if uid in wanted]]


class GroupFilter:
    """Accumulates the groups with signal of successive generation batches until a step's batch is full.

    Usage per step: ``add(scored_batch)`` for each generation batch until ``full``; then ``take()`` returns the
    step's batch (``train_batch_size`` groups) and the metrics of the step's sampling.
    """

    def __init__(self, metric: str, train_batch_size: int, max_num_gen_batches: int) -> None:
        self.metric = metric
        self.train_batch_size = int(train_batch_size)
        self.max_num_gen_batches = int(max_num_gen_batches)
        self.reset()

    @classmethod
    def from_config(cls, ppo_config: Any) -> GroupFilter:
        settings = ppo_config.algorithm.filter_groups
        return cls(settings.metric or "seq_reward", ppo_config.data.train_batch_size, settings.max_num_gen_batches)

    def reset(self) -> None:
        self.parts: list[DataProto] = []
        self.kept_groups = 0
        self.seen_groups = 0
        self.num_gen_batches = 0

    @property
    def full(self) -> bool:
        return self.kept_groups >= self.train_batch_size

    def add(self, batch: DataProto) -> None:
        """Keep the groups of ``batch`` whose metric varies (or that hold one response)."""
        self.num_gen_batches += 1
        values_by_uid: dict[Any, list[float]] = defaultdict(list)
        for uid, value in zip(batch.non_tensor_batch["uid"], group_metric_values(batch, self.metric)):
            values_by_uid[uid].append(float(value))
        kept = {uid for uid, values in values_by_uid.items() if len(values) == 1 or np.std(values) > 0}
        self.seen_groups += len(values_by_uid)
        self.kept_groups += len(kept)
        rows = [i for i, uid in enumerate(batch.non_tensor_batch["uid"]) if uid in kept]
        if rows:
            part = batch[rows]
            # per-row meta_info lists describe the whole generation batch; the step's batch recomputes them
            part.meta_info = {key: value for key, value in part.meta_info.items() if key not in _PER_BATCH_META}
            self.parts.append(part)

    def check_budget(self) -> None:
        """Raise when the step may draw no further generation batch although its batch is not full."""
        if self.max_num_gen_batches > 0 and self.num_gen_batches >= self.max_num_gen_batches:
            raise RuntimeError(
                f"dynamic sampling kept {self.kept_groups} of the {self.train_batch_size} prompt groups a step needs "
                f"after {self.num_gen_batches} generation batches (algorithm.filter_groups.max_num_gen_batches="
                f"{self.max_num_gen_batches}; {self.seen_groups - self.kept_groups} groups had no reward spread in "
                f"'{self.metric}'): the data may be too hard or too easy; raise the limit or set it to 0 (no limit)"
            )

    def take(self) -> tuple[DataProto, dict[str, float]]:
        """The step's batch (exactly ``train_batch_size`` groups) and its sampling metrics; resets the filter."""
        batch = keep_first_groups(DataProto.concat(self.parts), self.train_batch_size)
        metrics = {
            "train/num_gen_batches": float(self.num_gen_batches),
            "train/kept_group_ratio": self.kept_groups / max(1, self.seen_groups),
        }
        self.reset()
        return batch, metrics
