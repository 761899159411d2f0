"""Lay finished trajectories out as the trainer's batch (verl's layout).

Shapes: prompts ``[N, P]`` left padded to ``rollout.prompt_length``; responses ``[N, R]`` right padded to
``rollout.response_length``; ``input_ids = prompts ++ responses``. ``attention_mask`` is 1 on every real token,
inserted tool/user tokens included (the model saw them); ``response_mask`` is 1 only on model tokens, so the loss
and the advantages skip what the model did not write. ``position_ids`` count real tokens from 0, so left padding
does not shift them. Widths are fixed by the config so that the shards of different workers concatenate.

Two steps, as verl's worker does them: :func:`pad_trajectory` pads one trajectory as soon as its loop finishes,
:func:`stack_trajectories` stacks the padded ones of a shard into one DataProto. :func:`assemble_batch` does both.
Padded rows are one-row lists (``[[...]]``) until they are stacked: a shard pads hundreds of short rows, and one
tensor per batch column costs far less than one per row; ``[1, W]`` tensors (verl's form) are stacked as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, _InternalAgentLoopOutput
from verl.protocol import DataProto

__all__ = [
    "DEFAULT_EXTRA_KEYS",
    "NUM_TURNS_KEY",
    "align_parts",
    "assemble_batch",
    "pad_ids",
    "pad_trajectory",
    "pad_token_id_of",
    "sample_metrics",
    "score_tensor",
    "stack_trajectories",
]

NUM_TURNS_KEY = "__num_turns__"
# extra_fields every batch carries (None where a loop does not set them), so that batches of different loop mixes
# -- worker shards, fully-async groups -- concatenate
DEFAULT_EXTRA_KEYS = ("turn_scores", "tool_rewards", "min_global_steps", "max_global_steps", "num_aborts", "extras")


def pad_token_id_of(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its eos id, else 0."""
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def pad_ids(
    tokens: Sequence[Any], width: int, pad_value: Any, *, left: bool, dtype: torch.dtype = torch.long
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens`` padded to ``[1, width]`` on the left or the right, and the ``[1, width]`` mask of real entries."""
    n = len(tokens)
    if n > width:
        raise ValueError(f"{n} entries do not fit in a width of {width}")
    values = torch.full((1, width), pad_value, dtype=dtype)
    mask = torch.zeros((1, width), dtype=torch.long)
    if n:
        span = slice(width - n, width) if left else slice(0, n)
        values[0, span] = torch.as_tensor(list(tokens), dtype=dtype)
        mask[0, span] = 1
    return values, mask


def _routed_experts(experts: Any, prompt_offset: int, total_length: int) -> torch.Tensor:
    """Routing rows placed at their tokens' absolute positions in the padded sequence (left padding shifts them);
    rows the engine did not record stay zero."""
    if isinstance(experts, np.ndarray):
        table = torch.from_numpy(experts if experts.flags.writeable else experts.copy())
    elif isinstance(experts, torch.Tensor):
        table = experts
    else:
        raise TypeError(f"routed_experts must be a numpy array or a tensor, got {type(experts).__name__}")
    table = table.to(torch.int16)
    aligned = torch.zeros((1, total_length, *table.shape[1:]), dtype=torch.int16)
    end = min(prompt_offset + table.shape[0], total_length)
    if prompt_offset < 0:
        raise ValueError(f"routed_experts: the prompt does not fit (offset {prompt_offset})")
    aligned[0, prompt_offset:end] = table[: end - prompt_offset]
    return aligned


def pad_trajectory(
    output: AgentLoopOutput, *, prompt_length: int, response_length: int, pad_token_id: int, index: int | None = None
) -> dict[str, Any]:
    """One trajectory's padded one-row lists: prompt_ids, response_ids, input_ids, attention_mask, response_mask,
    position_ids, and rollout log-probs when it has them; routed experts as a ``[1, L, ...]`` int16 tensor.
    Responses longer than the width are cut; a prompt longer than ``prompt_length`` is an error naming the sample
    ``index``."""
    where = "agent loop sample" + (f" {index}" if index is not None else "")
    prompt = [int(t) for t in output.prompt_ids]
    if len(prompt) > prompt_length:
        raise ValueError(f"{where}: prompt has {len(prompt)} tokens, more than rollout.prompt_length={prompt_length}")
    response = [int(t) for t in output.response_ids[:response_length]]
    left, right = prompt_length - len(prompt), response_length - len(response)
    real = len(prompt) + len(response)
    prompts = [pad_token_id] * left + prompt
    responses = response + [pad_token_id] * right
    attention = [0] * left + [1] * real + [0] * right
    # positions count real tokens from 0; padding on the right repeats the last position
    positions = [0] * left + list(range(real)) + [max(real - 1, 0)] * right
    mask = [int(m) for m in output.response_mask[: len(response)]] + [0] * right

    padded: dict[str, Any] = {
        "prompt_ids": [prompts],
        "response_ids": [responses],
        "input_ids": [prompts + responses],
        "attention_mask": [attention],
        "response_mask": [mask],
        "position_ids": [positions],
        "response_logprobs": None,
        "routed_experts": None,
    }
    if output.response_logprobs is not None:
        logprobs = [float(x) for x in output.response_logprobs[:response_length]]
        padded["response_logprobs"] = [logprobs + [0.0] * (response_length - len(logprobs))]
    if output.routed_experts is not None:
        padded["routed_experts"] = _routed_experts(output.routed_experts, left, prompt_length + response_length)
    return padded


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


def sample_metrics(item: AgentLoopOutput) -> dict[str, float]:
    """One trajectory's metrics as flat numbers (a loop's ``counters`` dict spread out), plus its turn count."""
    metrics = item.metrics.model_dump() if hasattr(item.metrics, "model_dump") else dict(item.metrics)
    flat = {key: float(value) for key, value in metrics.items() if isinstance(value, int | float)}
    for key, value in (metrics.get("counters") or {}).items():
        flat[key] = float(value)
    flat["num_turns"] = float(item.num_turns)
    return flat


# numpy reads a list of Python numbers about four times faster than torch.tensor does
_NUMPY_DTYPES = {torch.long: np.int64, torch.float32: np.float32}


def _stack(rows: list[Any], dtype: torch.dtype) -> torch.Tensor:
    """One batch column from padded rows: one-row lists become a single tensor, tensors are concatenated."""
    if all(isinstance(row, list) for row in rows):
        lines = [line for row in rows for line in row]
        if dtype in _NUMPY_DTYPES:
            return torch.from_numpy(np.array(lines, dtype=_NUMPY_DTYPES[dtype]))
        return torch.tensor(lines, dtype=dtype)
    return torch.cat([torch.as_tensor(row, dtype=dtype) for row in rows])


def stack_trajectories(
    inputs: Sequence[_InternalAgentLoopOutput], non_tensors: dict[str, np.ndarray] | None = None
) -> DataProto:
    """Stack padded trajectories into one batch; ``non_tensors`` (the input rows' columns) are carried over.

    Adds ``rollout_log_probs`` when every trajectory has log-probs, ``rm_scores`` when every one has a
    ``reward_score`` (and raises when only some do), the non-tensor ``__num_turns__``, one column per reward
    extra-info key, ``multi_modal_inputs`` when any has them, and one column per ``extra_fields`` key (None where a
    trajectory lacks it; :data:`DEFAULT_EXTRA_KEYS` always). ``meta_info["metrics"]`` holds one dict per trajectory.
    """
    if not inputs:
        raise ValueError("stack_trajectories needs at least one trajectory")
    tensors: dict[str, torch.Tensor] = {
        key: _stack([getattr(item, name) for item in inputs], torch.long)
        for name, key in (
            ("prompt_ids", "prompts"),
            ("response_ids", "responses"),
            ("response_mask", "response_mask"),
            ("input_ids", "input_ids"),
            ("attention_mask", "attention_mask"),
            ("position_ids", "position_ids"),
        )
    }
    for name, key in (
        ("response_logprobs", "rollout_log_probs"),
        ("routed_experts", "routed_experts"),
        ("teacher_logprobs", "teacher_logprobs"),
        ("teacher_ids", "teacher_ids"),
    ):
        values = [getattr(item, name) for item in inputs]
        if all(value is not None for value in values):
            dtype = torch.float32 if name == "response_logprobs" else None
            tensors[key] = _stack(values, dtype) if dtype is not None else torch.cat(values)
    scored = [item.reward_score is not None for item in inputs]
    response_width = tensors["responses"].shape[1]
    if all(scored):
        lengths = tensors["attention_mask"][:, -response_width:].sum(-1).tolist()
        tensors["rm_scores"] = score_tensor([item.reward_score for item in inputs], lengths, response_width)
    elif any(scored):
        missing = [i for i, s in enumerate(scored) if not s]
        raise ValueError(
            f"agent loop outputs {missing[:8]} have no reward_score while others have one; a batch is scored "
            "either entirely in the loop or not at all"
        )

    columns: dict[str, np.ndarray] = {}
    for key, value in (non_tensors or {}).items():
        if len(value) != len(inputs):
            raise ValueError(f"non-tensor column {key!r} has {len(value)} rows for {len(inputs)} outputs")
        columns[key] = value
    columns[NUM_TURNS_KEY] = np.array([int(item.num_turns) for item in inputs], dtype=np.int32)
    reward_infos = [item.extra_fields.get("reward_extra_info") or {} for item in inputs]
    reward_keys = list(reward_infos[0])
    for key in reward_keys:
        columns[key] = _object_column([info.get(key) for info in reward_infos])
    if any(item.multi_modal_inputs is not None for item in inputs):
        columns["multi_modal_inputs"] = _object_column([item.multi_modal_inputs for item in inputs])
    extra_keys = list(DEFAULT_EXTRA_KEYS)
    for item in inputs:
        extra_keys.extend(k for k in item.extra_fields if k not in extra_keys)
    for key in extra_keys:
        columns[key] = _object_column([item.extra_fields.get(key) for item in inputs])
    meta: dict[str, Any] = {"metrics": [sample_metrics(item) for item in inputs]}
    if "rm_scores" in tensors:
        meta["reward_extra_keys"] = reward_keys
    return DataProto.from_dict(tensors=tensors, non_tensors=columns, meta_info=meta)


def assemble_batch(
    outputs: Sequence[AgentLoopOutput],
    *,
    prompt_length: int,
    response_length: int,
    pad_token_id: int,
    non_tensors: dict[str, np.ndarray] | None = None,
    meta_info: dict[str, Any] | None = None,
) -> DataProto:
    """One DataProto row per output, in order (:func:`pad_trajectory` then :func:`stack_trajectories`);
    ``meta_info`` replaces the per-trajectory metrics."""
    if not outputs:
        raise ValueError("assemble_batch needs at least one agent loop output")
    padded = []
    for i, out in enumerate(outputs):
        fields = pad_trajectory(
            out, prompt_length=prompt_length, response_length=response_length, pad_token_id=pad_token_id, index=i
        )
        padded.append(
            _InternalAgentLoopOutput(
                **fields,
                reward_score=out.reward_score,
                num_turns=out.num_turns,
                metrics=out.metrics,
                extra_fields=out.extra_fields,
            )
        )
    batch = stack_trajectories(padded, non_tensors)
    batch.meta_info = dict(meta_info or {})
    return batch


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
        raise ValueError(
            "some agent loop workers returned rm_scores and others did not; a batch is scored either "
            "entirely in the loop or not at all"
        )
    aligned = []
    for part in parts:
        non_tensors = dict(part.non_tensor_batch)
        for key in columns:
            if key not in non_tensors:
                non_tensors[key] = _object_column([None] * len(part))
        tensors = {key: part.batch[key] for key in part.batch.keys() if key not in partial}
        aligned.append(DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(part.meta_info)))
    return aligned
