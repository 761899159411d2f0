"""Load a user object (dataset class, sampler, reward function) named by a file path or module plus an attribute name.

Config keys such as ``data.custom_cls.path`` / ``reward.custom_reward_function.path`` point at user code that is not
part of any installed package. Errors name the path, the attribute and the config key, because the usual mistake is a
typo in one of them and the user needs to know which.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["load_extern_module", "load_extern_object"]


def _looks_like_file(path: str) -> bool:
    return path.endswith(".py") or os.sep in path or path.startswith((".", "~"))


def load_extern_module(path: str, *, config_key: str = "path") -> ModuleType:
    """Import ``path``: a ``.py`` file (imported under a stable private module name) or a dotted module name.

    A file is registered in ``sys.modules`` under a name derived from its absolute path, so loading it twice returns
    the same module and objects defined in it compare equal across calls.
    """
    if not path:
        raise ValueError(f"{config_key} is empty; set it to a .py file or a module name")
    if path.startswith("pkg://"):
        path = path[len("pkg://") :]
    expanded = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(expanded):
        digest = hashlib.sha1(expanded.encode()).hexdigest()[:12]
        stem = os.path.splitext(os.path.basename(expanded))[0]
        module_name = f"verl_extern_{stem}_{digest}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, expanded)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {expanded!r} ({config_key}): not a Python source file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module
    if _looks_like_file(path):
        raise FileNotFoundError(f"{config_key}: file {path!r} does not exist")
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as err:
        raise FileNotFoundError(f"{config_key}: {path!r} is neither an existing file nor an importable module") from err


def load_extern_object(path: str, name: str, *, config_key: str = "path", what: str = "object") -> Any:
    """Return attribute ``name`` of the module at ``path``; ``what`` ("reward function", "dataset class", ...)
    words the error when the attribute is missing."""
    module = load_extern_module(path, config_key=config_key)
    if not name:
        raise ValueError(f"no {what} name given for {path!r} ({config_key})")
    try:
        return getattr(module, name)
    except AttributeError:
        defined = sorted(k for k in vars(module) if not k.startswith("_"))
        raise AttributeError(f"{what} {name!r} not found in {path!r} ({config_key}); it defines: {defined}") from None
