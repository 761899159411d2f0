"""Advantages for agent loops whose samples produce several outputs (turns or sub-sessions).

A batch row is keyed ``{uid}_{session_id}_{index}``: one prompt ``uid`` may run several sessions, and a
session yields outputs ``index = 0, 1, ...`` of which the last carries the outcome. For GRPO the group
statistics must count each session once, so only the final output of every session takes part in the
estimator and its (scalar) advantage is then given to every output of that session. Other estimators
see the batch unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.ppo.advantage import AdvantageEstimator, estimator_name
from verl.trainer.ppo.core_algos import compute_advantage, compute_response_mask

__all__ = ["compute_advantage", "compute_advantage_for_multi_trajectories"]


def _session_rows(batch_keys: Sequence[str]) -> tuple[list[int], list[int]]:
    """(row of each session's final output, for every row the position of its session in that list)."""
    final: dict[str, tuple[int, int]] = {}  # session -> (output index, row)
    sessions = []
    for row, key in enumerate(batch_keys):
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"batch key {key!r} (row {row}) is not '{{uid}}_{{session_id}}_{{index}}'")
        session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        sessions.append(session)
        if session not in final or final[session][0] < index:
            final[session] = (index, row)
    order = {session: position for position, session in enumerate(final)}
    return [row for _, row in final.values()], [order[session] for session in sessions]


def compute_advantage_for_multi_trajectories(
    data: DataProto,
    batch_keys: Sequence[str],
    adv_estimator: str | AdvantageEstimator,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """Store ``advantages`` and ``returns`` in ``data`` (and return it); ``batch_keys`` names every row.

    GRPO runs on each session's final output only and broadcasts that output's advantage over all
    response tokens of the session's outputs; any other estimator runs on the whole batch as usual.
    """
    kwargs = dict(
        gamma=gamma, lam=lam, num_repeat=num_repeat, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config
    )
    if estimator_name(adv_estimator) != AdvantageEstimator.GRPO.value:
        return compute_advantage(data, adv_estimator=adv_estimator, **kwargs)
    if len(batch_keys) != len(data):
        raise ValueError(f"batch_keys has {len(batch_keys)} entries for a batch of {len(data)} rows")
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = compute_response_mask(data)
    final_rows, session_of_row = _session_rows(batch_keys)
    finals = compute_advantage(data.select_idxs(final_rows), adv_estimator=adv_estimator, **kwargs)
    # An outcome advantage is the same on every response token: read it at the first one.
    first_token = finals.batch["response_mask"].argmax(dim=1)
    per_session = finals.batch["advantages"][torch.arange(len(final_rows)), first_token]
    advantages = per_session[session_of_row].unsqueeze(-1) * data.batch["response_mask"]
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages
    return data
