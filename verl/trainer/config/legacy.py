"""Translate verl's legacy config layout to the flattened groups, one deprecation warning per legacy key.

Old layout -> new group (DESIGN.md section 6)::

    actor_rollout_ref.actor.*                   -> actor.*
    actor_rollout_ref.ref.*                     -> ref.*
    actor_rollout_ref.rollout.log_prob_*        -> actor.log_prob_*   (old log-probs are an actor computation)
    actor_rollout_ref.rollout.*                 -> rollout.*
    actor_rollout_ref.model.*                   -> model.*
    actor_rollout_ref.hybrid_engine, .nccl_timeout  -> dropped (no effect here)
    reward_model.reward_manager / reward_kwargs / launch_reward_fn_async -> reward.<same>
    reward_model.*                              -> reward.reward_model.*
    custom_reward_function.*                    -> reward.custom_reward_function.*

Precedence: a value the user set explicitly is never overwritten by a default. Command-line overrides beat YAML
files; a legacy block in a user's YAML beats the packaged defaults; the same key given explicitly in both forms with
different values is an error that names both spellings.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.base_config import ConfigError

__all__ = [
    "LEGACY_ROOTS",
    "LegacyConfigWarning",
    "override_key",
    "translate_legacy_config",
    "translate_legacy_key",
    "translate_legacy_overrides",
]

logger = logging.getLogger(__name__)


class LegacyConfigWarning(FutureWarning):
    """A legacy (``actor_rollout_ref.*``-style) key was translated; shown to end users by default."""


# Ordered: the first matching prefix wins, so specific rules come before their parents.
_RULES: tuple[tuple[str, str | None], ...] = (
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "actor.log_prob_micro_batch_size_per_gpu"),
    ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", "actor.log_prob_use_dynamic_bsz"),
    ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "actor.log_prob_max_token_len_per_gpu"),
    ("actor_rollout_ref.hybrid_engine", None),
    ("actor_rollout_ref.nccl_timeout", None),
    ("actor_rollout_ref.actor", "actor"),
    ("actor_rollout_ref.ref", "ref"),
    ("actor_rollout_ref.rollout", "rollout"),
    ("actor_rollout_ref.model", "model"),
    ("reward_model.reward_manager", "reward.reward_manager"),
    ("reward_model.reward_kwargs", "reward.reward_kwargs"),
    ("reward_model.launch_reward_fn_async", "reward.launch_reward_fn_async"),
    ("reward_model", "reward.reward_model"),
    ("custom_reward_function", "reward.custom_reward_function"),
)
LEGACY_ROOTS = ("actor_rollout_ref", "reward_model", "custom_reward_function")
_DROPPED = object()
_OVERRIDE_RE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[^=]+?)(?:=(?P<value>.*))?$", re.DOTALL)


def translate_legacy_key(key: str) -> str | None | object:
    """The flattened key for a legacy dotted ``key``; ``key`` itself when it is not legacy; ``_DROPPED`` for keys
    that have no effect any more. ``actor_rollout_ref.rollout.n`` -> ``rollout.n``."""
    for old, new in _RULES:
        if key == old or key.startswith(old + "."):
            if new is None:
                return _DROPPED
            return new + key[len(old):]
    if key in LEGACY_ROOTS:
        raise ConfigError("a whole legacy group cannot be overridden at once; override its keys one by one", key=key)
    return key


def _is_legacy(key: str) -> bool:
    return key.split(".", 1)[0] in LEGACY_ROOTS


def _warn(old: str, new: str | None, seen: set[str], messages: list[str]) -> None:
    if old in seen:
        return
    seen.add(old)
    if new is None:
        msg = f"config key '{old}' is deprecated and has no effect; it was ignored"
    else:
        msg = f"config key '{old}' is deprecated; use '{new}' instead (translated automatically)"
    messages.append(msg)
    logger.debug(msg)
    warnings.warn(msg, LegacyConfigWarning, stacklevel=3)


def override_key(override: str) -> str:
    """The dotted key of a Hydra override string, without ``+``/``++``/``~`` prefix and value."""
    match = _OVERRIDE_RE.match(override.strip())
    return match.group("key").strip() if match else override


def translate_legacy_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Rewrite legacy keys in Hydra override strings; return ``(new_overrides, warning_messages)``.

    ``+old.key=v`` becomes ``++new.key=v`` (the flattened groups already define most keys that the legacy layout
    needed ``+`` for). When a legacy override and a flattened one set the same key, equal values collapse into one
    override and different values raise :class:`ConfigError` naming both.
    """
    result: list[str] = []
    messages: list[str] = []
    seen: set[str] = set()
    origin: dict[str, tuple[str, str | None, int]] = {}  # new key -> (original override, value, index in result)
    for override in overrides:
        match = _OVERRIDE_RE.match(override.strip())
        if match is None or override.startswith("-"):
            result.append(override)
            continue
        prefix, key, value = match.group("prefix") or "", match.group("key").strip(), match.group("value")
        new_key = translate_legacy_key(key) if _is_legacy(key) else key
        if new_key is _DROPPED:
            _warn(key, None, seen, messages)
            continue
        if new_key != key:
            _warn(key, new_key, seen, messages)
            if prefix == "+":
                prefix = "++"
        new_override = f"{prefix}{new_key}" + (f"={value}" if value is not None else "")
        previous = origin.get(new_key)
        if previous is not None and (previous[0] != override) and (_is_legacy(key) or _is_legacy(
                override_key(previous[0]))):
            if not _same_value(previous[0], override):
                raise ConfigError(
                    f"set twice with different values: '{previous[0]}' and '{override}'; keep one of them",
                    key=new_key,
                )
            continue  # the same value given in both spellings
        origin[new_key] = (override, value, len(result))
        result.append(new_override)
    return result, messages


