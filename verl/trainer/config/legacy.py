"""Translate verl's config spellings to the flattened groups, before Hydra (overrides) and after it (YAML files).

The rules live in :mod:`verl.trainer.config.key_rules`. In short::

    actor_rollout_ref.actor.*                   -> actor.*          (deprecation warning, docs/config.md)
    actor_rollout_ref.rollout.log_prob_*        -> actor.log_prob_*   (old log-probs are an actor computation)
    actor_rollout_ref.{ref,rollout,model}.*     -> {ref,rollout,model}.*
    custom_reward_function.*, sandbox_fusion.*  -> reward.*         (current in verl 0.9.1: no warning)
    reward_model.{reward_manager,num_workers,enable,model.path,rollout,...} -> reward.*  (idem)
    critic.fsdp.*                               -> critic.fsdp_config.*  (idem)
    critic.model.fsdp_config.*, model.use_rmpad, ... -> their current keys (deprecation warning)

Keys without effect are dropped with an ``InertConfigWarning``; values this build cannot honour stop start-up naming
the key. Precedence: a value the user set explicitly is never overwritten by a default. Command-line overrides beat
YAML files; a legacy block in a user's YAML beats the packaged defaults; the same key given explicitly in two
spellings with different values is an error that names both.

Two leniencies make verl's command lines work unchanged: ``+key=value`` (which Hydra refuses for a key the config
already has, as ours does for many keys verl's YAML lacked) is applied as ``++key=value``, and so are new keys under
the free-form mappings (``rollout.engine_kwargs.vllm.x=1`` needs no ``+``).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.base_config import ConfigError
from verl.trainer.config.derived_values import restore_derived_values
from verl.trainer.config.key_rules import (
    ANY,
    LEGACY_ROOT,
    LEGACY_ROOTS,
    Drop,
    Refuse,
    Rename,
    backend_error,
    config_leaves,
    find_rule,
)
from verl.trainer.config.packaged import packaged_mirror_defaults, packaged_raw_config

__all__ = [
    "FREE_FORM_KEYS",
    "LEGACY_ROOT",
    "LEGACY_ROOTS",
    "LegacyConfigWarning",
    "apply_global_micro_batch_sizes",
    "override_key",
    "translate_legacy_config",
    "translate_legacy_key",
    "translate_legacy_overrides",
]

logger = logging.getLogger(__name__)


class LegacyConfigWarning(FutureWarning):
    """A legacy (``actor_rollout_ref.*``-style) key was translated; shown to end users by default."""


# Mappings whose keys are the user's own (engine arguments, reward kwargs, ray.init arguments, ...).
FREE_FORM_KEYS = (
    "rollout.engine_kwargs",
    "rollout.checkpoint_engine.engine_kwargs",
    "reward.reward_kwargs",
    "reward.custom_reward_function.reward_kwargs",
    "model.override_config",
    "critic.model.override_config",
    "data.apply_chat_template_kwargs",
    "ray_kwargs",
)
_DROPPED = object()
_MAX_CHAIN = 4
_OVERRIDE_RE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<key>[^=]+?)(?:=(?P<value>.*))?$", re.DOTALL)


def _resolve_rule_chain(key: str) -> tuple[str | object, list[Any]]:
    """Follow the rules from ``key``: the final key (or ``_DROPPED``) and the rules applied on the way."""
    applied: list[Any] = []
    for _ in range(_MAX_CHAIN):
        rule = find_rule(key)
        if rule is None:
            return key, applied
        applied.append(rule)
        if not isinstance(rule, Rename):
            return _DROPPED, applied
        key = rule.new + key[len(rule.old) :]
    return key, applied


def translate_legacy_key(key: str) -> str | object:
    """The flattened key for a dotted ``key``; ``key`` itself when no rule applies; ``_DROPPED`` for keys without
    effect here. ``actor_rollout_ref.rollout.n`` -> ``rollout.n``."""
    if key in LEGACY_ROOTS:
        raise ConfigError("a whole legacy group cannot be overridden at once; override its keys one by one", key=key)
    return _resolve_rule_chain(key)[0]


def override_key(override: str) -> str:
    """The dotted key of a Hydra override string, without ``+``/``++``/``~`` prefix and value."""
    match = _OVERRIDE_RE.match(override.strip())
    return match.group("key").strip() if match else override


class _Reporter:
    """Collects the warning messages of one translation; each key (or YAML block) is named once."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._seen: set[str] = set()

    def rename(self, old: str, new: str) -> None:
        self._emit(
            old,
            f"config key '{old}' is deprecated; use '{new}' instead (translated automatically)",
            LegacyConfigWarning,
        )

    def rename_block(self, old: str, new: str, count: int) -> None:
        self._emit(
            old,
            f"config block '{old}' ({count} key{'s' if count != 1 else ''}) is deprecated; its keys "
            f"moved under '{new}' (translated automatically)",
            LegacyConfigWarning,
        )

    def inert(self, key: str, value: Any, reason: str) -> None:
        from verl.trainer.config.inert_keys import InertConfigWarning

        self._emit(key, f"config: {key}={value!r} has no effect in this build ({reason})", InertConfigWarning)

    def _emit(self, tag: str, message: str, category: type[Warning]) -> None:
        if tag in self._seen:
            return
        self._seen.add(tag)
        self.messages.append(message)
        logger.debug(message)
        warnings.warn(message, category, stacklevel=4)


