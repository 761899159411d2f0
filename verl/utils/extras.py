"""Names of verl's optional engines that import everywhere and fail clearly when used.

verl recipes import classes and functions of engines this package does not run here: vLLM and SGLang (optional
extras, present only when installed) and Megatron-LM, MindSpeed or TorchTitan (not part of this build at all). The
import must succeed so that a recipe module loads; *using* the name must say what is missing and what to install,
instead of an ``AttributeError`` or a bare ``ModuleNotFoundError`` deep inside a worker. Every such name in the
package is made by the helpers here, so the wording is the same everywhere.
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "MissingExtraError",
    "is_package_available",
    "missing_message",
    "require_package",
    "unavailable_class",
    "unavailable_function",
]


class MissingExtraError(ImportError):
    """An optional engine's package is not installed, or the feature is not part of this build."""


def is_package_available(package: str) -> bool:
    """Whether ``package`` can be imported (checked without importing it, so heavy engines stay unloaded)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def missing_message(
    what: str, feature: str, *, package: str | None = None, extra: str | None = None, reason: str | None = None
) -> str:
    """The error text for ``what`` (a qualified name) needing ``feature``.

    With ``reason`` the feature is not in this build at all and ``reason`` says why (an extra named alongside
    only installs the third-party package, which does not add the feature); otherwise ``package`` is missing
    and ``pip install verl[extra]`` installs it.
    """
    if reason is not None:
        message = f"{what} needs {feature}, which is not part of this build: {reason}"
        if extra:
            message += f" (`pip install verl[{extra}]` installs the third-party package only, not this feature)"
        return message
    hint = f"`pip install verl[{extra}]`" if extra else f"`pip install {package}`"
    return f"{what} needs {feature}: the {package!r} package is not installed; install it with {hint}"


def require_package(package: str, *, extra: str | None, what: str, feature: str | None = None) -> None:
    """Raise :class:`MissingExtraError` naming ``what`` and the pip extra unless ``package`` is importable."""
    if not is_package_available(package):
        raise MissingExtraError(missing_message(what, feature or package, package=package, extra=extra))


def _raiser(message: str) -> Callable[..., NoReturn]:
    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise MissingExtraError(message)

    return fail


def unavailable_function(
    name: str,
    module: str,
    feature: str,
    *,
    package: str | None = None,
    extra: str | None = None,
    reason: str | None = None,
) -> Callable[..., NoReturn]:
    """A function ``module.name`` whose every call raises :class:`MissingExtraError` (see :func:`missing_message`).

    With ``package`` and no ``reason``, a call when ``package`` *is* installed still raises: this build has no
    implementation behind the name, so the message then says the feature is not part of this build.
    """
    what = f"{module}.{name}"

    def function(*args: Any, **kwargs: Any) -> NoReturn:
        if reason is None and package is not None and is_package_available(package):
            raise MissingExtraError(
                missing_message(
                    what,
                    feature,
                    extra=extra,
                    reason=f"{package} is installed, but this package has no implementation of {name}",
                )
            )
        raise MissingExtraError(missing_message(what, feature, package=package, extra=extra, reason=reason))

    function.__name__ = function.__qualname__ = name
    function.__module__ = module
    function.__doc__ = "Not available here: " + missing_message(
        what, feature, package=package, extra=extra, reason=reason
    )
    return function


def unavailable_class(
    name: str,
    module: str,
    feature: str,
    *,
    package: str | None = None,
    extra: str | None = None,
    reason: str | None = None,
    base: type = object,
) -> type:
    """A class ``module.name`` (subclass of ``base``) that can be imported and subclassed but not instantiated.

    Instantiating it, or any subclass, raises :class:`MissingExtraError`; ``base`` keeps ``isinstance`` /
    ``issubclass`` checks of the caller meaningful (e.g. a worker class stays a ``Worker``).
    """
    what = f"{module}.{name}"
    message = missing_message(what, feature, package=package, extra=extra, reason=reason)
    fail = _raiser(message)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> NoReturn:
        fail()

    def fill(namespace: dict[str, Any]) -> None:
        namespace.update(
            {
                "__new__": __new__,
                "__module__": module,
                "__qualname__": name,
                "__doc__": f"Not available here: {message}",
                "_verl_unavailable": message,
            }
        )

    return types.new_class(name, (base,), exec_body=fill)
