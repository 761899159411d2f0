"""Agent loops by name: ``@register("name")`` in code, or a YAML file (``rollout.agent.agent_loop_config_path``).

A sample picks its loop through its ``agent_name`` column (default ``rollout.agent.default_agent_loop``). The
built-in names resolve lazily (``single_turn_agent``, ``tool_agent``, ``openai_agent``), so no import order matters.

The store is verl's ``_agent_loop_registry``: agent name -> a Hydra-style entry ``{"_target_": ..., **kwargs}``.
``@register`` stores the class itself as ``_target_`` (so loops defined in ``__main__`` or inside functions work in
worker processes too); YAML entries are imported when the file is read, so a bad ``_target_`` fails there, naming
the file and entry. Entries written into the dict by hand (verl style, ``_target_`` a dotted path) are honoured as
they are: the worker hands them to ``hydra.utils.instantiate``.

YAML format: a list of entries, each with ``name`` and ``_target_`` (``package.module.Class``, or
``path/to/file.py:Class``); any other key is passed to the loop's constructor::

    - name: my_agent
      _target_: my_pkg.agents.MyAgentLoop
      max_steps: 4

Agent-loop workers are separate processes: the manager sends :func:`registry_snapshot` to each of them and they
:func:`restore_registry` it, so loops registered in the driver (decorator or YAML) exist there too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AgentLoopSpec",
    "_agent_loop_registry",
    "get_agent_loop_class",
    "get_agent_loop_entry",
    "get_agent_loop_spec",
    "list_agent_loops",
    "load_agent_loop_config",
    "register",
    "registry_snapshot",
    "restore_registry",
]

_LAZY: dict[str, str] = {
    "single_turn_agent": "verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop",
    "tool_agent": "verl.experimental.agent_loop.tool_agent_loop:ToolAgentLoop",
    "openai_agent": "verl.experimental.agent_loop.openai_agent_loop:OpenAIAgentLoop",
}

# agent name -> {"_target_": class or "package.module.Class", **constructor kwargs}
_agent_loop_registry: dict[str, Any] = {}

_RESERVED = ("name", "_target_")


@dataclass(frozen=True)
class AgentLoopSpec:
    """A registered loop resolved: its class and the keyword arguments its constructor gets."""

    cls: type
    kwargs: dict[str, Any] = field(default_factory=dict)


def _check_class(name: str, cls: Any) -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
        raise TypeError(f"agent loop {name!r}: {cls!r} is not a subclass of AgentLoopBase")


def _qualname(target: Any) -> str:
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    return str(target)


def _entry_dict(entry: Any) -> dict[str, Any]:
    """A registry entry as a plain dict (verl code may store OmegaConf configs)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(entry, DictConfig):
        return OmegaConf.to_container(entry, resolve=True)
    if isinstance(entry, Mapping):
        return dict(entry)
    raise TypeError(f"agent loop registry entry must be a mapping with '_target_', got {type(entry).__name__}")


def _add(name: str, entry: dict[str, Any]) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"agent loop name must be a non-empty string, got {name!r}")
    target = entry.get("_target_")
    if isinstance(target, type):
        _check_class(name, target)
    existing = _agent_loop_registry.get(name)
    if existing is not None:
        previous = _entry_dict(existing).get("_target_")
        if previous is not target and _qualname(previous) != _qualname(target):
            raise ValueError(f"agent loop name {name!r} is already registered to {_qualname(previous)}")
    _agent_loop_registry[name] = entry


def register(agent_name: str) -> Callable[[type], type]:
    """Class decorator: make an ``AgentLoopBase`` subclass selectable as ``agent_name=<agent_name>``."""

    def decorator(cls: type) -> type:
        _add(agent_name, {"_target_": cls})
        return cls

    return decorator


