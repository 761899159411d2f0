"""The recipe's algorithm, registered by name so that verl's command line can pick it.

- ``algorithm.adv_estimator=loo_grpo``: GRPO with a leave-one-out baseline. Each response is compared with the mean
  of the *other* responses to its prompt, so the baseline does not contain the response's own reward and the
  gradient estimate stays unbiased (GRPO's in-group mean shrinks every advantage by (n-1)/n).
- ``actor_rollout_ref.actor.policy_loss.loss_mode=log_clip``: the PPO clipped surrogate with a trust region that is
  symmetric in log space, ``|log(pi/pi_old)| <= clip_ratio``, so raising and lowering a token's probability by the
  same factor are treated alike; it reports ``recipe/log_clip/*`` metrics of its own.

The trainer looks the estimator up in its process and the actor workers look the loss up in theirs, so this module
must be imported in every Ray process: the recipe's config names it in
``ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES``, which ``import verl`` honours.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl.trainer.ppo.core_algos import agg_loss, register_adv_est, register_policy_loss

ESTIMATOR_NAME = "loo_grpo"
LOSS_NAME = "log_clip"


@register_adv_est(ESTIMATOR_NAME)
def compute_loo_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage: score minus the leave-one-out group mean, divided by the group std (unless
    ``algorithm.norm_adv_by_std_in_grpo=false``); a prompt with a single response gets 0.

    Returns are the Monte-Carlo returns (rewards to go), not the advantages, so a run shows which estimator made them.
    """
    mask = response_mask.to(token_level_rewards.dtype)
    scores = (token_level_rewards * mask).sum(dim=-1)
    normalise = bool(getattr(config, "norm_adv_by_std_in_grpo", True))  # upstream passes it in the config
    rows_of = defaultdict(list)
    for row, uid in enumerate(index if index is not None else range(len(scores))):
        rows_of[uid].append(row)
    advantages = torch.zeros_like(scores)
    for rows in rows_of.values():
        if len(rows) < 2:
            continue
        group = scores[rows]
        others_mean = (group.sum() - group) / (len(rows) - 1)
        adv = group - others_mean
        advantages[rows] = adv / (group.std() + epsilon) if normalise else adv
    to_go = torch.flip(torch.cumsum(torch.flip(token_level_rewards * mask, dims=[-1]), dim=-1), dims=[-1])
    return advantages.unsqueeze(-1) * mask, to_go * mask


@register_policy_loss(LOSS_NAME)
def compute_policy_loss_log_clip(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config=None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO surrogate max(-A r, -A clip_log(r)) with the ratio clipped to [exp(-eps), exp(eps)], eps =
    ``actor.clip_ratio``; ``recipe/log_clip/clipfrac`` counts the tokens whose clipped branch won and
    ``recipe/log_clip/max_abs_log_ratio`` shows how far the update had moved from the rollout policy."""
    eps = float(config.clip_ratio)
    mask = response_mask.bool()
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.exp(torch.clamp(log_ratio, min=-eps, max=eps))
    pg_losses = torch.maximum(unclipped, clipped)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )

    clipfrac = (clipped > unclipped)[mask].float().mean() if mask.any() else torch.zeros(())
    abs_log_ratio = log_ratio.detach().abs()[mask]
    ppo_kl = (-log_ratio.detach())[mask].mean() if mask.any() else torch.zeros(())
    return pg_loss, {
        "actor/pg_clipfrac": clipfrac.item(),
        "actor/ppo_kl": ppo_kl.item(),
        "actor/pg_clipfrac_lower": 0.0,
        "recipe/log_clip/clipfrac": clipfrac.item(),
        "recipe/log_clip/max_abs_log_ratio": abs_log_ratio.max().item() if abs_log_ratio.numel() else 0.0,
    }
