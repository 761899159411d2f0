"""The batch plan: every derived batch size of a PPO step, computed once from the resolved config.

Units (docs/config.md, batch sizes): ``data.train_batch_size`` and ``*_mini_batch_size`` count prompts (each expands to
``rollout.n`` samples); ``*_micro_batch_size_per_gpu`` counts samples per process.

What is padded and what is refused:
- samples per step that do not divide over the processes of a forward-only pass (generation, old/ref log-probs,
  values) are padded up and the padding dropped afterwards: that is exact;
- a training update needs every rank to see the same number of real samples per mini-batch, so an uneven split over
  the trainer processes is refused, naming the keys; so is a mini-batch larger than the batch;
- micro-batches may be uneven (the last one is smaller): gradient accumulation weighs each micro-batch by its share
  of the mini-batch's tokens, so the update is the same; a micro size above the per-rank mini-batch means one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from verl.base_config import ConfigError

if TYPE_CHECKING:
    from verl.trainer.config.ppo_config import PPOConfig

__all__ = ["RankUpdateSizes", "compute_batch_plan", "format_batch_plan", "rank_update_sizes"]


def compute_batch_plan(config: PPOConfig) -> dict[str, Any]:
    """Derive every batch size of one step; raise :class:`ConfigError` naming the keys of an impossible plan.

    ``config`` is the typed :class:`~verl.trainer.config.ppo_config.PPOConfig` (a composed DictConfig converts with
    :func:`verl.trainer.config.to_ppo_config`, which checks this plan already).
    """
    return _plan(config)


def _plan(cfg: PPOConfig) -> dict[str, Any]:
    prompts = cfg.data.train_batch_size
    n = cfg.rollout.n
    samples = prompts * n
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    if cfg.rollout.nnodes > 0:
        rollout_world = cfg.rollout.nnodes * cfg.rollout.n_gpus_per_node
        rollout_world_keys = "rollout.nnodes * rollout.n_gpus_per_node"
    else:
        rollout_world = world
        rollout_world_keys = "trainer.nnodes * trainer.n_gpus_per_node"
    tp, dp = cfg.rollout.tensor_model_parallel_size, cfg.rollout.data_parallel_size
    if rollout_world % tp != 0:
        raise ConfigError(
            f"({tp}) does not divide the {rollout_world} rollout processes ({rollout_world_keys})",
            key="rollout.tensor_model_parallel_size",
        )
    if rollout_world % (tp * dp) != 0:  # one replica spans tp x dp GPUs
        raise ConfigError(
            f"({dp}) x rollout.tensor_model_parallel_size ({tp}) = {tp * dp} GPUs per replica does not divide the "
            f"{rollout_world} rollout processes ({rollout_world_keys})",
            key="rollout.data_parallel_size",
        )
    pad = (-samples) % world
    plan: dict[str, Any] = {
        "prompts_per_step": prompts,
        "rollout_n": n,
        "samples_per_step": samples,
        "trainer_world_size": world,
        "rollout_world_size": rollout_world,
        "rollout_replicas": rollout_world // (tp * dp),
        "forward_pad_samples": pad,
        "forward_samples_per_rank": (samples + pad) // world,
    }
    plan["actor"] = _update_plan("actor", cfg.actor, cfg, world)
    plan["actor"].update(
        _forward_plan(
            "actor.log_prob_micro_batch_size_per_gpu",
            cfg.actor.log_prob_micro_batch_size_per_gpu,
            cfg.actor.log_prob_use_dynamic_bsz,
            cfg.actor.log_prob_max_token_len_per_gpu,
            plan["forward_samples_per_rank"],
        )
    )
    use_ref = cfg.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    plan["ref"] = (
        _forward_plan(
            "ref.log_prob_micro_batch_size_per_gpu",
            cfg.ref.log_prob_micro_batch_size_per_gpu,
            cfg.ref.log_prob_use_dynamic_bsz,
            cfg.ref.log_prob_max_token_len_per_gpu,
            plan["forward_samples_per_rank"],
        )
        if use_ref
        else None
    )
    # is_enabled reads any estimator but "gae" (None included) as "no critic"
    if cfg.critic.is_enabled(cast(str, cfg.algorithm.adv_estimator)):
        critic = _update_plan("critic", cfg.critic, cfg, world)
        critic.update(
            _forward_plan(
                "critic.forward_micro_batch_size_per_gpu",
                cfg.critic.forward_micro_batch_size_per_gpu,
                cfg.critic.use_dynamic_bsz,
                cfg.critic.forward_max_token_len_per_gpu,
                plan["forward_samples_per_rank"],
            )
        )
        plan["critic"] = critic
    else:
        plan["critic"] = None
    return plan


@dataclass(frozen=True)
class RankUpdateSizes:
    """One trainer rank's share of an update, in samples: ``mini_batch_samples_per_rank`` per optimizer step,
    ``micro_batch_samples_per_rank`` per forward/backward pass. (``ppo_mini_batch_size`` counts prompts over every
    rank; these are what a worker trains on.)"""

    mini_batch_samples_per_rank: int
    micro_batch_samples_per_rank: int

    def as_verl_keys(self) -> dict[str, Any]:
        """The same sizes under the keys verl's ``DataParallelPPOActor`` / ``DataParallelPPOCritic`` read, which
        verl's workers rewrite in place to per-rank samples before building them."""
        return {
            "ppo_mini_batch_size": self.mini_batch_samples_per_rank,
            "ppo_micro_batch_size_per_gpu": self.micro_batch_samples_per_rank,
            "ppo_micro_batch_size": None,
        }