def _import_target(target: str, where: str) -> type:
    if not isinstance(target, str) or not target:
        raise ValueError(f"{where}: _target_ must be 'package.module.Class' or 'file.py:Class', got {target!r}")
    if ":" in target:
        module_part, attr = target.rsplit(":", 1)
    else:
        module_part, _, attr = target.rpartition(".")
    if not module_part or not attr:
        raise ValueError(f"{where}: _target_ {target!r} must be 'package.module.Class' or 'file.py:Class'")
    if module_part.endswith(".py") or "/" in module_part:
        from verl.utils.import_utils import load_extern_object

        return load_extern_object(module_part, attr, config_key=f"{where}._target_", what="agent loop class")
    try:
        module = importlib.import_module(module_part)
    except ImportError as err:
        raise ImportError(f"{where}: cannot import module {module_part!r} of _target_ {target!r}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{where}: module {module_part!r} has no attribute {attr!r} (_target_ {target!r})") from None


def load_agent_loop_config(path: str | Path) -> list[str]:
    """Register every loop the YAML file at ``path`` lists; returns their names in file order."""
    from omegaconf import OmegaConf

    key = "rollout.agent.agent_loop_config_path"
    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"{key}={str(path)!r}: no such file")
    entries = OmegaConf.to_container(OmegaConf.load(file), resolve=True)
    if not isinstance(entries, list):
        raise ValueError(
            f"{key}={str(path)!r}: must hold a list of {{name, _target_}} entries, got {type(entries).__name__}"
        )
    names = []
    for i, entry in enumerate(entries):
        where = f"{key}={str(path)!r} entry {i}"
        if not isinstance(entry, dict) or "name" not in entry or "_target_" not in entry:
            raise ValueError(f"{where}: every entry needs 'name' and '_target_', got {entry!r}")
        cls = _import_target(entry["_target_"], where)
        _check_class(str(entry["name"]), cls)
        kwargs = {k: v for k, v in entry.items() if k not in _RESERVED}
        _add(str(entry["name"]), {"_target_": cls, **kwargs})
        names.append(str(entry["name"]))
    return names


def list_agent_loops() -> list[str]:
    """Every selectable agent name: registered ones and the lazily imported built-ins."""
    return sorted(set(_agent_loop_registry) | set(_LAZY))


def get_agent_loop_entry(name: str) -> Any:
    """The registry entry of ``name`` (importing a built-in on first use); unknown names list the registered ones."""
    if name not in _agent_loop_registry and name in _LAZY:
        module_name, attr = _LAZY[name].split(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except ImportError as err:
            raise ImportError(f"agent loop {name!r}: cannot import its module {module_name!r}: {err}") from err
        if name not in _agent_loop_registry:  # a built-in module that does not register itself
            _add(name, {"_target_": cls})
    if name not in _agent_loop_registry:
        raise ValueError(
            f"agent_name {name!r} is not a registered agent loop; registered: {', '.join(list_agent_loops())} "
            "(register with @register(name) or rollout.agent.agent_loop_config_path)"
        )
    return _agent_loop_registry[name]


def get_agent_loop_spec(name: str) -> AgentLoopSpec:
    """The class registered as ``name`` and its constructor kwargs (a dotted ``_target_`` is imported here)."""
    entry = _entry_dict(get_agent_loop_entry(name))
    target = entry.get("_target_")
    cls = target if isinstance(target, type) else _import_target(target, f"agent loop {name!r}")
    _check_class(name, cls)
    return AgentLoopSpec(cls, {k: v for k, v in entry.items() if k not in _RESERVED})


def get_agent_loop_class(name: str) -> type:
    """The class registered as ``name``; unknown names raise ValueError listing the registered ones."""
    return get_agent_loop_spec(name).cls


def registry_snapshot() -> dict[str, Any]:
    """The registered loops' entries, to send to agent-loop worker processes."""
    return {name: _entry_dict(entry) for name, entry in _agent_loop_registry.items()}


def restore_registry(snapshot: Mapping[str, Any]) -> None:
    """Register every loop of a :func:`registry_snapshot` taken in another process."""
    for name, entry in snapshot.items():
        _add(name, _entry_dict(entry))
