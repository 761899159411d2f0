"""Where each of verl's config spellings lands in the flattened groups: the table behind ``legacy.py``.

Every rule names a key prefix and says what happens to each key under it (the first matching rule wins, so
specific rules come before their parents; a renamed key is matched again, so rules chain):

- :class:`Rename` moves it. Spellings that are current in verl 0.9.1 (``custom_reward_function.*``, the 0.9.1
  ``reward_model.*`` keys, ``critic.fsdp.*``) move silently; spellings verl itself retired, and verl's nested
  ``actor_rollout_ref.*`` layout (docs/config.md), move with one deprecation warning. verl 0.9.1's top-level
  reward keys are null unless set, so a null there moves nothing.
- :class:`Drop` removes it. A value other than verl's default is named in an ``InertConfigWarning`` with the
  reason it has no effect here; ``reason=None`` drops it silently (class paths of verl's own dataclasses).
- :class:`Refuse` removes it when its value is one this build also does, and stops start-up naming the key
  otherwise.

Settings of verl's Megatron-LM engine (any key with a ``megatron`` segment) are refused by :func:`backend_error`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANY",
    "LEGACY_ROOT",
    "LEGACY_ROOTS",
    "RULES",
    "Drop",
    "Refuse",
    "Rename",
    "backend_error",
    "config_leaves",
    "find_rule",
]

# verl's nested group of the policy roles: the one name of it in this package
LEGACY_ROOT = "actor_rollout_ref"
# verl's top-level blocks whose keys move into the flattened groups
LEGACY_ROOTS = (LEGACY_ROOT, "reward_model", "custom_reward_function", "sandbox_fusion")


def config_leaves(node: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of a plain nested dict (an empty dict is a leaf), under ``prefix``."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from config_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


ANY = object()  # Drop.default: no value is verl's default, every value set is reported


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    deprecated: bool = True
    null_is_unset: bool = False  # verl 0.9.1's top-level reward keys default to null, meaning "not set"


@dataclass(frozen=True)
class Drop:
    old: str
    reason: str | None
    default: Any = ANY


@dataclass(frozen=True)
class Refuse:
    old: str
    allowed: tuple[Any, ...]
    reason: str


Rule = Rename | Drop | Refuse

_NO_RM_MODULE = (
    "custom reward-manager classes are not imported by path here; register the class with "
    "verl.workers.reward_manager.register in a module you import and name it in reward.reward_manager"
)

RULES: tuple[Rule, ...] = (
    # verl's nested layout (old log-probs are an actor computation, so those rollout keys move to the actor).
    Rename("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor.log_prob_micro_batch_size_per_gpu"),
    Rename("actor_rollout_ref.rollout.log_prob_micro_batch_size", "actor.log_prob_micro_batch_size"),
    Rename("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", "actor.log_prob_use_dynamic_bsz"),
    Rename("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "actor.log_prob_max_token_len_per_gpu"),
    Drop("actor_rollout_ref.hybrid_engine", "actor and rollout share processes unless rollout.nnodes > 0", True),
    Drop("actor_rollout_ref.nccl_timeout", "process-group timeouts are not configurable here", 600),
    Rename("actor_rollout_ref.actor", "actor"),
    Rename("actor_rollout_ref.ref", "ref"),
    Rename("actor_rollout_ref.rollout", "rollout"),
    Rename("actor_rollout_ref.model", "model"),
    # verl 0.9.1's top-level reward keys, which its own trainer moves under `reward` at start-up.
    *(
        Rename(f"reward_model.{old}", f"reward.{new}", deprecated=False, null_is_unset=True)
        for old, new in (
            ("reward_manager", "reward_manager"),
            ("reward_kwargs", "reward_kwargs"),
            ("num_workers", "num_workers"),
            ("reward_loop_source", "reward_manager.source"),
            ("reward_loop_module_path", "reward_manager.module.path"),
            ("reward_loop_class_name", "reward_manager.module.name"),
        )
    ),
    *(
        Rename(f"reward_model.{key}", f"reward.reward_model.{key}", deprecated=False, null_is_unset=True)
        for key in (
            "enable",
            "enable_resource_pool",
            "n_gpus_per_node",
            "nnodes",
            "model.path",
            "model.external_lib",
            "model.trust_remote_code",
            "rollout",
        )
    ),
    Rename("reward_model.launch_reward_fn_async", "reward.launch_reward_fn_async", null_is_unset=True),
    Rename("reward_model.sandbox_fusion_url", "reward.sandbox_fusion.url"),
    Drop("reward_model.use_reward_loop", "rewards are always computed by the reward manager (reward.*)", True),
    Rename("reward_model", "reward.reward_model"),
    Rename("custom_reward_function", "reward.custom_reward_function", deprecated=False, null_is_unset=True),
    Rename("sandbox_fusion", "reward.sandbox_fusion", deprecated=False, null_is_unset=True),
    # verl 0.9.1 spellings inside the groups.
    Rename("reward.reward_manager.name", "reward.reward_manager", deprecated=False),
    Refuse("reward.reward_manager.source", ("register",), _NO_RM_MODULE),
    Drop("reward.reward_manager.module.path", _NO_RM_MODULE, None),
    Drop("reward.reward_manager.module.name", _NO_RM_MODULE, "custom_reward_manager"),
    Drop("reward.reward_manager.module", None),
    Drop("reward.reward_manager._target_", None),
    Rename("reward.reward_model.model_path", "reward.reward_model.model.path", deprecated=False),
    Rename("critic.fsdp", "critic.fsdp_config", deprecated=False),
    Rename(
        "rollout.checkpoint_engine.update_weights_bucket_megabytes",
        "rollout.checkpoint_engine.bucket_megabytes",
        deprecated=False,
    ),
    # Spellings older verl releases used.
    Rename("critic.model.fsdp_config", "critic.fsdp_config"),
    Rename("model.use_rmpad", "model.use_remove_padding"),
    Rename("critic.model.use_rmpad", "critic.model.use_remove_padding"),
    Rename("actor.checkpoint.contents", "actor.checkpoint.save_contents"),
    Rename("critic.checkpoint.contents", "critic.checkpoint.save_contents"),
    Rename("ref.param_offload", "ref.fsdp_config.param_offload"),
    *(
        Drop(f"{group}.fsdp_config.grad_offload", "verl removed it: gradients are sharded with the parameters", False)
        for group in ("actor", "ref", "critic")
    ),
    *(
        Drop(f"ref.{key}", "the reference policy stays the initial model (no periodic sync with the actor)", default)
        for key, default in (("sync_ref_model", False), ("ref_model_sync_steps", ANY), ("ref_model_mixup_alpha", ANY))
    ),
    Drop("reward.reward_model.model.fsdp_config", "the reward model's processes hold it whole; nothing is sharded"),
    Drop("reward.reward_model.model.use_remove_padding", "the reward model scores padded batches"),
)


def _matches(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def find_rule(key: str) -> Rule | None:
    """The first rule whose prefix covers the dotted ``key``, or None."""
    for rule in RULES:
        if _matches(key, rule.old):
            return rule
    return None


def backend_error(key: str) -> str | None:
    """Why ``key`` cannot be accepted because it configures a backend this build lacks; None when it can."""
    parts = key.split(".")
    if "megatron" in parts:
        return (
            "a setting of verl's Megatron-LM engine, which this build does not include (the trainer engine is "
            "FSDP/FSDP2: actor.strategy=fsdp|fsdp2, sharding under *.fsdp_config)"
        )
    return None