def rank_update_sizes(role: Any, group: str, rollout_n: int, world: int) -> RankUpdateSizes:
    """The per-rank sizes of ``role`` (an actor or critic config) over ``world`` trainer processes.

    A mini-batch must split evenly over the ranks: every rank takes the same number of optimizer steps, and an
    uneven split would weigh ranks' gradients unequally. A micro-batch larger than the rank's share is cut to it."""
    mini = int(role.ppo_mini_batch_size)
    samples = mini * int(rollout_n)
    if samples % world != 0:
        raise ConfigError(
            f"({mini}) x rollout.n ({rollout_n}) = {samples} samples do not split evenly over the {world} trainer "
            "processes (trainer.nnodes x trainer.n_gpus_per_node)",
            key=f"{group}.ppo_mini_batch_size",
        )
    per_rank = samples // world
    micro = role.micro_batch_size_per_gpu(world)
    return RankUpdateSizes(per_rank, min(int(micro), per_rank) if micro else per_rank)


def _update_plan(group: str, role: Any, cfg: PPOConfig, world: int) -> dict[str, Any]:
    prompts, n = cfg.data.train_batch_size, cfg.rollout.n
    mini = role.ppo_mini_batch_size
    if mini > prompts:
        raise ConfigError(
            f"({mini}) is larger than data.train_batch_size ({prompts}); both count prompts",
            key=f"{group}.ppo_mini_batch_size",
        )
    if (prompts * n) % world != 0:
        raise ConfigError(
            f"({prompts}) x rollout.n ({n}) = {prompts * n} samples do not split evenly over the {world} "
            "trainer processes (trainer.nnodes x trainer.n_gpus_per_node)",
            key="data.train_batch_size",
        )
    mini_samples = mini * n
    sizes = rank_update_sizes(role, group, n, world)
    per_rank = sizes.mini_batch_samples_per_rank
    last = prompts % mini
    out: dict[str, Any] = {
        "mini_batch_prompts": mini,
        "mini_batches_per_step": math.ceil(prompts / mini),
        "last_mini_batch_prompts": last or mini,
        "samples_per_mini_batch": mini_samples,
        "samples_per_rank_per_mini_batch": per_rank,
        "ppo_epochs": role.ppo_epochs,
        "optimizer_steps_per_step": math.ceil(prompts / mini) * role.ppo_epochs,
    }
    if role.use_dynamic_bsz:
        out["micro_batch_size_per_gpu"] = None
        out["micro_batches_per_mini_batch"] = f"dynamic (<= {role.ppo_max_token_len_per_gpu} tokens each)"
        return out
    micro = sizes.micro_batch_samples_per_rank
    out["micro_batch_size_per_gpu"] = micro
    out["micro_batches_per_mini_batch"] = math.ceil(per_rank / micro)
    if per_rank % micro:
        out["last_micro_batch_size"] = per_rank % micro
    return out


def _forward_plan(key: str, micro: int | None, dynamic: bool, max_tokens: int, per_rank: int) -> dict[str, Any]:
    if dynamic:
        return {
            "forward_micro_batch_size_per_gpu": None,
            "forward_micro_batches_per_rank": f"dynamic (<= {max_tokens} tokens each)",
        }
    micro = micro or per_rank
    return {"forward_micro_batch_size_per_gpu": micro, "forward_micro_batches_per_rank": math.ceil(per_rank / micro)}


_ROWS = (
    ("prompts per step", "prompts_per_step", "data.train_batch_size"),
    ("samples per prompt", "rollout_n", "rollout.n"),
    ("samples per step", "samples_per_step", "train_batch_size x rollout.n"),
    ("trainer processes", "trainer_world_size", "trainer.nnodes x trainer.n_gpus_per_node"),
    ("rollout processes", "rollout_world_size", "rollout.nnodes>0 ? rollout pool : trainer pool"),
    ("rollout replicas", "rollout_replicas", "rollout processes / (tensor_model_parallel_size x data_parallel_size)"),
    ("forward padding (samples)", "forward_pad_samples", "pad to a multiple of trainer processes"),
    ("forward samples per rank", "forward_samples_per_rank", "(samples + padding) / trainer processes"),
)
_ROLE_ROWS = (
    ("mini-batches per step", "mini_batches_per_step", "ceil(train_batch_size / ppo_mini_batch_size)"),
    ("prompts in last mini-batch", "last_mini_batch_prompts", "train_batch_size mod ppo_mini_batch_size"),
    ("samples per mini-batch", "samples_per_mini_batch", "ppo_mini_batch_size x rollout.n"),
    ("samples per rank per mini-batch", "samples_per_rank_per_mini_batch", "/ trainer processes"),
    ("micro-batch size per rank", "micro_batch_size_per_gpu", "ppo_micro_batch_size_per_gpu"),
    ("micro-batches per mini-batch", "micro_batches_per_mini_batch", "gradient accumulation steps"),
    ("optimizer steps per step", "optimizer_steps_per_step", "mini-batches x ppo_epochs"),
    ("forward micro-batch per rank", "forward_micro_batch_size_per_gpu", "log-prob / value micro size"),
    ("forward micro-batches per rank", "forward_micro_batches_per_rank", "last one may be smaller"),
)


def format_batch_plan(plan: dict[str, Any]) -> str:
    """A markdown table of the plan (printed by the trainer at start-up)."""
    lines = ["| quantity | value | from |", "|---|---|---|"]
    lines += [f"| {label} | {plan[key]} | {source} |" for label, key, source in _ROWS]
    for role in ("actor", "ref", "critic"):
        sub = plan.get(role)
        if sub is None:
            lines.append(f"| {role} | off | |")
            continue
        for label, key, source in _ROLE_ROWS:
            if key in sub:
                value = sub[key] if sub[key] is not None else "dynamic"
                lines.append(f"| {role}: {label} | {value} | {source} |")
    return "\n".join(["Batch plan", *lines])
