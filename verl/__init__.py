"""verl: Ray-native reinforcement-learning post-training for language models.

Importing the package also loads user extensions, as upstream verl does:

- ``VERL_USE_EXTERNAL_MODULES=pkg_a,pkg_b`` imports those modules (e.g. ones that register models or rewards);
- installed packages that declare a ``verl.plugins`` entry point are loaded; ``VERL_USE_EXTERNAL_PLUGINS``
  picks them: ``auto`` (default, all), ``none``, or a comma-separated list of entry-point names. A plugin
  that fails to load is logged and skipped, so a broken extension cannot make ``import verl`` fail.
"""

import importlib
import logging
import os
from importlib.metadata import PackageNotFoundError, entry_points, version

# Ray would otherwise re-create a driver's `uv run` environment for every worker (slow, and surprising).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

try:
    __version__ = version("verl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0.dev0"

__all__ = ["DataProto", "__version__"]


def __getattr__(name: str):
    """``verl.DataProto`` on first use: importing it loads torch and tensordict (seconds per process), which
    processes that only import a light submodule (a reward function's scoring process) do not need."""
    if name == "DataProto":
        from verl.protocol import DataProto

        return DataProto
    raise AttributeError(f"module 'verl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"DataProto"})


_logger = logging.getLogger(__name__)


def _import_external_modules() -> None:
    for name in filter(None, (part.strip() for part in os.getenv("VERL_USE_EXTERNAL_MODULES", "").split(","))):
        importlib.import_module(name)  # an explicitly requested module that fails to import is an error


def _load_plugins() -> None:
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        return
    allowed = None if policy == "auto" else {name.strip() for name in policy.split(",") if name.strip()}
    for entry in entry_points(group="verl.plugins"):
        if allowed is not None and entry.name.lower() not in allowed:
            continue
        try:
            entry.load()
        except Exception as exc:  # a broken third-party plugin must not break `import verl`
            _logger.warning("verl plugin %r (%s) failed to load: %s", entry.name, entry.value, exc)


_import_external_modules()
_load_plugins()