def _same_value(first: str, second: str) -> bool:
    """Compare two overrides' values as Hydra parses them (``1e-5`` equals ``0.00001``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    try:
        return parser.parse_override(first).value() == parser.parse_override(second).value()
    except Exception:  # not parseable here: Hydra will report it; fall back to the text
        return first.partition("=")[2] == second.partition("=")[2]


def _rewrite_interpolations(value: Any) -> Any:
    """Point ``${actor_rollout_ref.actor.x}``-style interpolations at the flattened keys."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def repl(match: re.Match) -> str:
        new = translate_legacy_key(match.group(0))
        return match.group(0) if new is _DROPPED else str(new)

    return re.sub(r"(?:actor_rollout_ref|reward_model|custom_reward_function)(?:\.[A-Za-z0-9_]+)*", repl, value)


def _leaves(node: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}")
    else:
        yield prefix, node


_UNSET = object()


def translate_legacy_config(
    cfg: DictConfig,
    explicit_keys: Iterable[str] = (),
    defaults: DictConfig | None = None,
) -> tuple[DictConfig, list[str]]:
    """Move legacy blocks of a composed config (e.g. from a user's YAML) onto the flattened groups, in place.

    ``explicit_keys``: flattened keys the user set on the command line; they win over the legacy block.
    ``defaults``: the packaged default config; a flattened value that differs from it was set explicitly in a file,
    and a legacy value that contradicts it raises :class:`ConfigError` naming both keys. Without ``defaults`` the
    legacy block simply wins over the file's flattened values. Returns ``(cfg, warning_messages)``.
    """
    explicit = set(explicit_keys)
    messages: list[str] = []
    seen: set[str] = set()
    # Compare unresolved values: an interpolation default (``${trainer.n_gpus_per_node}``) is still a default.
    raw_cfg = OmegaConf.to_container(cfg, resolve=False)
    raw_defaults = OmegaConf.to_container(defaults, resolve=False) if defaults is not None else None
    for root in LEGACY_ROOTS:
        if root not in cfg:
            continue
        block = OmegaConf.to_container(cfg[root], resolve=False)
        with open_dict(cfg):
            del cfg[root]
        if not isinstance(block, dict):
            raise ConfigError(f"expected a mapping, got {block!r}", key=root)
        for old_key, value in _leaves(block, root):
            new_key = translate_legacy_key(old_key)
            if new_key is _DROPPED:
                _warn(old_key, None, seen, messages)
                continue
            _warn(old_key, str(new_key), seen, messages)
            if new_key in explicit:
                continue  # the command line is the most explicit source
            value = _rewrite_interpolations(value)
            if raw_defaults is not None:
                current, default = _raw_select(raw_cfg, str(new_key)), _raw_select(raw_defaults, str(new_key))
                if current is not _UNSET and current != default and current != value:
                    raise ConfigError(
                        f"set twice with different values: '{old_key}: {value}' and '{new_key}: {current}'",
                        key=new_key,
                    )
            with open_dict(cfg):
                OmegaConf.update(cfg, str(new_key), value, merge=False, force_add=True)
    return cfg, messages


def _raw_select(container: Any, key: str) -> Any:
    node = container
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node
