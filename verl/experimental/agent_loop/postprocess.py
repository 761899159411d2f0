"""Lay finished trajectories out as the trainer's batch (verl's layout).

Shapes: prompts ``[N, P]`` left padded to ``rollout.prompt_length``; responses ``[N, R]`` right padded to
``rollout.response_length``; ``input_ids = prompts ++ responses``. ``attention_mask`` is 1 on every real token,
inserted tool/user tokens included (the model saw them); ``response_mask`` is 1 only on model tokens, so the loss
and the advantages skip what the model did not write. ``position_ids`` count real tokens from 0, so left padding
does not shift them. Widths are fixed by the config so that the shards of different workers concatenate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, pad_2d_list_to_length

__all__ = ["NUM_TURNS_KEY", "align_parts", "assemble_batch", "score_tensor"]

NUM_TURNS_KEY = "__num_turns__"


def _check_prompt_lengths(outputs: Sequence[AgentLoopOutput], prompt_length: int) -> None:
    for i, out in enumerate(outputs):
        if len(out.prompt_ids) > prompt_length:
            raise ValueError(
                f"agent loop sample {i}: prompt has {len(out.prompt_ids)} tokens, more than rollout.prompt_length="
                f"{prompt_length}"
            )


def score_tensor(scores: Sequence[float], response_lengths: Sequence[int], response_length: int) -> torch.Tensor:
    """``[N, R]`` zeros with each score on its sample's last response token (outcome reward)."""
    tensor = torch.zeros(len(scores), response_length, dtype=torch.float32)
    for i, (score, length) in enumerate(zip(scores, response_lengths)):
        tensor[i, max(min(length, response_length) - 1, 0)] = float(score)
    return tensor


def _object_column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def assemble_batch(
    outputs: Sequence[AgentLoopOutput],
    *,
    prompt_length: int,
    response_length: int,
    pad_token_id: int,
    non_tensors: dict[str, np.ndarray] | None = None,
    meta_info: dict[str, Any] | None = None,
) -> DataProto:
    """One DataProto row per output, in order; ``non_tensors`` (the input rows' columns) are carried over.

    Adds ``rollout_log_probs`` when every output has log-probs, ``rm_scores`` when every output has a
    ``reward_score`` (and raises when only some do), and the non-tensor ``__num_turns__`` plus one column per
    ``extra_fields`` key (None where a sample lacks it).
    """
    if not outputs:
        raise ValueError("assemble_batch needs at least one agent loop output")
    _check_prompt_lengths(outputs, prompt_length)
    responses = [out.response_ids[:response_length] for out in outputs]
    lengths = [len(r) for r in responses]
    prompts = pad_2d_list_to_length([out.prompt_ids for out in outputs], pad_token_id, prompt_length, left_pad=True)
    prompt_mask = pad_2d_list_to_length([[1] * len(out.prompt_ids) for out in outputs], 0, prompt_length,
                                        left_pad=True)
    response_tensor = pad_2d_list_to_length(responses, pad_token_id, response_length)
    response_mask = pad_2d_list_to_length([out.response_mask[:response_length] for out in outputs], 0,
                                          response_length)
    response_attention = pad_2d_list_to_length([[1] * n for n in lengths], 0, response_length)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=-1)
    tensors: dict[str, torch.Tensor] = {
        "prompts": prompts,
        "responses": response_tensor,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, response_tensor], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
    }
    if all(out.response_logprobs is not None for out in outputs):
        rows = [[float(x) for x in out.response_logprobs[:response_length]] for out in outputs]
        log_probs = torch.zeros(len(outputs), response_length, dtype=torch.float32)
        for i, row in enumerate(rows):
            log_probs[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
        tensors["rollout_log_probs"] = log_probs
    scored = [out.reward_score is not None for out in outputs]
    if all(scored):
        tensors["rm_scores"] = score_tensor([out.reward_score for out in outputs], lengths, response_length)
    elif any(scored):
        missing = [i for i, s in enumerate(scored) if not s]
        raise ValueError(
            f"agent loop outputs {missing[:8]} have no reward_score while others have one; a batch is scored "
            "either entirely in the loop or not at all"
        )

    columns: dict[str, np.ndarray] = {}
    for key, value in (non_tensors or {}).items():
        if len(value) != len(outputs):
            raise ValueError(f"non-tensor column {key!r} has {len(value)} rows for {len(outputs)} outputs")
        columns[key] = value
    columns[NUM_TURNS_KEY] = np.array([int(out.num_turns) for out in outputs], dtype=np.int32)
    extra_keys: list[str] = []
    for out in outputs:
        extra_keys.extend(k for k in out.extra_fields if k not in extra_keys)
    for key in extra_keys:
        columns[key] = _object_column([out.extra_fields.get(key) for out in outputs])
    return DataProto.from_dict(tensors=tensors, non_tensors=columns, meta_info=dict(meta_info or {}))


def align_parts(parts: Sequence[DataProto]) -> list[DataProto]:
    """Make worker shards concatenable: shards with different loop mixes report different ``extra_fields``.

    A non-tensor column missing from a shard is filled with None; ``rollout_log_probs`` is dropped unless every
    shard has it (the same all-or-none rule as within a shard); ``rm_scores`` in some shards only is an error.
    """
    parts = list(parts)
    columns: list[str] = []
    for part in parts:
        columns.extend(k for k in part.non_tensor_batch if k not in columns)
    tensor_sets = [set(part.batch.keys()) if part.batch is not None else set() for part in parts]
    everywhere = set.intersection(*tensor_sets) if tensor_sets else set()
    partial = set.union(*tensor_sets) - everywhere if tensor_sets else set()
    if "rm_scores" in partial:
        raise ValueError("some agent loop workers returned rm_scores and others did not; a batch is scored either "
                         "entirely in the loop or not at all")
    aligned = []
    for part in parts:
        non_tensors = dict(part.non_tensor_batch)
        for key in columns:
            if key not in non_tensors:
                non_tensors[key] = _object_column([None] * len(part))
        tensors = {key: part.batch[key] for key in part.batch.keys() if key not in partial}
        aligned.append(DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(part.meta_info)))
    return aligned
