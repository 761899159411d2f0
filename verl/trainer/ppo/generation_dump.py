"""Dump a step's generations to ``<dir>/<step>.jsonl`` (``trainer.rollout_data_dir`` / ``validation_data_dir``).

Metrics say a reward moved; reading what the policy wrote says why. One JSON object per sample: the decoded prompt
(``input``) and response (``output``) without padding, the sequence score, the step, and every scalar per-sample
column of the batch (``uid``, ``data_source``, the reward function's extra fields, ...).
"""

from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["decode_samples", "dump_generations", "pick_samples"]


def decode_samples(tokenizer: Any, batch: DataProto) -> tuple[list[str], list[str]]:
    """Prompt and response texts of every row, read through the attention mask (no padding, special tokens kept)."""
    tensors = batch.batch
    prompts, responses = tensors["prompts"], tensors["responses"]
    prompt_width = prompts.shape[1]
    attention = tensors["attention_mask"]
    prompt_mask = attention[:, :prompt_width].bool()
    response_mask = (
        tensors["response_mask"] if "response_mask" in tensors.keys() else attention[:, prompt_width:]
    ).bool()
    inputs = [tokenizer.decode(prompts[i][prompt_mask[i]].tolist()) for i in range(len(batch))]
    outputs = [tokenizer.decode(responses[i][response_mask[i]].tolist()) for i in range(len(batch))]
    return inputs, outputs


_SKIP = object()  # a per-sample value that is not a JSON scalar (lists of messages, arrays, ...)


def _scalar(value: Any) -> Any:
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.generic):
        return value.item()
    return _SKIP


def dump_generations(
    directory: str | Path, step: int, tokenizer: Any, batch: DataProto, scores: torch.Tensor | list[float]
) -> Path:
    """Write ``<directory>/<step>.jsonl`` with one line per row of ``batch``; returns the file's path."""
    inputs, outputs = decode_samples(tokenizer, batch)
    scores = scores.tolist() if isinstance(scores, torch.Tensor) else list(scores)
    if len(scores) != len(inputs):
        raise ValueError(f"dump_generations: {len(scores)} scores for {len(inputs)} samples")
    path = Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    path = path / f"{step}.jsonl"
    columns = dict(batch.non_tensor_batch)
    with path.open("w", encoding="utf-8") as out:
        for row in range(len(inputs)):
            record = {"step": int(step), "input": inputs[row], "output": outputs[row], "score": float(scores[row])}
            for key, values in columns.items():
                value = _scalar(values[row])
                if value is not _SKIP and key not in record:
                    record[key] = value
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def pick_samples(
    inputs: list[str], outputs: list[str], scores: list[float], count: int, seed: int = 42
) -> list[dict[str, Any]]:
    """``count`` samples for ``trainer.log_val_generations``: the same prompts at every validation (a fixed
    permutation of the samples sorted by prompt), so their answers can be followed across steps."""
    order = sorted(range(len(inputs)), key=lambda i: inputs[i])
    chosen = [order[i] for i in np.random.RandomState(seed).permutation(len(order))[:count]]
    return [{"input": inputs[i], "output": outputs[i], "score": float(scores[i])} for i in chosen]
