"""Per-step metrics with verl's names: data statistics, stage timings and throughput."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _response_and_prompt_lengths(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    response_len = batch.batch["responses"].shape[-1]
    attention_mask = batch.batch["attention_mask"].bool()
    prompt_length = attention_mask[:, :-response_len].sum(-1).float()
    response_length = batch.batch["response_mask"].sum(-1).float()
    return prompt_length, response_length


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, float]:
    """Scores, rewards, advantages, returns, values and lengths of one training batch."""
    response_mask = batch.batch["response_mask"].bool()
    max_response_length = batch.batch["responses"].shape[-1]
    max_prompt_length = batch.batch["attention_mask"].shape[-1] - max_response_length
    prompt_length, response_length = _response_and_prompt_lengths(batch)

    metrics: dict[str, float] = {}
    metrics.update(_stats("critic/score", batch.batch["token_level_scores"].sum(-1)))
    metrics.update(_stats("critic/rewards", batch.batch["token_level_rewards"].sum(-1)))
    metrics.update(_stats("critic/advantages", torch.masked_select(batch.batch["advantages"], response_mask)))
    metrics.update(_stats("critic/returns", torch.masked_select(batch.batch["returns"], response_mask)))
    if use_critic and "values" in batch.batch.keys():
        values = torch.masked_select(batch.batch["values"], response_mask)
        returns = torch.masked_select(batch.batch["returns"], response_mask)
        metrics.update(_stats("critic/values", values))
        if returns.numel() > 1:
            variance = torch.var(returns)
            metrics["critic/vf_explained_var"] = (1.0 - torch.var(returns - values) / (variance + 1e-5)).item()
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length >= max_response_length).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length >= max_prompt_length).float().mean().item()
    if "__num_turns__" in batch.non_tensor_batch:
        metrics.update(_stats("num_turns", torch.as_tensor(batch.non_tensor_batch["__num_turns__"].astype(float))))
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """Seconds per stage, and milliseconds per token for the stages that touch every token."""
    prompt_length, response_length = _response_and_prompt_lengths(batch)
    num_prompt_tokens = prompt_length.sum().item()
    num_response_tokens = response_length.sum().item()
    tokens_per_stage = {"gen": num_response_tokens}
    for stage in ("ref", "values", "adv", "update_critic", "update_actor", "old_log_prob", "reward"):
        tokens_per_stage[stage] = num_prompt_tokens + num_response_tokens
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing_raw.items()}
    for name, tokens in tokens_per_stage.items():
        if name in timing_raw and tokens > 0:
            metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000 / tokens
    return metrics


def compute_throughout_metrics(batch: DataProto, timing_raw: dict[str, float], n_gpus: int) -> dict[str, float]:
    """Tokens per second of the whole step, per worker process (GPU)."""
    total_tokens = float(sum(batch.meta_info.get("global_token_num", [])))
    step_time = timing_raw.get("step", 0.0)
    metrics = {"perf/total_num_tokens": total_tokens, "perf/time_per_step": step_time}
    if step_time > 0 and n_gpus > 0:
        metrics["perf/throughput"] = total_tokens / (step_time * n_gpus)
    return metrics


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Mean of list-valued metrics (as returned by workers per micro-batch)."""
    reduced = {}
    for key, value in metrics.items():
        if isinstance(value, list | tuple | np.ndarray):
            values = [float(v) for v in value if v is not None]
            if values:
                reduced[key] = float(np.mean(values))
        else:
            reduced[key] = float(value)
    return reduced


def process_validation_metrics(
    data_sources: Sequence[str], uids: Sequence[str], scores: Sequence[float], pass_threshold: float = 1.0
) -> dict[str, float]:
    """mean@n, best@n, worst@n and pass@n per data source; n is the number of samples per prompt."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for source, uid, score in zip(data_sources, uids, scores):
        groups[source][uid].append(float(score))
    metrics: dict[str, float] = {}
    for source, by_prompt in groups.items():
        n = max(len(v) for v in by_prompt.values())
        per_prompt = [np.asarray(v) for v in by_prompt.values()]
        metrics[f"val-core/{source}/reward/mean@{n}"] = float(np.mean([v.mean() for v in per_prompt]))
        if n > 1:
            metrics[f"val-aux/{source}/reward/best@{n}"] = float(np.mean([v.max() for v in per_prompt]))
            metrics[f"val-aux/{source}/reward/worst@{n}"] = float(np.mean([v.min() for v in per_prompt]))
        metrics[f"val-aux/{source}/reward/pass@{n}"] = float(
            np.mean([(v >= pass_threshold).any() for v in per_prompt])
        )
    return metrics
