"""DataParallelPPOActor: the policy's log-probs and its PPO update on one data-parallel rank.

The module is a plain Hugging Face causal LM, possibly wrapped by the worker
(FSDP2, PEFT); nothing here depends on the wrapping. Sizes in the config are
samples on this rank: the worker converts prompt counts to samples and divides
by the data-parallel size before building the actor.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint
from tensordict import TensorDict
from torch import nn

from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.trainer.ppo.rollout_corr import IN_UPDATE_KEY, in_update_metrics, in_update_weights
from verl.utils.config_builder import as_config
from verl.utils.device import get_device_id
from verl.utils.seqlen_balancing import prepare_dynamic_batch
from verl.utils.torch_functional import entropy_from_logits, entropy_from_logits_with_chunking, logprobs_from_logits
from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.batching import positive_int, read_meta, restore_order, select_batch, split_micro_batches
from verl.workers.actor.fused_head import check_fused_head, fused_lm_head
from verl.workers.actor.hook_results import grad_norm_value, hook_name, model_inputs, policy_outputs
from verl.workers.actor.optim_step import clip_and_step, resolve_grad_clip
from verl.workers.actor.token_forward import (
    ResponseSlots,
    forward_for_responses,
    module_device,
    pad_response_columns,
    trim_response_padding,
)
from verl.workers.actor.update_loop import UpdatePlan, run_updates
from verl.workers.config.actor import ActorConfig, FSDPActorConfig

# get_device_id and prepare_dynamic_batch: verl's dp_actor module imported them and recipes take them from here
__all__ = ["DataParallelPPOActor", "get_device_id", "logger", "prepare_dynamic_batch"]

logger = logging.getLogger(__name__)

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]


def read_temperature(data: DataProto, where: str) -> float:
    """Required: log-probs under a different temperature than the rollout's would be silently wrong."""
    temperature = float(read_meta(data, "temperature", where))
    if not temperature > 0:
        raise ValueError(f"{where}: meta_info['temperature'] must be positive, got {temperature!r}")
    return temperature


def actor_config(config: Any) -> FSDPActorConfig:
    """``config`` as the ``FSDPActorConfig`` the actor reads: itself; an ``ActorConfig`` with the FSDP knobs at
    their defaults; or built from a DictConfig / dict (a recipe's own keys kept in ``_extra``)."""
    if isinstance(config, FSDPActorConfig):
        return config
    if isinstance(config, ActorConfig):
        names = {f.name for f in dataclasses.fields(FSDPActorConfig) if f.init}
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
        extra = {**{k: v for k, v in values.items() if k not in names and k != "_extra"}, **config._extra}
        return FSDPActorConfig(**{k: v for k, v in values.items() if k in names and k != "_extra"}, _extra=extra)
    return as_config(config, FSDPActorConfig, "actor")


