"""Per-step metrics with verl's names: data statistics, stage timings, throughput, gradient-variance proxies,
speculative decoding and rollout MoE load balance. Validation metrics live in
:mod:`verl.trainer.ppo.validation_metrics` and are re-exported here.

Rollout MoE load balance: the rollout can return, for every token, the experts each MoE layer routed it
to (``routed_experts`` [batch, seq, layers, top-k]). Per layer, ``deviation = load_share * n_experts - 1``
is 0 for every expert under perfect balance; ``max_vio`` / ``min_vio`` are its extremes and ``avg_vio``
its mean magnitude. Counts accumulate over ``moe_lb_metrics_interval`` steps before they are reported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.validation_metrics import (
    bootstrap_metric,
    calc_maj_val,
    flatten_validation_metrics,
    process_validation_metrics,
    validation_reward_metrics,
)
from verl.utils.import_utils import lazy_exports
from verl.utils.metric import reduce_metrics
from verl.utils.shm import maybe_shm_copy
from verl.utils.torch_functional import masked_mean, masked_sum

__all__ = [
    "RolloutMoELoadBalanceMetricsAccumulator",
    "bootstrap_metric",
    "calc_maj_val",
    "compute_data_metrics",
    "compute_moe_lb_metrics",
    "compute_rollout_moe_load_balance_metrics",
    "compute_spec_decode_metrics",
    "compute_throughout_metrics",
    "compute_timing_metrics",
    "compute_variance_proxy_metrics",
    "flatten_validation_metrics",
    "get_hf_config_override_kwargs",
    "get_metric_data_with_optional_routed_experts",
    "infer_moe_num_experts",
    "infer_rollout_moe_num_experts",
    "process_validation_metrics",
    "reduce_metrics",
    "validation_reward_metrics",
]

logger = logging.getLogger(__name__)


# transformers is slow to import and only needed to read a model's config from disk.
__getattr__ = lazy_exports(__name__, {"AutoConfig": "transformers"})


# ----------------------------------------------------------------------------- batch statistics


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """mean / max / min of ``values`` (nan when empty, so the keys are always there)."""
    if values.numel() == 0:
        return {f"{prefix}/{stat}": float("nan") for stat in ("mean", "max", "min")}
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _has(tensors: Any, key: str) -> bool:
    return key in tensors.keys()


def _compute_response_info(batch: DataProto) -> dict[str, torch.Tensor]:
    """Prompt and response lengths per row: from ``prompt_length`` / ``response_length`` when the batch carries
    them, else from the attention mask split at the response width."""
    tensors = batch.batch
    if _has(tensors, "prompt_length") and _has(tensors, "response_length"):
        return {"prompt_length": tensors["prompt_length"], "response_length": tensors["response_length"]}
    response_width = tensors["responses"].shape[-1]
    attention_mask = tensors["attention_mask"]
    return {
        "prompt_length": attention_mask[:, :-response_width].sum(-1).float(),
        "response_length": attention_mask[:, -response_width:].sum(-1).float(),
    }


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, Any]:
    """Scores, rewards, advantages, returns, values and lengths of one training batch.

    Aborted samples (empty responses) are left out of the score and reward statistics and of
    ``response_length_non_aborted/*``; ``response/aborted_ratio`` counts them.
    """
    tensors = batch.batch
    response_mask = tensors["response_mask"].bool()
    max_response_length = tensors["responses"].shape[-1]
    if _has(tensors, "prompts"):
        max_prompt_length = tensors["prompts"].shape[-1]
    else:
        max_prompt_length = tensors["attention_mask"].shape[-1] - max_response_length
    info = _compute_response_info(batch)
    prompt_length, response_length = info["prompt_length"].float(), info["response_length"].float()
    aborted = response_length == 0
    kept = ~aborted

    metrics: dict[str, Any] = {}
    metrics.update(_stats("critic/score", tensors["token_level_scores"].sum(-1)[kept]))
    metrics.update(_stats("critic/rewards", tensors["token_level_rewards"].sum(-1)[kept]))
    metrics.update(_stats("critic/advantages", torch.masked_select(tensors["advantages"], response_mask)))
    returns = torch.masked_select(tensors["returns"], response_mask)
    metrics.update(_stats("critic/returns", returns))
    if use_critic and _has(tensors, "values"):
        values = torch.masked_select(tensors["values"], response_mask)
        metrics.update(_stats("critic/values", values))
        explained = float("nan")
        if returns.numel() > 1:
            explained = (1.0 - torch.var(returns - values) / (torch.var(returns) + 1e-5)).item()
        metrics["critic/vf_explained_var"] = explained
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length >= max_response_length).float().mean().item()
    non_aborted = response_length[kept]
    metrics.update(_stats("response_length_non_aborted", non_aborted))
    metrics["response_length_non_aborted/clip_ratio"] = (
        (non_aborted >= max_response_length).float().mean().item() if non_aborted.numel() else float("nan")
    )
    metrics["response/aborted_ratio"] = aborted.float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length >= max_prompt_length).float().mean().item()
    for key, prefix in (("__num_turns__", "num_turns"), ("tool_call_counts", "tool_call_counts")):
        if key in batch.non_tensor_batch:
            metrics.update(_stats(prefix, torch.as_tensor(np.asarray(batch.non_tensor_batch[key], dtype=float))))
    return metrics


_ALL_TOKEN_STAGES = ("ref", "values", "adv", "update_critic", "update_actor", "old_log_prob", "reward")


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """Seconds per stage (``timing_s/*``) and milliseconds per token (``timing_per_token_ms/*``) for the stages
    that touch every token (generation: response tokens only); 0 when the batch has no tokens."""
    info = _compute_response_info(batch)
    num_response_tokens = float(torch.as_tensor(info["response_length"]).sum().item())
    num_all_tokens = float(torch.as_tensor(info["prompt_length"]).sum().item()) + num_response_tokens
    tokens_per_stage = {"gen": num_response_tokens, **{stage: num_all_tokens for stage in _ALL_TOKEN_STAGES}}
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing_raw.items()}
    for name, tokens in tokens_per_stage.items():
        if name in timing_raw:
            metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000 / tokens if tokens > 0 else 0.0
    return metrics


def compute_throughout_metrics(batch: DataProto, timing_raw: dict[str, float], n_gpus: int) -> dict[str, float]:
    """Tokens per second of the whole step, per worker process (GPU)."""
    total_tokens = float(sum(batch.meta_info.get("global_token_num", [])))
    step_time = timing_raw.get("step", 0.0)
    metrics = {"perf/total_num_tokens": total_tokens, "perf/time_per_step": step_time}
    if step_time > 0 and n_gpus > 0:
        metrics["perf/throughput"] = total_tokens / (step_time * n_gpus)
    return metrics


def compute_variance_proxy_metrics(batch: DataProto, gradient_norm: float | None = None) -> dict[str, float]:
    """Cheap proxies of the policy gradient's variance (needs ``sum_pi_squared`` from the actor).

    With W(tau) = sum_t (1 - 2 pi_t + sum_v pi_v^2), the squared score-norm of a response, the total
    power of the per-sample gradients is approximated by E[A^2 W] (``proxy2_total_power``; with rollout
    importance weights, E[rho^2 A^2 W]). Given the norm of the batch's mean gradient (``proxy1``, its
    square), ``proxy3_pure_noise = (proxy2 - proxy1) / (N - 1)`` estimates the variance of that mean.
    """
    tensors = batch.batch
    if not all(_has(tensors, key) for key in ("sum_pi_squared", "old_log_probs", "advantages")):
        return {}
    mask = tensors["response_mask"]
    step_norm = 1.0 - 2.0 * torch.exp(tensors["old_log_probs"]) + tensors["sum_pi_squared"]
    w = masked_sum(step_norm, mask, axis=-1).clamp(min=0.0)
    advantage = masked_mean(tensors["advantages"], mask, axis=-1)
    power = advantage.square() * w
    if _has(tensors, "rollout_is_weights"):
        rho = masked_mean(tensors["rollout_is_weights"].detach(), mask, axis=-1)
        power = rho.square() * power
    total_power = power.mean().item()
    signal = float(gradient_norm) ** 2 if gradient_norm is not None else None
    noise = 0.0
    if signal is not None and advantage.shape[0] > 1:
        noise = max(0.0, (total_power - signal) / (advantage.shape[0] - 1))
    return {
        "variance_proxy/proxy1_signal_strength": signal if signal is not None else 0.0,
        "variance_proxy/proxy2_total_power": total_power,
        "variance_proxy/proxy3_pure_noise": noise,
        "variance_proxy/expected_a_squared": advantage.square().mean().item(),
        "variance_proxy/expected_w": masked_sum(step_norm, mask, axis=-1).mean().item(),
    }


def compute_spec_decode_metrics(
    spec_drafts: Any, spec_accepts: Any, spec_verifies: Any, non_padding_mask: Any = None
) -> dict[str, float]:
    """Speculative decoding per request, averaged over requests (each request weighs the same).

    ``rollout/spec_accept_rate``: accepted / drafted tokens; ``rollout/spec_accept_length``: tokens gained
    per verification step, 1 + accepted / verify steps. A request with a zero denominator counts as 0.
    All three inputs None (not collected) gives {}; ``non_padding_mask`` drops padding rows.
    """
    given = [x is not None for x in (spec_drafts, spec_accepts, spec_verifies)]
    if not any(given):
        return {}
    if not all(given):
        raise ValueError(
            "compute_spec_decode_metrics needs all of spec_drafts, spec_accepts and spec_verifies "
            f"(got drafts={given[0]}, accepts={given[1]}, verifies={given[2]})"
        )
    drafts, accepts, verifies = (
        np.asarray(x, dtype=np.float64).reshape(-1) for x in (spec_drafts, spec_accepts, spec_verifies)
    )
    if not (len(drafts) == len(accepts) == len(verifies)):
        raise ValueError(
            f"compute_spec_decode_metrics: lengths differ (drafts {len(drafts)}, accepts "
            f"{len(accepts)}, verifies {len(verifies)})"
        )
    if non_padding_mask is not None:
        keep = np.asarray(non_padding_mask, dtype=bool).reshape(-1)
        if len(keep) != len(drafts):
            raise ValueError(
                f"compute_spec_decode_metrics: non_padding_mask has {len(keep)} entries for {len(drafts)} requests"
            )
        drafts, accepts, verifies = drafts[keep], accepts[keep], verifies[keep]
    if len(drafts) == 0:
        return {}
    rate = np.divide(accepts, drafts, out=np.zeros_like(accepts), where=drafts > 0)
    gained = np.divide(accepts, verifies, out=np.zeros_like(accepts), where=verifies > 0)
    length = np.where(verifies > 0, 1.0 + gained, 0.0)
    return {"rollout/spec_accept_rate": float(rate.mean()), "rollout/spec_accept_length": float(length.mean())}


# ----------------------------------------------------------------------------- model configs (MoE experts)

_NUM_LOCAL_EXPERTS_MODEL_TYPES = frozenset({"gpt_oss", "mixtral"})


def _read(obj: Any, key: str, default: Any = None) -> Any:
    """``obj.get(key)`` for mappings (dicts, DictConfigs, our configs), else ``getattr``."""
    if obj is None:
        return default
    if hasattr(obj, "get"):
        return obj.get(key, default)
    return getattr(obj, key, default)


def get_hf_config_override_kwargs(override_config: Any) -> dict[str, Any]:
    """The Hugging Face config overrides in ``model.override_config`` (its ``model_config`` part when nested)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(override_config, DictConfig):
        override_config = OmegaConf.to_container(override_config, resolve=True)
    if not override_config:
        return {}
    if "model_config" in override_config:
        return dict(override_config["model_config"])
    return dict(override_config)


def infer_moe_num_experts(model_config: Any) -> int | None:
    """Number of routed experts from a config-like object (or None): ``num_experts`` / ``n_routed_experts``
    on the config, its ``hf_config``, ``text_config`` or ``override_config``; ``num_local_experts`` only for
    model types that name the routed experts so (gpt_oss, mixtral)."""
    hf_config = _read(model_config, "hf_config")
    override = _read(model_config, "override_config")
    candidates = [
        model_config,
        hf_config,
        _read(hf_config, "text_config"),
        _read(model_config, "text_config"),
        override,
        _read(override, "model_config"),
        _read(override, "text_config"),
    ]
    for candidate in candidates:
        if candidate is None:
            continue
        for key in ("num_experts", "n_routed_experts"):
            value = _read(candidate, key)
            if value is not None:
                return int(value)
        if _read(candidate, "model_type") in _NUM_LOCAL_EXPERTS_MODEL_TYPES:
            value = _read(candidate, "num_local_experts")
            if value is not None:
                return int(value)
    return None


def copy_to_local(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
    use_shm: bool = False,
) -> str:
    """A local path for ``src``: itself (a local folder or a Hugging Face hub id), or its shared-memory copy
    when ``use_shm`` and it is a local folder. Remote file systems (``hdfs://`` ...) are not supported here, so
    ``cache_dir``, ``filelock``, ``verbose`` and ``always_recopy`` (which steer verl's remote download) have
    nothing to do."""
    del cache_dir, filelock, verbose, always_recopy
    if "://" in str(src):
        raise ValueError(f"{src}: only local paths and Hugging Face hub ids are supported (no remote file systems)")
    return maybe_shm_copy(src, enabled=use_shm and os.path.exists(src), key="model.use_shm")


def update_model_config(module_config: Any, override_config_kwargs: Mapping[str, Any]) -> None:
    """Set ``override_config_kwargs`` on a Hugging Face config in place; nested dicts update sub-configs."""
    for key, value in override_config_kwargs.items():
        if isinstance(value, Mapping):
            update_model_config(getattr(module_config, key), value)
        else:
            setattr(module_config, key, value)


def infer_rollout_moe_num_experts(model_config: Any) -> int | None:
    """:func:`infer_moe_num_experts`, reading the Hugging Face config from disk (with the model's overrides)
    when the in-memory config does not say."""
    num_experts = infer_moe_num_experts(model_config)
    if num_experts is not None:
        return num_experts
    path = (
        _read(model_config, "local_hf_config_path")
        or _read(model_config, "hf_config_path")
        or _read(model_config, "path")
    )
    if path is None:
        return None
    local = copy_to_local(path, use_shm=bool(_read(model_config, "use_shm", False)))
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(
        local, trust_remote_code=bool(_read(model_config, "trust_remote_code", False))
    )
    overrides = get_hf_config_override_kwargs(_read(model_config, "override_config", {}))
    if overrides:
        update_model_config(hf_config, overrides)
    return infer_moe_num_experts(hf_config)


# ----------------------------------------------------------------------------- rollout MoE load balance


def _compute_rollout_moe_load_counts(
    routed_experts: torch.Tensor | None, response_mask: torch.Tensor | None, num_experts: int | None
) -> torch.Tensor | None:
    """Assignments per expert, [layers, experts], over the response tokens; None when there is nothing to count.

    Each response's last token is left out: it was sampled but never fed back through the model, so
    its slot holds filler, not a routing decision.
    """
    if routed_experts is None or response_mask is None or num_experts is None or num_experts <= 0:
        return None
    if routed_experts.dim() != 4:
        logger.warning("routed_experts must be [batch, seq, layers, top-k], got shape %s", tuple(routed_experts.shape))
        return None
    if response_mask.dim() != 2 or response_mask.shape[0] != routed_experts.shape[0]:
        logger.warning(
            "response_mask shape %s does not fit routed_experts %s",
            tuple(response_mask.shape),
            tuple(routed_experts.shape),
        )
        return None
    width = response_mask.shape[1]
    if width == 0:
        return None
    if routed_experts.shape[1] < width:
        logger.warning(
            "routed_experts covers %d positions, fewer than the %d response positions", routed_experts.shape[1], width
        )
        return None
    routed = routed_experts[:, -width:]
    mask = response_mask.to(device=routed.device, dtype=torch.bool)
    positions = torch.arange(width, device=mask.device)
    last = torch.where(mask, positions, positions.new_full((), -1)).amax(dim=-1, keepdim=True)
    mask = mask & (positions.unsqueeze(0) != last)
    selected = routed[mask].detach().to(device="cpu", dtype=torch.long)  # [tokens, layers, top-k]
    if selected.numel() == 0:
        return None
    low, high = int(selected.min()), int(selected.max())
    if low < 0 or high >= num_experts:
        logger.warning(
            "skipping rollout MoE load-balance metrics: expert ids span [%d, %d], outside [0, %d)",
            low,
            high,
            num_experts,
        )
        return None
    return torch.stack(
        [torch.bincount(selected[:, layer].reshape(-1), minlength=num_experts) for layer in range(selected.shape[1])]
    )


def _load_balance_metrics(counts: torch.Tensor | None, prefix: str = "rollout/moe") -> dict[str, float]:
    if counts is None or counts.numel() == 0:
        return {}
    share = counts.float() / counts.float().sum(dim=1, keepdim=True).clamp_min(1.0)
    deviation = share * counts.shape[1] - 1.0
    per_layer = {
        "max_vio": deviation.max(dim=1).values,
        "min_vio": deviation.min(dim=1).values,
        "avg_vio": deviation.abs().mean(dim=1),
    }
    metrics: dict[str, float] = {}
    for layer in range(counts.shape[0]):
        for name, values in per_layer.items():
            metrics[f"{prefix}/{name}/layer_{layer}"] = values[layer].item()
    for name, values in per_layer.items():
        metrics[f"{prefix}/{name}/max"] = values.max().item()
        metrics[f"{prefix}/{name}/avg"] = values.mean().item()
    return metrics


def compute_rollout_moe_load_balance_metrics(
    routed_experts: torch.Tensor | None,
    response_mask: torch.Tensor | None,
    num_experts: int | None,
    prefix: str = "rollout/moe",
) -> dict[str, float]:
    """Load-balance violations per MoE layer (and their max / mean over layers) of one batch."""
    return _load_balance_metrics(_compute_rollout_moe_load_counts(routed_experts, response_mask, num_experts), prefix)


class RolloutMoELoadBalanceMetricsAccumulator:
    """Expert assignment counts summed over the steps of one logging interval.

    ``num_experts`` is inferred once from ``model_config`` when an update does not give it. Warnings
    about skipped metrics are logged once per reason (``warned_skip_keys``).
    """

    def __init__(self, model_config: Any | None = None):
        self.model_config = model_config
        self.load_counts: torch.Tensor | None = None
        self.num_experts: int | None = None
        self.num_experts_initialized = False
        self.routed_experts_retry_after_step = 0
        self.warned_skip_keys: set[str] = set()

    def should_request_routed_experts(self, global_steps: int) -> bool:
        """False while a previous request found no ``routed_experts`` and the retry step is not reached."""
        return global_steps >= self.routed_experts_retry_after_step

    def defer_routed_experts_retry(self, global_steps: int, interval: int) -> None:
        self.routed_experts_retry_after_step = global_steps + max(interval, 1)

    def warn_skip_once(self, key: str, message: str) -> None:
        if key not in self.warned_skip_keys:
            self.warned_skip_keys.add(key)
            logger.warning(message)

    def _infer_num_experts(self) -> int | None:
        if not self.num_experts_initialized:
            self.num_experts_initialized = True
            if self.model_config is not None:
                try:
                    self.num_experts = infer_rollout_moe_num_experts(self.model_config)
                except Exception as exc:  # a broken config only costs the metric
                    self.warn_skip_once(
                        "num_experts_exception", f"could not infer the rollout model's number of MoE experts: {exc}"
                    )
            if self.num_experts is None:
                self.warn_skip_once(
                    "num_experts_missing",
                    "skipping rollout MoE load-balance metrics: the number of experts could not be "
                    "inferred from the model config or its Hugging Face config",
                )
        return self.num_experts

    def update(
        self, routed_experts: torch.Tensor | None, response_mask: torch.Tensor | None, num_experts: int | None = None
    ) -> bool:
        """Add one batch's counts; False when it had none to add."""
        counts = _compute_rollout_moe_load_counts(
            routed_experts, response_mask, num_experts if num_experts is not None else self._infer_num_experts()
        )
        if counts is None:
            return False
        if self.load_counts is not None and self.load_counts.shape == counts.shape:
            self.load_counts = self.load_counts + counts
        else:
            if self.load_counts is not None:
                logger.warning(
                    "rollout MoE counts changed shape from %s to %s; restarting the accumulation",
                    tuple(self.load_counts.shape),
                    tuple(counts.shape),
                )
            self.load_counts = counts
        return True

    def compute(self, prefix: str = "rollout/moe") -> dict[str, float]:
        return _load_balance_metrics(self.load_counts, prefix)

    def total_assignments(self) -> int:
        return 0 if self.load_counts is None else int(self.load_counts.sum().item())

    def reset(self) -> None:
        self.load_counts = None

    def pop_metrics(self, prefix: str = "rollout/moe") -> dict[str, float]:
        """The interval's metrics; the counts start over."""
        metrics = self.compute(prefix)
        self.reset()
        return metrics


def get_metric_data_with_optional_routed_experts(
    keys: list[str],
    partition_id: str,
    fields: list[str],
    moe_lb_metrics_interval: int,
    global_steps: int,
    accumulator: RolloutMoELoadBalanceMetricsAccumulator,
    kv_batch_get: Callable[..., Any],
) -> Any:
    """Fetch ``fields`` through ``kv_batch_get``, plus ``routed_experts`` when MoE metrics are on.

    When the store has no ``routed_experts`` (a ValueError naming it), fetch without it, warn once and
    do not ask again for one interval.
    """
    if moe_lb_metrics_interval <= 0 or not accumulator.should_request_routed_experts(global_steps):
        return kv_batch_get(keys=keys, partition_id=partition_id, select_fields=fields)
    try:
        return kv_batch_get(keys=keys, partition_id=partition_id, select_fields=[*fields, "routed_experts"])
    except ValueError as exc:
        if "routed_experts" not in str(exc):
            raise
        accumulator.defer_routed_experts_retry(global_steps, moe_lb_metrics_interval)
        accumulator.warn_skip_once("missing_routed_experts", f"skipping rollout MoE load-balance metrics: {exc}")
        return kv_batch_get(keys=keys, partition_id=partition_id, select_fields=fields)


def compute_moe_lb_metrics(
    metrics_batch: DataProto,
    moe_lb_metrics_interval: int,
    global_steps: int,
    accumulator: RolloutMoELoadBalanceMetricsAccumulator,
) -> dict[str, float]:
    """Accumulate this step's routing; every ``moe_lb_metrics_interval`` steps, report and restart."""
    if moe_lb_metrics_interval <= 0:
        return {}
    tensors = metrics_batch.batch
    updated = accumulator.update(
        routed_experts=tensors.get("routed_experts", None), response_mask=tensors.get("response_mask", None)
    )
    if global_steps % moe_lb_metrics_interval != 0:
        return {}
    assignments = accumulator.total_assignments()
    metrics = accumulator.pop_metrics()
    metrics["rollout/moe/routed_experts_found"] = float(assignments > 0)
    metrics["rollout/moe/routed_expert_assignments"] = assignments
    if not updated and assignments == 0:
        accumulator.warn_skip_once(
            "no_routed_expert_counts", "skipping rollout MoE load-balance metrics: no routed expert counts were found"
        )
    return metrics
