"""Agent loops by name: ``@register("name")`` in code, or a YAML file (``rollout.agent.agent_loop_config_path``).

A sample picks its loop through its ``agent_name`` column (default ``rollout.agent.default_agent_loop``). The
built-in names resolve lazily (``single_turn_agent``, ``tool_agent``), so no import order matters.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AgentLoopSpec",
    "get_agent_loop_class",
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


@dataclass(frozen=True)
class AgentLoopSpec:
    """A registered loop: its class and the keyword arguments its constructor gets."""

    cls: type
    kwargs: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, AgentLoopSpec] = {}


def _check_class(name: str, cls: Any) -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
        raise TypeError(f"agent loop {name!r}: {cls!r} is not a subclass of AgentLoopBase")


def _add(name: str, spec: AgentLoopSpec) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"agent loop name must be a non-empty string, got {name!r}")
    _check_class(name, spec.cls)
    existing = _REGISTRY.get(name)
    if existing is not None and existing.cls is not spec.cls:
        raise ValueError(
            f"agent loop name {name!r} is already registered to {existing.cls.__module__}.{existing.cls.__qualname__}"
        )
    _REGISTRY[name] = spec


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an ``AgentLoopBase`` subclass selectable as ``agent_name=<name>``."""

    def decorator(cls: type) -> type:
        _add(name, AgentLoopSpec(cls))
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
        raise ValueError(f"{key}={str(path)!r}: must hold a list of {{name, _target_}} entries, got "
                         f"{type(entries).__name__}")
    names = []
    for i, entry in enumerate(entries):
        where = f"{key}={str(path)!r} entry {i}"
        if not isinstance(entry, dict) or "name" not in entry or "_target_" not in entry:
            raise ValueError(f"{where}: every entry needs 'name' and '_target_', got {entry!r}")
        kwargs = {k: v for k, v in entry.items() if k not in ("name", "_target_")}
        cls = _import_target(entry["_target_"], where)
        _add(str(entry["name"]), AgentLoopSpec(cls, kwargs))
        names.append(str(entry["name"]))
    return names


def list_agent_loops() -> list[str]:
    """Every selectable agent name: registered ones and the lazily imported built-ins."""
    return sorted(set(_REGISTRY) | set(_LAZY))


def get_agent_loop_spec(name: str) -> AgentLoopSpec:
    if name not in _REGISTRY and name in _LAZY:
        module_name, attr = _LAZY[name].split(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except ImportError as err:
            raise ImportError(f"agent loop {name!r}: cannot import its module {module_name!r}: {err}") from err
        if name not in _REGISTRY:  # the module registers itself with @register; this covers one that does not
            _add(name, AgentLoopSpec(cls))
    if name not in _REGISTRY:
        raise ValueError(
            f"agent_name {name!r} is not a registered agent loop; registered: {', '.join(list_agent_loops())} "
            "(register with @register(name) or rollout.agent.agent_loop_config_path)"
        )
    return _REGISTRY[name]


def get_agent_loop_class(name: str) -> type:
    """The class registered as ``name``; unknown names raise ValueError listing the registered ones."""
    return get_agent_loop_spec(name).cls


def registry_snapshot() -> dict[str, AgentLoopSpec]:
    """The registered loops, to send to agent-loop worker processes."""
    return dict(_REGISTRY)


def restore_registry(snapshot: dict[str, AgentLoopSpec]) -> None:
    """Register every loop of a :func:`registry_snapshot` taken in another process."""
    for name, spec in snapshot.items():
        _add(name, spec)