def _entropy_function(config: FSDPActorConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """Entropy of ``[T, V]`` logits: in row chunks of 2048 with ``entropy_from_logits_with_chunking`` (default: as
    many rows as fit ~256 MiB), each chunk through ``torch.compile``d kernels with ``use_torch_compile`` (one fused
    pass per chunk instead of a ``[rows, V]`` temporary per operation; compiled on first use). The log-probs follow
    the same switch."""
    compiled = config.use_torch_compile
    if config.entropy_from_logits_with_chunking:
        return functools.partial(entropy_from_logits_with_chunking, compiled=compiled)
    return functools.partial(entropy_from_logits, compiled=compiled)


class DataParallelPPOActor(BasePPOActor):
    """Scores responses (``compute_log_prob``) and runs PPO-style policy updates (``update_policy``).

    Without an optimizer it is a reference policy: it can score but not learn.
    ``config`` is an ``FSDPActorConfig`` (a DictConfig, dict or ``ActorConfig`` is converted once, see
    :func:`actor_config`), read by attribute. Its ``ppo_*`` sizes count samples on this rank, and
    ``use_remove_padding`` / ``use_fused_kernels`` are the model's switches: the worker sets both before building
    the actor. Both switches are also public attributes.

    Recipes subclass it and override verl's hooks, which both loops call through ``self``:
    ``_forward_micro_batch(micro_batch, temperature, calculate_entropy=False) -> (entropy, log_prob)`` (scoring
    and every update micro-batch) and ``_optimizer_step() -> grad_norm`` (every optimizer step of the update).
    """

    def __init__(self, config: Any, actor_module: nn.Module, actor_optimizer: torch.optim.Optimizer | None = None):
        super().__init__(actor_config(config))
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        self._shuffle_generator = torch.Generator()
        if self.config.data_loader_seed is not None:
            self._shuffle_generator.manual_seed(int(self.config.data_loader_seed))
        # Whether the entropy the default forward returns carries a gradient while grad is enabled. True outside
        # update_policy (verl's behaviour); update_policy drops it when nothing differentiates the entropy.
        self._entropy_grad = True
        self._checkpoint_offloader = None  # verl's activation-offload handle; activation offload is a model switch
        self.scaler = None  # verl's fp16 grad scaler; parameters here are fp32 or bf16, which need none
        self.gradient_accumulation = 1  # micro-batches per mini-batch of the last fixed-size update
        self._apply_config()

    def _apply_config(self) -> None:
        """Derive the attributes that follow ``self.config``; the worker re-runs it when it hands a recipe's actor
        the per-rank copy of the config that actor was built with."""
        config = self.config = actor_config(self.config)
        self.use_remove_padding = config.use_remove_padding
        self._compiled = config.use_torch_compile
        self._entropy_of = _entropy_function(config)
        self.compute_entropy_from_logits = self._entropy_of  # verl's name: [tokens, vocab] logits -> [tokens]
        self.use_fused_kernels = config.use_fused_kernels
        # checked here, once: an unsuitable model fails when the worker is built, naming the key
        self._fused_head = check_fused_head(self.actor_module) if self.use_fused_kernels else None
        self.use_dynamic_bsz = config.use_dynamic_bsz
        self.ulysses_sequence_parallel_size = 1  # every rank holds whole sequences (no Ulysses here)
        self.use_ulysses_sp = False
        self.use_prefix_grouper = False
        self.device_name = module_device(self.actor_module).type
        # the dtype the forward computes in: FSDP casts parameters to bfloat16 on an accelerator, none on CPU
        self.param_dtype = torch.float32 if self.device_name == "cpu" else torch.bfloat16

    # ------------------------------------------------------------------ forward

    def _forward_micro_batch(
        self, micro_batch: dict[str, torch.Tensor], temperature: float, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(entropy, log_prob)`` of the responses in ``micro_batch`` under ``logits / temperature``.

        ``micro_batch`` holds ``input_ids``, ``attention_mask``, ``position_ids`` ([B, S]) and ``responses``
        ([B, R]) (plus, during an update, the loss's tensors). Both results are [B, R] float32; entropy is ``None``
        unless ``calculate_entropy``. Values at padded response slots are unspecified; callers mask them with
        ``response_mask``. Recipes override this hook; ``compute_log_prob`` and ``update_policy`` both call it.
        """
        micro = _forward_tensordict(micro_batch)
        log_prob, entropy = self._forward_responses(micro, temperature, calculate_entropy, self._entropy_grad)
        return entropy, log_prob

    def _forward_responses(
        self, micro: TensorDict, temperature: float, calculate_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs ([B, R], float32) of the responses, and optionally entropy (with a gradient only when
        ``entropy_grad``): the fused or unfused path, over the micro-batch's own response columns."""
        micro, cut = trim_response_padding(micro)
        if self._fused_head is not None:
            log_probs, entropy = self._forward_fused(micro, temperature, calculate_entropy, entropy_grad)
        else:
            log_probs, entropy = self._forward_unfused(micro, temperature, calculate_entropy, entropy_grad)
        return pad_response_columns(log_probs, cut), pad_response_columns(entropy, cut)

    def _forward_unfused(
        self, micro: TensorDict, temperature: float, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``_forward_responses`` with log-probs and entropy computed from the module's logits."""
        responses = micro["responses"]
        flat_logits, slots = self._forward_slots(micro)
        logits = slots.take(flat_logits)
        if temperature != 1.0:  # in place: the head's output is saved by no backward, and a copy is a whole logits
            logits = logits.float().div_(temperature)
        # At temperature 1 half-precision logits stay as they are: the log-prob and entropy kernels upcast one row
        # chunk at a time, so no float32 copy of every response slot's logits is made (2x their bf16 size).
        log_probs = slots.clean(logprobs_from_logits(logits, responses, compiled=self._compiled))
        entropy = None
        if calculate_entropy:
            with_grad = entropy_grad and torch.is_grad_enabled()
            with torch.set_grad_enabled(with_grad):
                source = logits if entropy_grad else logits.detach()
                if with_grad and self.config.entropy_checkpointing:
                    # Recompute the entropy in backward rather than keep what its forward saved.
                    entropy = torch.utils.checkpoint.checkpoint(self._entropy, source, use_reentrant=False)
                else:
                    entropy = self._entropy(source)
                entropy = slots.clean(entropy)
        return log_probs, entropy

    def _forward_fused(
        self, micro: TensorDict, temperature: float, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``_forward_responses`` with the head computing log-probs and entropy itself (``use_fused_kernels``)."""
        with_grad = entropy_grad and torch.is_grad_enabled()
        with fused_lm_head(
            self._fused_head,
            micro["responses"],
            temperature,
            calculate_entropy=calculate_entropy,
            entropy_grad=with_grad,
        ):
            flat, slots = self._forward_slots(micro)
        per_slot = slots.take(flat)
        entropy = slots.clean(per_slot[..., 1]) if calculate_entropy else None
        return slots.clean(per_slot[..., 0]), entropy

    def _forward_slots(self, micro: TensorDict) -> tuple[torch.Tensor, ResponseSlots]:
        """The module's flat per-slot output for ``micro`` and where each response slot lies in it."""
        return forward_for_responses(
            self.actor_module,
            micro["input_ids"],
            micro["attention_mask"],
            micro["position_ids"],
            micro["responses"].shape[-1],
            self.use_remove_padding,
        )

    def _entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-token entropy ([B, R]) of ``logits`` ([B, R, V])."""
        return self._entropy_of(logits.reshape(-1, logits.shape[-1])).view(logits.shape[:-1])

    def _forward_hook(
        self, micro: TensorDict, temperature: float, calculate_entropy: bool, need_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Call ``self._forward_micro_batch`` (a recipe's override included) as verl does; ``(log_prob, entropy)``."""
        result = self._forward_micro_batch(
            model_inputs(micro), temperature=temperature, calculate_entropy=calculate_entropy
        )
        where = hook_name(self, "_forward_micro_batch")
        return policy_outputs(result, tuple(micro["responses"].shape), need_entropy, where)

    # ------------------------------------------------------------------ optimizer

    def _optimizer_step(self) -> torch.Tensor:
        """Clip the gradients to ``grad_clip`` and step the optimizer unless their norm is not finite; returns the
        norm (a 0-d tensor). ``update_policy`` calls it once per mini-batch and clears the gradients afterwards;
        recipes override it to change the step (another clipping, a second optimizer)."""
        if self.actor_optimizer is None:
            raise RuntimeError(f"{hook_name(self, '_optimizer_step')}: this actor has no optimizer")
        max_norm = resolve_grad_clip(self.config.grad_clip, "actor.grad_clip")
        grad_norm, _ = clip_and_step(
            self.actor_module, self.actor_optimizer, max_norm, who="actor update", zero_grad=False
        )
        return torch.tensor(grad_norm)

    def _optimizer_step_norm(self) -> float:
        return grad_norm_value(self._optimizer_step(), hook_name(self, "_optimizer_step"))

    # ------------------------------------------------------------------ scoring

    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs ([N, R], float32, on the module's device) of ``responses``, and entropy if asked.

        meta_info: ``temperature`` (required), ``micro_batch_size`` or
        ``use_dynamic_bsz`` + ``max_token_len`` (defaulting to the config's
        ``log_prob_*`` fields). Needs batch keys responses, input_ids,
        attention_mask, position_ids. Each micro-batch goes through ``_forward_micro_batch``.
        """
        where = "DataParallelPPOActor.compute_log_prob"
        temperature = read_temperature(data, where)
        cfg = self.config
        use_dynamic = bool(read_meta(data, "use_dynamic_bsz", where, cfg.log_prob_use_dynamic_bsz))
        micro_size = max_token_len = None
        if use_dynamic:
            max_token_len = positive_int(
                read_meta(data, "max_token_len", where, cfg.log_prob_max_token_len_per_gpu),
                "meta_info['max_token_len']",
            )
        else:
            micro_size = positive_int(
                read_meta(data, "micro_batch_size", where, cfg.log_prob_micro_batch_size_per_gpu),
                "meta_info['micro_batch_size']",
            )
        batch = select_batch(data, _FORWARD_KEYS, where)
        micro_batches, batch_idx = split_micro_batches(
            batch,
            micro_batch_size=micro_size,
            use_dynamic_bsz=use_dynamic,
            max_token_len=max_token_len,
            group_by_length=not self.use_remove_padding,
        )
        self.actor_module.eval()
        device = module_device(self.actor_module)
        log_probs, entropies = [], []
        with torch.no_grad():
            for micro in micro_batches:
                log_prob, entropy = self._forward_hook(
                    micro.to(device), temperature, calculate_entropy, need_entropy=calculate_entropy
                )
                log_probs.append(log_prob)
                entropies.append(entropy)
        log_prob = restore_order(log_probs, batch_idx)
        entropy = restore_order(entropies, batch_idx) if calculate_entropy else None
        return log_prob, entropy

    # ------------------------------------------------------------------ update

    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """PPO update over ``ppo_epochs x`` mini-batches of ``ppo_mini_batch_size`` samples.

        Needs responses, response_mask, input_ids, attention_mask, position_ids,
        advantages, old_log_probs (optional when the update is on-policy: one epoch
        over one mini-batch, where the ratio is 1 by construction), ref_log_prob when
        ``use_kl_loss``; uses rollout_is_weights when present. When the trainer
        leaves the rollout correction to an on-policy update (``meta_info`` key
        ``rollout_correction_in_update``), the weights and the ``rollout_corr/*``
        metrics come from this update's own forward and rollout_log_probs. Every micro-batch is scored by
        ``_forward_micro_batch`` and every step taken by ``_optimizer_step``. Returns lists of
        per-micro-batch ``actor/pg_loss``, ``actor/pg_clipfrac``, ``actor/ppo_kl``,
        ``actor/entropy`` (and ``actor/kl_loss``, ``actor/kl_coef``), per-step
        ``actor/grad_norm`` and ``actor/step_skipped``, and ``actor/lr``.
        """
        where = "DataParallelPPOActor.update_policy"
        if self.actor_optimizer is None:
            raise RuntimeError(f"{where}: this actor has no optimizer (a reference policy); pass actor_optimizer")
        cfg = self.config
        temperature = read_temperature(data, where)
        plan = UpdatePlan.from_config(cfg, "actor", group_by_length=not self.use_remove_padding)
        if plan.micro_batch_size is not None:
            self.gradient_accumulation = max(1, plan.mini_batch_size // plan.micro_batch_size)
        policy_loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)
        loss_config = _policy_loss_config(cfg)
        entropy_coeff = float(cfg.entropy_coeff)
        use_kl_loss = cfg.use_kl_loss
        kl_loss_coef = float(cfg.kl_loss_coef)
        kl_loss_type = cfg.kl_loss_type
        # On-policy (one epoch over one mini-batch) the ratio is 1 and the update's own forward gives the old
        # log-probs, unless the trainer supplied them: then they are the behaviour policy's (an async trainer's
        # period-start weights), and the ratio is taken against those.
        supplied = data.batch is not None and "old_log_probs" in data.batch.keys()
        on_policy = plan.epochs == 1 and plan.mini_batch_size >= len(data) and not supplied

        keys = [*_FORWARD_KEYS, "response_mask", "advantages"]
        if not on_policy:
            keys.append("old_log_probs")
        if use_kl_loss:
            keys.append("ref_log_prob")
        if data.batch is not None and "rollout_is_weights" in data.batch.keys():
            keys.append("rollout_is_weights")
        correction = data.meta_info.get(IN_UPDATE_KEY) if on_policy else None
        if correction is not None:
            keys.append("rollout_log_probs")
        batch = select_batch(data, keys, where)
        seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (log-probs, rollout's, mask) per micro

        def micro_loss(micro: TensorDict, scale: float) -> dict[str, Any]:
            response_mask = micro["response_mask"].float()
            log_prob, entropy = self._forward_hook(
                micro, temperature, calculate_entropy=True, need_entropy=entropy_coeff != 0
            )
            if response_mask.sum() == 0:
                # Nothing to learn from, but keep the backward so sharded wrappers run their hooks on every rank.
                (log_prob.sum() * 0.0).backward()
                return {}
            old_log_prob = log_prob.detach() if on_policy else micro["old_log_probs"]
            rollout_is_weights = micro.get("rollout_is_weights", None)
            if correction is not None:
                seen.append((old_log_prob, micro["rollout_log_probs"], micro["response_mask"]))
                rollout_is_weights = in_update_weights(
                    old_log_prob, micro["rollout_log_probs"], response_mask, correction
                )
            pg_loss, pg_metrics = policy_loss_fn(
                old_log_prob,
                log_prob,
                micro["advantages"],
                response_mask,
                loss_agg_mode=plan.loss_agg_mode,
                config=loss_config,
                rollout_is_weights=rollout_is_weights,
            )
            loss = pg_loss
            metrics: dict[str, Any] = {"actor/pg_loss": pg_loss.detach()}
            if entropy is not None:
                entropy_agg = agg_loss(entropy, response_mask, plan.loss_agg_mode)
                if entropy_coeff != 0:
                    loss = pg_loss - entropy_coeff * entropy_agg
                metrics["actor/entropy"] = entropy_agg.detach()
            if use_kl_loss:
                kld = kl_penalty(log_prob, micro["ref_log_prob"], kl_loss_type)
                kl_loss = agg_loss(kld, response_mask, plan.loss_agg_mode)
                loss = loss + kl_loss_coef * kl_loss
                metrics["actor/kl_loss"] = kl_loss.detach()
                metrics["actor/kl_coef"] = kl_loss_coef
            (loss * scale).backward()
            metrics.update(pg_metrics)
            return metrics

        # The default forward's entropy needs a gradient only when the loss uses it, or when an override of
        # _forward_micro_batch may build on it.
        overridden = type(self)._forward_micro_batch is not DataParallelPPOActor._forward_micro_batch
        previous, self._entropy_grad = self._entropy_grad, entropy_coeff != 0 or overridden
        try:
            metrics = run_updates(
                batch,
                plan,
                micro_loss,
                self.actor_module,
                self.actor_optimizer,
                self._shuffle_generator,
                "actor",
                optimizer_step=self._optimizer_step_norm,
            )
        finally:
            self._entropy_grad = previous
        if seen:
            log_prob, rollout_log_prob, response_mask = (torch.cat(parts) for parts in zip(*seen))
            for key, value in in_update_metrics(log_prob, rollout_log_prob, response_mask, correction).items():
                metrics[key] = [value]
        return metrics


def _forward_tensordict(micro_batch: Any) -> TensorDict:
    """The forward's four tensors of a hook's micro-batch (a dict or a TensorDict) as a TensorDict, no copies."""
    if isinstance(micro_batch, TensorDict):
        return micro_batch
    missing = [key for key in _FORWARD_KEYS if key not in micro_batch]
    if missing:
        raise KeyError(f"DataParallelPPOActor._forward_micro_batch needs micro_batch keys {missing}")
    return TensorDict({key: micro_batch[key] for key in _FORWARD_KEYS}, batch_size=[micro_batch["responses"].shape[0]])


def _policy_loss_config(cfg: FSDPActorConfig) -> FSDPActorConfig:
    """``cfg`` with a ``global_batch_info``: verl's losses, and recipes' losses written like them, aggregate with
    ``agg_loss(..., **config.global_batch_info)``. Here each micro-batch is normalised by its own counts and weighted
    by the update loop, so it carries only ``loss_scale_factor``, which the built-in losses also read."""
    if cfg.global_batch_info is not None:
        return cfg
    info = {} if cfg.loss_scale_factor is None else {"loss_scale_factor": cfg.loss_scale_factor}
    return dataclasses.replace(cfg, global_batch_info=info)
