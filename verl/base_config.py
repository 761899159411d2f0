"""BaseConfig: the parent of every typed config (frozen dataclass that also reads like a Mapping).

Why both: worker and trainer code reads configs by attribute (``config.actor.clip_ratio``), while a lot of code
written against verl's DictConfig-era API reads them like dicts (``config["clip_ratio"]``, ``config.get("x", d)``,
``**config``). A read-only Mapping view over the dataclass fields serves both without copying.

Instances are frozen once built: a typo such as ``cfg.clip_ratoi = 0.3`` or a late mutation that only some workers see
would silently split the configuration across processes. A subclass may name fields in ``_mutable_fields`` for the few
values verl itself normalises at run time (e.g. mini-batch sizes per rank); everything else raises
``dataclasses.FrozenInstanceError``. Subclasses use a plain ``@dataclass`` decorator: the freezing lives here.
"""

from __future__ import annotations

import collections.abc
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["BaseConfig", "ConfigError", "MissingConfigKey", "check"]


class ConfigError(ValueError):
    """An invalid config value or key. ``key`` is the field (dotted when known); the message starts with it."""

    def __init__(self, detail: str, key: str | None = None) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"{key}: {detail}" if key else detail)


class MissingConfigKey(KeyError, AttributeError):
    """``config[key]`` for a key the config does not have.

    Both a KeyError (what a Mapping raises, so ``dict(config)`` and ``key in config`` idioms behave) and an
    AttributeError (what verl's ``BaseConfig.__getitem__`` raises, since it reads attributes).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check(condition: bool, key: str, detail: str) -> None:
    """Raise :class:`ConfigError` for ``key`` unless ``condition`` holds (used by ``__post_init__`` validations)."""
    if not condition:
        raise ConfigError(detail, key=key)


@dataclasses.dataclass
class BaseConfig(collections.abc.Mapping):
    """Frozen dataclass with a Mapping view over its public fields.

    ``_target_`` names the class so that Hydra's ``instantiate`` and :func:`verl.utils.config.omega_conf_to_dataclass`
    can build it from a YAML node; it is filled in automatically for every subclass.
    """

    _target_: ClassVar[str] = "verl.base_config.BaseConfig"
    _mutable_fields: ClassVar[frozenset[str]] = frozenset()
    # Keys a recipe's YAML adds to this group that no field declares: kept, read as attributes and items, so recipe
    # code finds them on the config objects our classes hand it (built by verl.trainer.config.build_ppo_config).
    _extra: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True, repr=False, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_target_" not in cls.__dict__:
            cls._target_ = f"{cls.__module__}.{cls.__qualname__}"

    def __setattr__(self, name: str, value: Any) -> None:
        # The generated __init__ assigns each field once; any later assignment is a mutation.
        if name in self.__dict__ and name not in self._mutable_fields:
            raise dataclasses.FrozenInstanceError(
                f"{type(self).__name__}.{name} is frozen; build a new config with dataclasses.replace() instead"
            )
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"{type(self).__name__}.{name} cannot be deleted")

    if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt attribute stays an error there

        def __getattr__(self, name: str) -> Any:
            # Only reached when no field or attribute has the name: a recipe's own key kept in ``_extra``.
            extra = self.__dict__.get("_extra") if not name.startswith("__") else None
            if extra and name in extra:
                return extra[name]
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # -- Mapping view -------------------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str):
            raise TypeError(f"{type(self).__name__} keys are field names (str), got {type(key).__name__} {key!r}")
        # Fields, a recipe's own keys, and public attributes set on the instance after construction (verl reads any
        # attribute).
        if key in self._public_field_names() or (not key.startswith("_") and key in self.__dict__):
            return getattr(self, key)
        if key in self._extra:
            return self._extra[key]
        raise MissingConfigKey(f"{type(self).__name__} has no field {key!r}")

    def __iter__(self):
        return iter(self._public_field_names())

    def __len__(self) -> int:
        return len(self._public_field_names())

    def __contains__(self, key: object) -> bool:
        return key in self._public_field_names() or key in self.__dict__.get("_extra", ())

    # Mapping defines __eq__ (and so drops __hash__); the dataclass __eq__ of each subclass takes precedence.
    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _public_field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (nested configs become dicts too), e.g. for logging or ``OmegaConf.create``."""
        fields = {name: _plain(getattr(self, name)) for name in self._public_field_names()}
        return {**fields, **{name: _plain(value) for name, value in self._extra.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, BaseConfig):
        return value.to_dict()
    if isinstance(value, collections.abc.Mapping) and not isinstance(value, dict):  # a recipe's nested block
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
