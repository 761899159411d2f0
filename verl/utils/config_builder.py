"""Build typed config dataclasses from OmegaConf nodes, naming the dotted key of every bad value.

The config packages (`verl/trainer/config`, `verl/workers/config`) import this module, never `verl.utils.config`
(verl's public facade, which serves the trainer's `validate_config` by name).

Hydra already rejects unknown keys given on the command line; this module catches what Hydra cannot see: unknown keys
that arrive through a user's YAML file, values of the wrong type (``actor.ppo_epochs=abc``), and nested groups. The
conversion is recursive: a field annotated with a dataclass type is built from the nested node, ListConfig/DictConfig
become plain lists/dicts, and every error message starts with the dotted key.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import functools
import importlib
import types
import typing
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.base_config import ConfigError

__all__ = ["ConfigError", "as_config", "duck_typed_class", "omega_conf_to_dataclass"]

T = TypeVar("T")
# Set while building a trainer config whose groups keep a recipe's own keys (omega_conf_to_dataclass keep_unknown).
_KEEP_UNKNOWN: contextvars.ContextVar[bool] = contextvars.ContextVar("keep_unknown", default=False)
# An unknown key this close to a field name (difflib ratio) is a misspelling, refused even where keys are kept.
_TYPO_CUTOFF = 0.85


def omega_conf_to_dataclass(
    config: Any, dataclass_type: type[T] | None = None, *, path: str = "", keep_unknown: bool = False
) -> T:
    """Build ``dataclass_type`` (or the class named by ``config._target_``) from an OmegaConf node or a dict.

    Interpolations are resolved; unknown keys and wrong types raise :class:`ConfigError` naming ``path.key``.
    ``path`` is the dotted prefix used in messages; by default the node's own position (``cfg.actor`` -> ``actor``).
    A config that already is an instance of the requested type is returned unchanged.

    ``keep_unknown``: a key no field declares is a recipe's own (its YAML extends ours) and is kept in the config's
    ``_extra`` (read as an attribute) instead of refused; one within a typo of a field name is still refused.
    A recipe's own ``_target_`` dataclass that does not subclass ``dataclass_type`` is accepted (duck typing, see
    :func:`duck_typed_class`); one of this package's classes in the wrong place is refused.
    """
    if dataclass_type is not None and isinstance(config, dataclass_type):
        return config
    if dataclass_type is None and dataclasses.is_dataclass(config) and not isinstance(config, type):
        return config  # already built (what the trainer hands its workers), as a recipe's worker re-reads it
    if isinstance(config, DictConfig):
        if not path:  # a node taken from a bigger config knows where it lives: name keys by their full path
            path = config._get_full_key(None) or ""
        data = OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise ConfigError(f"{path or '<config>'}: expected a mapping to build a config from, got {_show(config)}")
    token = _KEEP_UNKNOWN.set(keep_unknown)
    try:
        cls = _pick_class(data, dataclass_type, path)
        return _build(cls, data, path, expected=dataclass_type)
    finally:
        _KEEP_UNKNOWN.reset(token)


def as_config(config: Any, cls: type[T], path: str = "") -> T:
    """``config`` as a ``cls``, converted once where a class or function receives it (verl's recipes and tests may
    hand a DictConfig, a dict, a ``SimpleNamespace`` or None): an instance of ``cls`` as is, None as ``cls()``, a
    plain dataclass instance as is (a recipe's own config class), else (another of our configs included) built
    with :func:`omega_conf_to_dataclass`,
    keeping keys no field declares in ``_extra``. ``path`` names the group in errors (an OmegaConf node names its
    own position)."""
    if isinstance(config, cls):
        return config
    if config is None:
        return cls()
    if dataclasses.is_dataclass(config) and not isinstance(config, (type, Mapping)):
        return config  # type: ignore[return-value]  # a recipe's own dataclass, read by duck typing
    if isinstance(config, DictConfig):
        path = ""
    return omega_conf_to_dataclass(_plain(config), cls, path=path, keep_unknown=True)


def _plain(config: Any) -> Any:
    """A ``SimpleNamespace`` (nested ones too) as a dict; anything else unchanged."""
    if isinstance(config, SimpleNamespace):
        return {key: _plain(value) for key, value in vars(config).items()}
    return config


# ---------------------------------------------------------------------------------------------------------------------
def _pick_class(data: dict, requested: type | None, path: str) -> type:
    target = data.get("_target_")
    if target is None:
        if requested is None:
            raise ConfigError(f"{path or '<config>'}: no dataclass_type given and the node has no _target_")
        return requested
    return _import_target(target, path)


def _import_target(target: str, path: str) -> type:
    module_name, _, attr = str(target).rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{_join(path, '_target_')}: cannot import {target!r} ({exc})") from exc
    if not dataclasses.is_dataclass(obj):
        raise ConfigError(f"{_join(path, '_target_')}: {target} is not a dataclass")
    return obj


def _build(cls: type, data: dict, path: str, expected: type | None = None) -> Any:
    if expected is not None and not (isinstance(cls, type) and issubclass(cls, expected)):
        return _build_duck_typed(cls, expected, data, path)
    hints = typing.get_type_hints(cls)
    init_fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "_extra"}
    kwargs, extra = {}, {}
    for key, value in data.items():
        if key == "_target_":
            continue
        if key not in init_fields:
            close = difflib.get_close_matches(str(key), list(init_fields), n=1)
            kept = _KEEP_UNKNOWN.get() and "_extra" in {f.name for f in dataclasses.fields(cls)}
            if kept and not difflib.get_close_matches(str(key), list(init_fields), n=1, cutoff=_TYPO_CUTOFF):
                extra[key] = _kept_value(value)
                continue
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{_join(path, key)}: unknown key for {cls.__name__}{hint}")
        kwargs[key] = _convert(value, hints.get(key, Any), _join(path, key), _default_class(init_fields[key]))
    if extra:
        kwargs["_extra"] = extra
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        if exc.key is None:
            raise
        raise ConfigError(exc.detail, key=_join(path, exc.key)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _build_duck_typed(cls: type, expected: type, data: dict, path: str) -> Any:
    """A recipe's own config class in place of ``expected``, built as a class that is both: the recipe's fields and
    defaults win, the fields of ``expected`` it lacks keep ours, and ``isinstance`` holds for either class."""
    if _ours(cls):  # one of our classes in the wrong place: a mistake, not a recipe's
        raise ConfigError(
            f"{data.get('_target_') or cls.__qualname__} is not a subclass of the expected {expected.__name__}",
            key=_join(path, "_target_"),
        )
    try:
        both = duck_typed_class(cls, expected)
    except TypeError as exc:
        raise ConfigError(
            f"{data.get('_target_')} cannot stand in for {expected.__name__} ({exc}); subclass "
            f"{expected.__module__}.{expected.__qualname__} instead",
            key=_join(path, "_target_"),
        ) from exc
    return _build(both, data, path)


@functools.cache
def duck_typed_class(own: type, expected: type) -> type:
    """The dataclass deriving from a recipe's ``own`` config class and our ``expected`` one (built once per pair).

    Pickled as the pair it came from, so a worker process rebuilds the same class."""
    namespace = {
        "__module__": own.__module__,
        "__qualname__": f"{own.__qualname__}[{expected.__name__}]",
        "_target_": f"{own.__module__}.{own.__qualname__}",
        "__reduce__": _reduce_duck_typed,
    }
    return dataclasses.dataclass(type(own.__name__, (own, expected), namespace))


def _reduce_duck_typed(self: Any) -> tuple:
    own, expected = type(self).__bases__
    return _rebuild_duck_typed, (own, expected, dict(self.__dict__))


def _rebuild_duck_typed(own: type, expected: type, state: dict) -> Any:
    instance = object.__new__(duck_typed_class(own, expected))
    instance.__dict__.update(state)
    return instance


def _default_class(field: dataclasses.Field) -> type | None:
    factory = field.default_factory
    return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "verl"


def _kept_value(value: Any) -> Any:
    """A recipe's own value, nested blocks readable by attribute (``cfg.overlong_buffer.len``), read-only."""
    if isinstance(value, Mapping | list):
        node = OmegaConf.create(value)
        OmegaConf.set_readonly(node, True)
        return node
    return value


def _convert(value: Any, tp: Any, path: str, concrete: type | None = None) -> Any:
    """Check ``value`` against annotation ``tp``, building nested dataclasses and plain containers. ``concrete``:
    the field's default class, which a recipe's own class stands in for (``FSDPActorConfig`` for ``ActorConfig``)."""
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
        expected = concrete if concrete is not None and issubclass(concrete, tp) else tp
        cls = _pick_class(dict(value), tp, path)
        return _build(cls, dict(value), path, expected=tp if issubclass(cls, tp) else expected)
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
