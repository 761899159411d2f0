"""An enum that can grow at runtime, so recipes can add their own dispatch modes."""

from __future__ import annotations

from collections.abc import Iterator


class _DynamicEnumMeta(type):
    _members: dict[str, DynamicEnum]  # set on each DynamicEnum class (declared for the type checker)

    def __getattr__(cls, name: str) -> DynamicEnum:
        registry = cls.__dict__.get("_members")
        if registry is not None and name in registry:
            return registry[name]
        raise AttributeError(f"{cls.__name__} has no member {name!r}; known members: {sorted(registry or {})}")

    def __iter__(cls) -> Iterator[DynamicEnum]:
        return iter(list(cls._members.values()))

    def __contains__(cls, item: object) -> bool:
        return isinstance(item, cls) and cls._members.get(item.name) is item

    def __len__(cls) -> int:
        return len(cls._members)


def _lookup_member(enum_cls: type[DynamicEnum], name: str) -> DynamicEnum:
    """Unpickle to the receiving process's member; register it there when that process has not yet."""
    members = enum_cls._members
    return members[name] if name in members else enum_cls.register(name)


class DynamicEnum(metaclass=_DynamicEnumMeta):
    """Members are unique per (class, name); ``register`` adds one, ``Cls.NAME`` reads one.

    A member pickles by name, so a member sent to a Ray worker is the worker's own member (identity checks hold).
    """

    _members: dict[str, DynamicEnum]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._members = {}

    def __init__(self, name: str, value: int) -> None:
        self.name = name
        self.value = value

    @classmethod
    def register(cls, name: str) -> DynamicEnum:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{cls.__name__} member name must be an identifier, got {name!r}")
        if name in cls._members:
            raise ValueError(f"{cls.__name__}.{name} is already registered")
        member = cls(name, len(cls._members))
        cls._members[name] = member
        return member

    @classmethod
    def remove(cls, name: str) -> DynamicEnum:
        if name not in cls._members:
            raise KeyError(f"{cls.__name__} has no member {name!r}")
        return cls._members.pop(name)

    @classmethod
    def from_name(cls, name: str) -> DynamicEnum:
        return getattr(cls, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self):
        return _lookup_member, (type(self), self.name)
