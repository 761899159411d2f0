"""Build typed config dataclasses from OmegaConf nodes, naming the dotted key of every bad value.

Hydra already rejects unknown keys given on the command line; this module catches what Hydra cannot see: unknown keys
that arrive through a user's YAML file, values of the wrong type (``actor.ppo_epochs=abc``), and nested groups. The
conversion is recursive: a field annotated with a dataclass type is built from the nested node, ListConfig/DictConfig
become plain lists/dicts, and every error message starts with the dotted key.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.base_config import ConfigError

__all__ = ["ConfigError", "omega_conf_to_dataclass", "update_dict_with_config", "validate_config"]

T = TypeVar("T")


def omega_conf_to_dataclass(config: Any, dataclass_type: type[T] | None = None, *, path: str = "") -> T:
    """Build ``dataclass_type`` (or the class named by ``config._target_``) from an OmegaConf node or a dict.

    Interpolations are resolved; unknown keys and wrong types raise :class:`ConfigError` naming ``path.key``.
    ``path`` is the dotted prefix used in messages; by default the node's own position (``cfg.actor`` -> ``actor``).
    A config that already is an instance of the requested type is returned unchanged.
    """
    if dataclass_type is not None and isinstance(config, dataclass_type):
        return config
    if isinstance(config, DictConfig):
        if not path:  # a node taken from a bigger config knows where it lives: name keys by their full path
            path = config._get_full_key(None) or ""
        data = OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise ConfigError(f"{path or '<config>'}: expected a mapping to build a config from, got {_show(config)}")
    cls = _pick_class(data, dataclass_type, path)
    return _build(cls, data, path)


def update_dict_with_config(dictionary: dict, config: Any) -> None:
    """Overwrite the keys of ``dictionary`` that ``config`` also has (verl helper kept for compatibility)."""
    for key in dictionary:
        if hasattr(config, key):
            dictionary[key] = getattr(config, key)


def validate_config(config: Any, use_reference_policy: bool = True, use_critic: bool = True) -> Any:
    """Run the trainer's start-up checks on a composed config; raises :class:`ConfigError` naming the bad key.

    verl's recipes call this before building workers. The config may use verl's nested spelling
    (``actor_rollout_ref.actor.*``; translated on a copy, the argument is not modified) or the flattened groups.
    Every group is checked, so ``use_reference_policy`` / ``use_critic`` (which limit verl's checks to the roles in
    use) do not narrow anything here. Returns the typed :class:`~verl.trainer.config.PPOConfig`.
    """
    from verl.trainer.config.compose import default_ppo_config
    from verl.trainer.config.legacy import translate_legacy_config
    from verl.trainer.config.ppo_config import build_ppo_config

    del use_reference_policy, use_critic
    if isinstance(config, DictConfig):
        copy = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    elif isinstance(config, Mapping):
        copy = OmegaConf.create(dict(config))
    else:
        raise ConfigError(f"<config>: expected a DictConfig or a mapping, got {_show(config)}")
    _drop_legacy_view(copy)
    try:
        defaults = default_ppo_config()
    except Exception:  # noqa: BLE001 - the packaged defaults only sharpen conflict detection
        defaults = None
    copy, _ = translate_legacy_config(copy, defaults=defaults)
    OmegaConf.resolve(copy)
    return build_ppo_config(copy)


def _drop_legacy_view(config: DictConfig) -> None:
    """Remove the trainer's read-only ``actor_rollout_ref`` alias node (interpolations of the flattened groups):
    translating it back onto the groups it points at would make them refer to themselves."""
    from verl.trainer.config.legacy_view import LEGACY_VIEW_KEY

    node = config.get(LEGACY_VIEW_KEY) if LEGACY_VIEW_KEY in config else None
    if not isinstance(node, DictConfig):
        return
    raw = OmegaConf.to_container(node, resolve=False)
    aliases = {k: v for k, v in raw.items() if k != "hybrid_engine"}
    if aliases and all(v == f"${{{k}}}" for k, v in aliases.items()):
        del config[LEGACY_VIEW_KEY]


# ---------------------------------------------------------------------------------------------------------------------
def _pick_class(data: dict, requested: type | None, path: str) -> type:
    target = data.get("_target_")
    if target is None:
        if requested is None:
            raise ConfigError(f"{path or '<config>'}: no dataclass_type given and the node has no _target_")
        return requested
    cls = _import_target(target, path)
    if requested is not None and not (isinstance(cls, type) and issubclass(cls, requested)):
        raise ConfigError(f"{_join(path, '_target_')}: {target} is not a subclass of the expected {requested.__name__}")
    return cls


def _import_target(target: str, path: str) -> type:
    module_name, _, attr = str(target).rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{_join(path, '_target_')}: cannot import {target!r} ({exc})") from exc
    if not dataclasses.is_dataclass(obj):
        raise ConfigError(f"{_join(path, '_target_')}: {target} is not a dataclass")
    return obj


def _build(cls: type, data: dict, path: str) -> Any:
    hints = typing.get_type_hints(cls)
    init_fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key == "_target_":
            continue
        if key not in init_fields:
            close = difflib.get_close_matches(str(key), list(init_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{_join(path, key)}: unknown key for {cls.__name__}{hint}")
        kwargs[key] = _convert(value, hints.get(key, Any), _join(path, key))
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        if exc.key is None:
            raise
        raise ConfigError(exc.detail, key=_join(path, exc.key)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against annotation ``tp``, building nested dataclasses and plain containers."""
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(value, args, path)
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(f"{path}: expected one of {list(args)}, got {_show(value)}")
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        return _convert_sequence(value, tp, origin or tp, args, path)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_show(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _convert(v, vt, f"{path}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping for {tp.__name__}, got {_show(value)}")
        return _build(_pick_class(dict(value), tp, path), dict(value), path)
    return _convert_scalar(value, tp, path)


def _convert_union(value: Any, args: tuple, path: str) -> Any:
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{path}: expected {_type_name_union(args)}, got None")
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(value, arg, path)
        except ConfigError as exc:
            errors.append(exc)
    # A nested config error is more useful than "expected X | None".
    for exc in errors:
        if not str(exc).startswith(f"{path}: expected"):
            raise exc
    raise ConfigError(f"{path}: expected {_type_name_union(args)}, got {_show(value)}")


def _convert_sequence(value: Any, tp: Any, origin: Any, args: tuple, path: str) -> Any:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
        raise ConfigError(f"{path}: expected a list, got {_show(value)}")
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise ConfigError(f"{path}: expected {len(args)} items, got {len(value)}")
        return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    item_tp = args[0] if args else Any
    items = [_convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
    return origin(items) if origin in (tuple, set, frozenset) else items


def _convert_scalar(value: Any, tp: Any, path: str) -> Any:
    if tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        return value  # an annotation this checker does not understand: accept as is
    raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_show(value)}")


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__name__
    return str(tp).replace("typing.", "")


def _type_name_union(args: tuple) -> str:
    return " | ".join(_type_name(a) for a in args)


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)
