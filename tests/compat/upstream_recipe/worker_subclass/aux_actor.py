"""The recipe's actor: verl's ``DataParallelPPOActor`` with an auxiliary loss.

From each response's mean log-prob and mean entropy (what ``_forward_micro_batch`` scores, detached) the policy's
``aux_head`` predicts whether the response beat its group (advantage > 0). The head's loss is collected per
micro-batch in ``_forward_micro_batch`` and back-propagated in ``_optimizer_step`` just before the policy's step, so
one optimizer moves both; ``update_policy`` reports the head's metrics under ``aux/``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from verl.workers.actor.dp_actor import DataParallelPPOActor


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a parameter, sharded (FSDP2) or not."""
    tensor = tensor.detach()
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


class AuxCalibrationActor(DataParallelPPOActor):
    def __init__(self, config, actor_module, actor_optimizer=None):
        super().__init__(config, actor_module, actor_optimizer)
        self.aux_losses: list[torch.Tensor] = []  # this mini-batch's losses, with their graphs, until the step
        self.aux_loss_log: list[float] = []
        self.scoring_calls = 0
        self.update_calls = 0
        self.optimizer_steps = 0
        self.aux_init = [_full(p).clone() for p in actor_module.aux_head.parameters()]

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        entropy, log_prob = super()._forward_micro_batch(micro_batch, temperature=temperature, calculate_entropy=True)
        if "advantages" not in micro_batch or not torch.is_grad_enabled():
            self.scoring_calls += 1  # compute_log_prob: scoring only
            return (entropy if calculate_entropy else None), log_prob
        self.update_calls += 1
        mask = micro_batch["response_mask"].float()
        count = mask.sum(-1).clamp(min=1.0)
        features = torch.stack(
            [(log_prob.detach() * mask).sum(-1) / count, (entropy.detach() * mask).sum(-1) / count], dim=-1
        )
        logits = self.actor_module.aux_head(features).squeeze(-1)
        beat_group = (micro_batch["advantages"][:, 0] > 0).float()
        loss = F.binary_cross_entropy_with_logits(logits, beat_group)
        self.aux_losses.append(loss)
        self.aux_loss_log.append(float(loss.detach()))
        return (entropy if calculate_entropy else None), log_prob

    def _optimizer_step(self):
        if self.aux_losses:
            torch.stack(self.aux_losses).mean().backward()
            self.aux_losses.clear()
        self.optimizer_steps += 1
        return super()._optimizer_step()

    def update_policy(self, data):
        self.update_calls = self.optimizer_steps = 0
        self.aux_loss_log.clear()
        metrics = super().update_policy(data)
        head = self.actor_module.aux_head.parameters()
        shift = sum(float((_full(p) - p0).norm()) for p, p0 in zip(head, self.aux_init))
        metrics["aux/calibration_loss"] = list(self.aux_loss_log)
        metrics["aux/weight_shift"] = [shift]
        metrics["aux/update_calls"] = [float(self.update_calls)]
        metrics["aux/scoring_calls"] = [float(self.scoring_calls)]
        metrics["aux/optimizer_steps"] = [float(self.optimizer_steps)]
        metrics["aux/mini_batch_size"] = [float(self.config.ppo_mini_batch_size)]
        self.scoring_calls = 0
        return metrics
