"""verl.utils.extras: optional-engine names import everywhere and fail with the extra or the reason when used."""

from __future__ import annotations

import pytest

from verl.utils.extras import (
    MissingExtraError,
    is_package_available,
    missing_message,
    require_package,
    unavailable_class,
    unavailable_function,
)


class Base:
    pass


def test_missing_package_names_the_extra():
    assert is_package_available("torch") and not is_package_available("no_such_pkg_xyz")
    require_package("torch", extra=None, what="x")
    with pytest.raises(MissingExtraError, match=r"pkg\.Thing needs the engine.*no_such_pkg_xyz.*verl\[engine\]"):
        require_package("no_such_pkg_xyz", extra="engine", what="pkg.Thing", feature="the engine")
    assert issubclass(MissingExtraError, ImportError)


def test_unavailable_function_and_class():
    fn = unavailable_function("helper", "pkg.mod", "a backend", reason="not built in", extra="backend")
    assert fn.__name__ == "helper" and fn.__module__ == "pkg.mod"
    with pytest.raises(MissingExtraError, match=r"pkg\.mod\.helper needs a backend.*not built in.*verl\[backend\]"):
        fn(1, key=2)
    cls = unavailable_class("Thing", "pkg.mod", "a backend", reason="not built in", base=Base)
    assert issubclass(cls, Base) and cls.__module__ == "pkg.mod" and cls.__qualname__ == "Thing"

    class Sub(cls):  # recipes subclass these; building the subclass fails the same way
        def __init__(self):
            pass

    for target in (cls, Sub):
        with pytest.raises(MissingExtraError, match="not built in"):
            target()


def test_function_for_an_installed_package_without_implementation_says_so():
    fn = unavailable_function("f", "m", "torch things", package="torch", extra="x")
    with pytest.raises(MissingExtraError, match="torch is installed, but this package has no implementation"):
        fn()
    assert "pip install verl[x]" in missing_message("w", "feat", package="p", extra="x")
