"""DataParallelPPOCritic: values over response tokens and the value regression, on one data-parallel rank.

The module is a Hugging Face model with one output per token (see
``verl.workers.critic.value_model``). The value of response token ``j`` is the
output at the position before it, the state in which the token was chosen,
which matches how the actor scores the same token.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import compute_value_loss
from verl.utils.config_builder import as_config
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.batching import positive_int, read_meta, restore_order, select_batch, split_micro_batches
from verl.workers.actor.hook_results import grad_norm_value, hook_name, model_inputs, value_outputs
from verl.workers.actor.optim_step import clip_and_step, resolve_grad_clip
from verl.workers.actor.token_forward import (
    forward_for_responses,
    module_device,
    pad_response_columns,
    trim_response_padding,
)
from verl.workers.actor.update_loop import UpdatePlan, run_updates
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig
from verl.workers.critic.base import BasePPOCritic

__all__ = ["DataParallelPPOCritic"]

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids", "response_mask"]


def critic_config(config: Any) -> CriticConfig:
    """``config`` as the ``CriticConfig`` the critic reads: itself, or an ``FSDPCriticConfig`` built from a DictConfig
    or dict (a recipe's own keys kept in ``_extra``)."""
    return config if isinstance(config, CriticConfig) else as_config(config, FSDPCriticConfig, "critic")


class DataParallelPPOCritic(BasePPOCritic):
    """Computes values (``compute_values``) and fits them to returns (``update_critic``).

    ``config`` is a ``CriticConfig`` (a DictConfig or dict is converted once, as an ``FSDPCriticConfig``), read
    by attribute: the ``ppo_*`` sizes (samples on this rank), ``forward_*``, ``shuffle``, ``data_loader_seed``,
    ``grad_clip``, ``cliprange_value``, ``loss_agg_mode`` and ``model.use_remove_padding`` (also the public
    attribute ``use_remove_padding``).

    Recipes subclass it and override verl's hooks, which both loops call through ``self``:
    ``_forward_micro_batch(micro_batch) -> values`` (``compute_values`` and every update micro-batch) and
    ``_optimizer_step() -> grad_norm`` (every optimizer step of ``update_critic``).
    """

    def __init__(self, config: Any, critic_module: nn.Module, critic_optimizer: torch.optim.Optimizer | None):
        super().__init__(critic_config(config))
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self.use_remove_padding = self.config.model.use_remove_padding
        self._shuffle_generator = torch.Generator()
        if self.config.data_loader_seed is not None:
            self._shuffle_generator.manual_seed(int(self.config.data_loader_seed))
        self.ulysses_sequence_parallel_size = 1  # every rank holds whole sequences (no Ulysses here)
        self.device_name = module_device(critic_module).type
        self.gradient_accumulation = 1  # micro-batches per mini-batch of the last fixed-size update

    def _forward_micro_batch(self, micro_batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Values ([B, R], float32) before each response token of ``micro_batch`` (``input_ids``,
        ``attention_mask``, ``position_ids``, ``responses``); unspecified at padded slots. Recipes override this
        hook; ``compute_values`` and ``update_critic`` both call it."""
        micro, cut = trim_response_padding(_forward_tensordict(micro_batch))
        flat, slots = forward_for_responses(
            self.critic_module,
            micro["input_ids"],
            micro["attention_mask"],
            micro["position_ids"],
            micro["responses"].shape[-1],
            self.use_remove_padding,
        )
        values = slots.take(flat)
        if values.dim() == 3:
            if values.shape[-1] != 1:
                raise ValueError(f"the critic module must output one value per token, got {values.shape[-1]}")
            values = values.squeeze(-1)
        return pad_response_columns(slots.clean(values.float()), cut)

    def _forward_hook(self, micro: TensorDict) -> torch.Tensor:
        """Call ``self._forward_micro_batch`` (a recipe's override included) as verl does and check its values."""
        values = self._forward_micro_batch(model_inputs(micro))
        where = hook_name(self, "_forward_micro_batch")
        return value_outputs(values, tuple(micro["responses"].shape), where)

    def _optimizer_step(self) -> torch.Tensor:
        """Clip the gradients to ``grad_clip`` and step the optimizer unless their norm is not finite; returns the
        norm (a 0-d tensor). ``update_critic`` calls it once per mini-batch and clears the gradients afterwards."""
        if self.critic_optimizer is None:
            raise RuntimeError(f"{hook_name(self, '_optimizer_step')}: this critic has no optimizer")
        max_norm = resolve_grad_clip(self.config.grad_clip, "critic.grad_clip")
        grad_norm, _ = clip_and_step(
            self.critic_module, self.critic_optimizer, max_norm, who="critic update", zero_grad=False
        )
        return torch.tensor(grad_norm)

    def _optimizer_step_norm(self) -> float:
        return grad_norm_value(self._optimizer_step(), hook_name(self, "_optimizer_step"))

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values [N, R], zero outside ``response_mask``.

        meta_info: ``micro_batch_size`` or ``use_dynamic_bsz`` + ``max_token_len``,
        defaulting to the config's ``forward_*`` fields and ``use_dynamic_bsz``.
        """
        where = "DataParallelPPOCritic.compute_values"
        cfg = self.config
        use_dynamic = bool(read_meta(data, "use_dynamic_bsz", where, cfg.use_dynamic_bsz))
        micro_size = max_token_len = None
        if use_dynamic:
            max_token_len = positive_int(
                read_meta(data, "max_token_len", where, cfg.forward_max_token_len_per_gpu),
                "meta_info['max_token_len']",
            )
        else:
            micro_size = positive_int(
                read_meta(data, "micro_batch_size", where, cfg.forward_micro_batch_size_per_gpu),
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
        self.critic_module.eval()
        device = module_device(self.critic_module)
        with torch.no_grad():
            values = restore_order([self._forward_hook(micro.to(device)) for micro in micro_batches], batch_idx)
        return values * batch["response_mask"].to(device=values.device, dtype=values.dtype)

    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """Clipped value regression over ``ppo_epochs x`` mini-batches.

        Needs the forward keys plus ``values`` (the values at rollout time, for
        clipping) and ``returns``. Returns lists of per-micro-batch
        ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``, per-step
        ``critic/grad_norm`` and ``critic/step_skipped``, and ``critic/lr``.
        """
        where = "DataParallelPPOCritic.update_critic"
        if self.critic_optimizer is None:
            raise RuntimeError(f"{where}: this critic has no optimizer; pass critic_optimizer")
        plan = UpdatePlan.from_config(self.config, "critic", group_by_length=not self.use_remove_padding)
        if plan.micro_batch_size is not None:
            self.gradient_accumulation = max(1, plan.mini_batch_size // plan.micro_batch_size)
        cliprange_value = self.config.cliprange_value
        batch = select_batch(data, [*_FORWARD_KEYS, "values", "returns"], where)

        def micro_loss(micro: TensorDict, scale: float) -> dict[str, Any]:
            response_mask = micro["response_mask"].float()
            vpreds = self._forward_hook(micro)
            if response_mask.sum() == 0:
                (vpreds.sum() * 0.0).backward()
                return {}
            vf_loss, vf_clipfrac = compute_value_loss(
                vpreds,
                micro["returns"],
                micro["values"],
                response_mask,
                cliprange_value=cliprange_value,
                loss_agg_mode=plan.loss_agg_mode,
            )
            (vf_loss * scale).backward()
            return {
                "critic/vf_loss": vf_loss.detach(),
                "critic/vf_clipfrac": vf_clipfrac,
                "critic/vpred_mean": masked_mean(vpreds.detach(), response_mask),
            }

        return run_updates(
            batch,
            plan,
            micro_loss,
            self.critic_module,
            self.critic_optimizer,
            self._shuffle_generator,
            "critic",
            optimizer_step=self._optimizer_step_norm,
        )


def _forward_tensordict(micro_batch: Any) -> TensorDict:
    """The forward's four tensors of a hook's micro-batch (a dict or a TensorDict) as a TensorDict, no copies."""
    if isinstance(micro_batch, TensorDict):
        return micro_batch
    keys = ["responses", "input_ids", "attention_mask", "position_ids"]
    missing = [key for key in keys if key not in micro_batch]
    if missing:
        raise KeyError(f"DataParallelPPOCritic._forward_micro_batch needs micro_batch keys {missing}")
    return TensorDict({key: micro_batch[key] for key in keys}, batch_size=[micro_batch["responses"].shape[0]])
