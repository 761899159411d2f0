"""Load user code named in a config (a file path or module plus an attribute name), and ask which optional
packages are installed.

Config keys such as ``data.custom_cls.path`` / ``reward.custom_reward_function.path`` point at user code that is not
part of any installed package. Errors name the path, the attribute and the config key, because the usual mistake is a
typo in one of them and the user needs to know which. The ``is_*_available`` checks look a package up without
importing it, so asking about a heavy engine (vLLM, Megatron) costs nothing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar

__all__ = [
    "load_extern_module",
    "load_extern_object",
    "load_module",
    "load_extern_type",
    "lazy_exports",
    "load_class_from_fqn",
    "import_external_libs",
    "resolve_config_path",
    "deprecated",
    "is_megatron_core_available",
    "is_vllm_available",
    "is_sglang_available",
    "is_nvtx_available",
    "is_trl_available",
    "is_msprobe_available",
    "PKG_PATH_PREFIX",
    "FILE_PATH_PREFIX",
]

PKG_PATH_PREFIX = "pkg://"
FILE_PATH_PREFIX = "file://"

_T = TypeVar("_T")


def lazy_exports(module_name: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving each name of ``exports`` (name -> module that defines it) on first access.

    For names a module re-exports from a heavy module (torch, transformers, the SFT stack) or from a module that
    imports it back: ``from package import name`` keeps working, and the import is paid only by who asks."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


def _has_spec(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package, or a module without a spec
        return False


@functools.cache
def is_megatron_core_available() -> bool:
    """Whether ``megatron.core`` is installed (this build never uses it; recipes test for it)."""
    return _has_spec("megatron.core")


@functools.cache
def is_vllm_available() -> bool:
    """Whether the ``vllm`` package is installed."""
    return _has_spec("vllm")


@functools.cache
def is_sglang_available() -> bool:
    """Whether the ``sglang`` package is installed."""
    return _has_spec("sglang")


@functools.cache
def is_nvtx_available() -> bool:
    """Whether the ``nvtx`` package is installed."""
    return _has_spec("nvtx")


@functools.cache
def is_trl_available() -> bool:
    """Whether the ``trl`` package is installed."""
    return _has_spec("trl")


@functools.cache
def is_msprobe_available() -> bool:
    """Whether Ascend's ``msprobe`` precision debugger is installed."""
    return _has_spec("msprobe")


def import_external_libs(external_libs: str | Iterable[str] | None = None) -> None:
    """Import each module of ``external_libs`` (one name or a list) for its side effects, e.g. registering a
    custom model class with transformers (``model.external_lib``)."""
    if external_libs is None:
        return
    names = [external_libs] if isinstance(external_libs, str) else list(external_libs)
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ImportError(f"external library {name!r} cannot be imported: {err}") from err


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def resolve_config_path(config_path: str) -> str:
    """An absolute path for a config file named relative to the working directory or to the installed package.

    Ray workers on other nodes may start in another directory than the driver, so a relative path is looked up
    in the working directory, then next to the ``verl`` package (source checkout), then inside it. Paths that
    climb out of those roots (``../``) are not accepted from them. A miss is a FileNotFoundError naming the path.
    """
    if os.path.isabs(config_path):
        return config_path
    package_dir = os.path.dirname(os.path.abspath(importlib.import_module("verl").__file__))
    for root in (os.path.abspath(os.getcwd()), os.path.dirname(package_dir), package_dir):
        candidate = os.path.abspath(os.path.join(root, config_path))
        if _inside(candidate, root) and os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(
        f"config file {config_path!r} not found in the working directory ({os.getcwd()}) nor next to the verl "
        f"package ({package_dir})"
    )


def _looks_like_file(path: str) -> bool:
    return path.endswith(".py") or os.sep in path or path.startswith((".", "~"))