def _null_is_unset(rules: list[Any]) -> bool:
    return bool(rules) and isinstance(rules[0], Rename) and rules[0].null_is_unset


def _check_value(key: str, rules: list[Any], value: Any, report: _Reporter) -> None:
    """Apply the Drop/Refuse rule that ended a chain to ``value``: warn, refuse, or stay silent."""
    rule = rules[-1]
    if isinstance(rule, Refuse):
        if value not in rule.allowed:
            raise ConfigError(f"{value!r} cannot be honoured here: {rule.reason}", key=key)
    elif isinstance(rule, Drop) and rule.reason is not None and (rule.default is ANY or value != rule.default):
        report.inert(key, value, rule.reason)


def _parsed_value(override: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(override).value()
    except Exception:  # not parseable here: Hydra will report it
        return override.partition("=")[2]


def _is_free_form(key: str) -> bool:
    return any(key.startswith(prefix + ".") for prefix in FREE_FORM_KEYS)


def translate_legacy_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Rewrite verl spellings in Hydra override strings; return ``(new_overrides, warning_messages)``.

    ``+key=v`` and new keys under free-form mappings become ``++key=v``. When two spellings set the same key, equal
    values collapse into one override and different values raise :class:`ConfigError` naming both.
    """
    result: list[str] = []
    report = _Reporter()
    origin: dict[str, str] = {}  # new key -> the override that set it
    for override in overrides:
        match = _OVERRIDE_RE.match(override.strip())
        if match is None or override.startswith("-"):
            result.append(override)
            continue
        prefix, key, value = match.group("prefix") or "", match.group("key").strip(), match.group("value")
        problem = backend_error(key)
        if problem is not None:
            raise ConfigError(problem, key=key)
        new_key, rules = _resolve_rule_chain(key) if key not in LEGACY_ROOTS else (translate_legacy_key(key), [])
        if _null_is_unset(rules) and value is not None and _parsed_value(override) is None:
            continue  # verl 0.9.1's way of leaving a top-level reward key unset
        if new_key is _DROPPED:
            if prefix != "~":
                _check_value(key, rules, _parsed_value(override), report)
            continue
        for rule in rules:
            if isinstance(rule, Rename) and rule.deprecated:
                report.rename(key, str(new_key))
                break
        if (
            prefix == "+"
            and "." in str(new_key)
            or (prefix == "" and value is not None and _is_free_form(cast(str, new_key)))
        ):
            prefix = "++"
        new_override = f"{prefix}{new_key}" + (f"={value}" if value is not None else "")
        previous = origin.get(str(new_key))
        if (
            previous is not None
            and previous != override
            and (rules or find_rule(override_key(previous)) or override_key(previous) != new_key)
        ):
            if _parsed_value(previous) != _parsed_value(override):
                raise ConfigError(
                    f"set twice with different values: '{previous}' and '{override}'; keep one of them",
                    key=str(new_key),
                )
            continue  # the same value given in both spellings
        origin[str(new_key)] = override
        result.append(new_override)
    return result, report.messages


def _rewrite_interpolations(value: Any) -> Any:
    """Point interpolations such as ``${actor_rollout_ref.actor.x}`` at the keys they moved to."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def repl(match: re.Match) -> str:
        new, rules = _resolve_rule_chain(match.group(0))
        return match.group(0) if new is _DROPPED or not rules else str(new)

    return re.sub(r"(?<![\w.])[A-Za-z_]\w*(?:\.\w+)+", repl, value)


_UNSET = object()


def _is_untouched_mirror(key: str, value: Any, raw_defaults: Any) -> bool:
    """True for a leaf of the packaged ``actor_rollout_ref`` mirror that still holds its packaged value: either the
    mirror's own packaged value (``ppo_trainer.yaml`` lists verl keys there that live elsewhere here) or the value
    of the flattened key it mirrors (``actor_rollout_ref.rollout.n`` mirrors ``rollout.n``). Without the packaged
    defaults nothing can be told apart and every leaf counts as set."""
    if raw_defaults is None or not key.startswith(LEGACY_ROOT + "."):
        return False

    mirrored = key[len(LEGACY_ROOT) + 1 :]
    packaged = _raw_select(packaged_mirror_defaults(), mirrored)
    if packaged is not _UNSET:
        return value == packaged
    default = _raw_select(raw_defaults, mirrored)
    return default is not _UNSET and value == default


def _raw_select(container: Any, key: str) -> Any:
    node = container
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _pop_leaves(cfg: DictConfig, keys: list[str]) -> None:
    """Delete ``keys`` from ``cfg`` and every mapping that became empty because of it."""
    with open_dict(cfg):
        for key in keys:
            parent_key, _, leaf = key.rpartition(".")
            parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
            if isinstance(parent, DictConfig) and leaf in parent.keys():  # `in parent` is False for ??? values
                del parent[leaf]
            while parent_key:
                parent = OmegaConf.select(cfg, parent_key)
                if not (isinstance(parent, DictConfig) and len(parent) == 0):
                    break
                grand_key, _, name = parent_key.rpartition(".")
                grand = OmegaConf.select(cfg, grand_key) if grand_key else cfg
                del grand[name]
                parent_key = grand_key


def _follow_moved_keys(cfg: DictConfig, raw: Any) -> None:
    """Point interpolations left in ``cfg`` (``${oc.select:actor_rollout_ref.rollout.name}``) at the moved keys."""
    for key, value in config_leaves(raw, ""):
        new_value = _rewrite_interpolations(value)
        if new_value != value:
            with open_dict(cfg):
                OmegaConf.update(cfg, key, new_value, merge=False, force_add=True)


def _report_blocks(moves: list[tuple[str, Any, list[Any]]], report: _Reporter) -> None:
    """One deprecation warning per deprecated rule a file used (naming how many keys it moved)."""
    blocks: dict[tuple[str, str], list[str]] = {}
    for old_key, _, rules in moves:
        rule = next((r for r in rules if isinstance(r, Rename) and r.deprecated), None)
        if rule is not None:
            blocks.setdefault((rule.old, rule.new), []).append(old_key)
    for (old, new), keys in blocks.items():
        if len(keys) == 1:
            report.rename(keys[0], keys[0].replace(old, new, 1))
        else:
            report.rename_block(old, new, len(keys))


def translate_legacy_config(
    cfg: DictConfig,
    explicit_keys: Iterable[str] = (),
    defaults: DictConfig | None = None,
) -> tuple[DictConfig, list[str]]:
    """Move verl-spelled keys of a composed config (e.g. from a user's YAML) onto the flattened groups, in place.

    ``explicit_keys``: flattened keys the user set on the command line; they win over the YAML's spelling.
    ``defaults``: the packaged default config; a flattened value that differs from it was set explicitly in a file,
    and a translated value that contradicts it raises :class:`ConfigError` naming both keys. Without ``defaults`` the
    translated value simply wins. One deprecation warning per translated block. Returns ``(cfg, warning_messages)``.
    """
    explicit = set(explicit_keys)
    report = _Reporter()
    if defaults is not None:  # a config resolved by recipe code: its derived keys were not set by anyone
        restore_derived_values(cfg, packaged_raw_config())
    # Compare unresolved values: an interpolation default (``${trainer.n_gpus_per_node}``) is still a default.
    raw_cfg = OmegaConf.to_container(cfg, resolve=False)
    raw_defaults = OmegaConf.to_container(defaults, resolve=False) if defaults is not None else None
    moves: list[tuple[str, Any, list[Any]]] = []
    untouched: list[str] = []  # leaves of the packaged mirror (ppo_trainer.yaml) nobody set: dropped silently
    for key, value in config_leaves(raw_cfg, ""):
        problem = backend_error(key)
        if problem is not None:
            raise ConfigError(problem, key=key)
        new_key, rules = _resolve_rule_chain(key)
        if not rules:
            continue
        if _is_untouched_mirror(key, value, raw_defaults) or (value is None and _null_is_unset(rules)):
            untouched.append(key)
        else:
            moves.append((key, value, rules))
    _pop_leaves(cfg, untouched + [key for key, _, _ in moves])
    # What the files set in the flattened spelling, once the translated keys are out of the way.
    raw_after = OmegaConf.to_container(cfg, resolve=False)
    _report_blocks(moves, report)
    _follow_moved_keys(cfg, raw_after)
    written: dict[str, tuple[str, Any]] = {}
    for old_key, value, rules in moves:
        new_key, _ = _resolve_rule_chain(old_key)
        if value is None and _null_is_unset(rules):
            continue  # verl 0.9.1's way of leaving a top-level reward key unset
        if new_key is _DROPPED:
            _check_value(old_key, rules, value, report)
            continue
        new_key = str(new_key)
        if new_key in explicit:
            continue  # the command line is the most explicit source
        value = _rewrite_interpolations(value)
        if value == f"${{{new_key}}}":
            continue  # an alias of the key itself (legacy_view.add_legacy_view): nothing to move
        other_key, current = written.get(new_key, (new_key, _raw_select(raw_after, new_key)))
        default = _raw_select(raw_defaults, new_key) if raw_defaults is not None else _UNSET
        file_set = new_key in written or (raw_defaults is not None and current is not _UNSET and current != default)
        if file_set and current != value:
            raise ConfigError(
                f"set twice with different values: '{old_key}: {value}' and '{other_key}: {current}'", key=new_key
            )
        written[new_key] = (old_key, value)
        with open_dict(cfg):
            OmegaConf.update(cfg, new_key, value, merge=False, force_add=True)
    apply_global_micro_batch_sizes(cfg, explicit)
    return cfg, report.messages


# deprecated global size -> the per-process size it sets; both counted in samples
_GLOBAL_SIZES = (
    ("actor.ppo_micro_batch_size", "actor.ppo_micro_batch_size_per_gpu"),
    ("critic.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu"),
    ("actor.log_prob_micro_batch_size", "actor.log_prob_micro_batch_size_per_gpu"),
    ("ref.log_prob_micro_batch_size", "ref.log_prob_micro_batch_size_per_gpu"),
    ("critic.forward_micro_batch_size", "critic.forward_micro_batch_size_per_gpu"),
    ("reward.reward_model.micro_batch_size", "reward.reward_model.micro_batch_size_per_gpu"),
)


def apply_global_micro_batch_sizes(cfg: DictConfig, explicit_keys: Iterable[str] = ()) -> None:
    """Turn verl's deprecated global forward micro-batch sizes into per-process sizes, as verl's workers do.

    ``X_micro_batch_size=G`` over ``trainer.nnodes x trainer.n_gpus_per_node`` processes sets
    ``X_micro_batch_size_per_gpu = max(1, G // processes)`` and clears the global key. Setting both explicitly is an
    error naming both keys.
    """
    explicit = set(explicit_keys)
    for global_key, per_gpu_key in _GLOBAL_SIZES:
        size = OmegaConf.select(cfg, global_key, default=None)
        if size is None:
            continue
        if per_gpu_key in explicit:
            raise ConfigError(
                f"set only one of {global_key} (deprecated, all processes) and {per_gpu_key}", key=global_key
            )
        processes = int(OmegaConf.select(cfg, "trainer.nnodes", default=1)) * int(
            OmegaConf.select(cfg, "trainer.n_gpus_per_node", default=1)
        )
        with open_dict(cfg):
            OmegaConf.update(cfg, per_gpu_key, max(1, int(size) // max(1, processes)), merge=False, force_add=True)
            OmegaConf.update(cfg, global_key, None, merge=False, force_add=True)