def load_extern_module(path: str, *, config_key: str = "path") -> ModuleType:
    """Import ``path``: a ``.py`` file (imported under a stable private module name) or a dotted module name.

    A file is registered in ``sys.modules`` under a name derived from its absolute path, so loading it twice returns
    the same module and objects defined in it compare equal across calls.
    """
    if not path:
        raise ValueError(f"{config_key} is empty; set it to a .py file or a module name")
    if path.startswith(PKG_PATH_PREFIX):
        return _import_package_module(path[len(PKG_PATH_PREFIX) :], config_key)
    if path.startswith(FILE_PATH_PREFIX):
        path = path[len(FILE_PATH_PREFIX) :]
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
        _pickle_by_value(module)
        return module
    if _looks_like_file(path):
        raise FileNotFoundError(f"{config_key}: file {path!r} does not exist")
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as err:
        raise FileNotFoundError(f"{config_key}: {path!r} is neither an existing file nor an importable module") from err


def _pickle_by_value(module: ModuleType) -> None:
    """Objects of a module imported from a file travel to Ray workers by value: its private name is not importable
    there (the worker never loaded the file, which may not even exist on the worker's node)."""
    try:
        from ray import cloudpickle
    except ImportError:  # Ray is a dependency; without it nothing crosses processes
        return
    cloudpickle.register_pickle_by_value(module)


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


def _import_package_module(name: str, config_key: str) -> ModuleType:
    """``pkg://a.b.c`` or ``pkg://a/b/c``: an installed module by its dotted name."""
    dotted = name.removesuffix(".py").replace("/", ".")
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"{config_key}: module {dotted!r} (from pkg://{name}) cannot be imported: {err}"
        ) from err


def load_module(module_path: str, module_name: str | None = None) -> ModuleType | None:
    """verl's loader: ``pkg://dotted.name`` (or ``pkg://dotted/name``), or a ``.py`` file (optionally ``file://``).

    With ``module_name`` a file's module is also registered under that name in ``sys.modules`` so it can be
    imported by it; a different module already registered there is an error. An empty path gives None.
    """
    if not module_path:
        return None
    module = load_extern_module(module_path, config_key="module_path")
    if module_name is not None and not module_path.startswith(PKG_PATH_PREFIX):
        existing = sys.modules.get(module_name)
        if existing is not None and existing is not module:
            raise RuntimeError(
                f"cannot register {module_path!r} as module {module_name!r}: sys.modules already "
                f"holds a different module under that name ({existing!r})"
            )
        sys.modules[module_name] = module
    return module


def load_class_from_fqn(fqn: str, description: str = "class") -> type:
    """The class named by a fully qualified name such as ``pkg.module.ClassName``; errors name ``description``."""
    module_name, dot, class_name = fqn.rpartition(".")
    if not dot or not module_name or not class_name:
        raise ValueError(
            f"invalid {description} {fqn!r}: expected a fully qualified name such as 'mypackage.module.ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportError(f"cannot import module {module_name!r} for {description} {fqn!r}: {err}") from err
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise AttributeError(f"{description} {class_name!r} not found in module {module_name!r}") from None


def _warn_deprecated(kind: str, qualified: str, replacement: str) -> None:
    message = f"{kind} {qualified!r} is deprecated"
    if replacement:
        message += f"; use {replacement!r} instead"
    warnings.warn(message, FutureWarning, stacklevel=3)


def deprecated(replacement: str = "") -> Callable[[_T], _T]:
    """Decorator: calling the function (or instantiating the class) emits a FutureWarning naming ``replacement``."""

    def decorate(obj: _T) -> _T:
        qualified = f"{obj.__module__}.{obj.__qualname__}"
        if isinstance(obj, type):
            original_init = obj.__init__

            @functools.wraps(original_init)
            def init(self: Any, *args: Any, **kwargs: Any) -> None:
                _warn_deprecated("class", qualified, replacement)
                original_init(self, *args, **kwargs)

            obj.__init__ = init
            return obj

        @functools.wraps(obj)
        def call(*args: Any, **kwargs: Any) -> Any:
            _warn_deprecated("function", qualified, replacement)
            return obj(*args, **kwargs)

        return call

    return decorate


@deprecated(replacement="verl.utils.import_utils.load_extern_object")
def load_extern_type(file_path: str, type_name: str) -> Any:
    """Old name of :func:`load_extern_object`."""
    return load_extern_object(file_path, type_name, config_key="file_path", what="type")
