"""What the sandboxed program may see: the minimal root's mounts and the Landlock rules, computed in the parent.

Readable: the interpreter's installation (``sys.base_prefix``: binary, standard library, ``lib-dynload``) minus
its site-packages, the system's shared-library folders (``/usr/lib`` ...: libc, libffi, libssl that the standard
library's C modules load), ``/etc/ld.so.cache``, the time-zone data, the packages a tool config allows by name
(mounted under ``/packages``), a few character devices and the run's own folder (``/sandbox``, a size-limited
tmpfs, the only writable place). Everything else (``/etc/passwd``, home folders, the project, the run's outputs,
``/proc``, ``/tmp``, ``/dev/shm``) is absent from the minimal root, and denied by Landlock where there is none.

The plan is plain data (lists of paths) so the bootstrap, which runs without the verl package, can carry it out,
and so tests can check it without starting anything.
"""

from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
import re
import site
import sys
import sysconfig
from dataclasses import dataclass, field

from verl.tools.sandbox import _landlock

__all__ = ["SANDBOX_DIR", "PACKAGES_DIR", "RootPlan", "package_entries", "root_plan"]

SANDBOX_DIR = "/sandbox"  # the run's folder inside the minimal root (cwd, HOME, TMPDIR)
PACKAGES_DIR = "/packages"  # the allowed packages inside the minimal root (on sys.path)

_LIB_DIRS = (
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/usr/lib",
    "/usr/lib64",
    "/usr/lib32",
    "/usr/libx32",
    "/usr/local/lib",
)
_DATA_DIRS = ("/usr/share/zoneinfo",)
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_LOCALTIME = "/etc/localtime"
_NETWORK_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
)
_EXEC_DIRS = ("/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_WRITABLE_DEVICES = ("/dev/null", "/dev/full")


@dataclass(frozen=True)
class RootPlan:
    """Everything the bootstrap needs to build the minimal root and the Landlock ruleset.

    ``binds``: (source, destination, writable) in mount order; ``symlinks``: (path, target) recreated as they are
    on the host (``/lib -> usr/lib``); ``hide``: folders covered by an empty read-only tmpfs (site-packages
    inside a bound folder); ``rules_in_root`` / ``rules_on_host``: Landlock (path, rights) inside the minimal root,
    and on the host when there is none (then site-packages is carved out of the interpreter's folder rule by
    rule); ``sys_path_in_root`` / ``sys_path_on_host``: where the allowed packages are imported from.
    """

    binds: tuple[tuple[str, str, bool], ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    hide: tuple[str, ...] = ()
    rules_in_root: tuple[tuple[str, int], ...] = ()
    rules_on_host: tuple[tuple[str, int], ...] = ()
    sys_path_in_root: tuple[str, ...] = ()
    sys_path_on_host: tuple[str, ...] = ()
    packages: tuple[str, ...] = field(default=())

    def to_dict(self, workdir: str) -> dict:
        """The plan for one run whose own folder on the host is ``workdir`` (used when there is no minimal root;
        inside one, the folder is a fresh tmpfs at ``/sandbox``), as plain data."""
        write = _landlock.READ | _landlock.WRITE
        return {
            "folder": SANDBOX_DIR,
            "binds": [list(b) for b in self.binds],
            "symlinks": [list(s) for s in self.symlinks],
            "hide": list(self.hide),
            "rules_in_root": [list(r) for r in self.rules_in_root] + [[SANDBOX_DIR, write]],
            "rules_on_host": [list(r) for r in self.rules_on_host] + [[workdir, write]],
            "sys_path_in_root": list(self.sys_path_in_root),
            "sys_path_on_host": list(self.sys_path_on_host),
        }


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _site_dirs() -> list[str]:
    """Every folder this interpreter imports third-party packages from (hidden unless a package is allowed)."""
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    dirs += [p for p in sys.path if p and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    return sorted({os.path.realpath(d) for d in dirs})


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name)


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def package_entries(name: str) -> list[str]:
    """The files and folders an allowed package needs: its own folder (or module file), the vendored shared
    libraries beside it (``numpy.libs``) and its ``.dist-info`` (for ``importlib.metadata``). Raises ValueError
    naming the package when it is not installed, is part of the standard library or spans several folders."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as err:
        raise ValueError(f"allowed_packages: cannot locate {name!r}: {err}") from err
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise ValueError(f"allowed_packages: no installed package {name!r}")
    locations = list(spec.submodule_search_locations or [])
    if len(locations) > 1:
        raise ValueError(
            f"allowed_packages: {name!r} is a namespace package spread over {len(locations)} folders "
            f"({locations}); list one of its installed packages instead"
        )
    path = os.path.realpath(locations[0] if locations else spec.origin)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    if spec.origin in ("built-in", "frozen") or (
        _beneath(path, stdlib) and not any(_beneath(path, d) for d in _site_dirs())
    ):
        raise ValueError(f"allowed_packages: {name!r} is part of the standard library, which is always importable")
    parent = os.path.dirname(path)
    entries = [path]
    names = {name}
    for dist in _distributions().get(name, []):
        names.add(_normalized(dist))
        for pattern in (f"{_normalized(dist)}-*.dist-info", f"{_normalized(dist).lower()}-*.dist-info"):
            entries += glob.glob(os.path.join(parent, pattern))
    for base in sorted(names):
        for libs in (f"{base}.libs", f"{base.lower()}.libs"):
            if os.path.isdir(os.path.join(parent, libs)):
                entries.append(os.path.join(parent, libs))
    return sorted(set(entries))


def _carve(folder: str, holes: list[str]) -> list[str]:
    """The entries of ``folder`` (recursively) that cover everything beneath it except ``holes``."""
    inside = [h for h in holes if _beneath(h, folder)]
    if not inside:
        return [folder]
    if folder in inside:
        return []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    out = []
    for entry in names:
        out += _carve(os.path.join(folder, entry), inside)
    return out


def _existing_roots(candidates: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Split ``candidates`` into folders/files to bind (deduplicated, nested ones dropped) and top-level
    symlinks to recreate (``/lib -> usr/lib``, whose target is bound instead)."""
    roots, links = [], []
    for path in candidates:
        path = os.path.abspath(path)
        if os.path.islink(path) and os.path.dirname(path) == "/":
            links.append((path, os.readlink(path)))
            path = os.path.realpath(path)
        if os.path.exists(path):
            roots.append(path)
    roots = sorted(set(roots))
    kept = [r for r in roots if not any(r != other and _beneath(r, other) for other in roots)]
    return kept, sorted(set(links))


@functools.lru_cache(maxsize=32)
def root_plan(packages: tuple[str, ...] = (), *, network: bool = False, executables: bool = False) -> RootPlan:
    """The plan for runs allowed ``packages`` (import names); ``network`` adds the resolver's files,
    ``executables`` the system's binaries and the execute right (for ``allow_subprocesses``)."""
    # the installation, and a virtual environment's own folder (its site-packages is hidden like any other)
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)}
    candidates = sorted(prefixes) + list(_LIB_DIRS) + list(_DATA_DIRS) + list(_SYSTEM_FILES)
    if network:
        candidates += list(_NETWORK_FILES)
    if executables:
        candidates += list(_EXEC_DIRS)
    roots, links = _existing_roots(candidates)
    binds: list[tuple[str, str, bool]] = [(root, root, False) for root in roots]
    if os.path.isfile(_LOCALTIME):  # usually a symlink into the zone data: bound as a file at its own path
        binds.append((os.path.realpath(_LOCALTIME), _LOCALTIME, False))
    for device in _DEVICES:
        if os.path.exists(device):
            binds.append((device, device, True))
    hide = [d for d in _site_dirs() if os.path.isdir(d) and any(_beneath(d, r) for r in roots)]

    entries: list[str] = []
    for name in packages:
        entries += package_entries(name)
    entries = sorted(set(entries))
    seen: dict[str, str] = {}
    for entry in entries:
        base = os.path.basename(entry)
        if base in seen:
            raise ValueError(f"allowed_packages: {seen[base]!r} and {entry!r} would both be /packages/{base}")
        seen[base] = entry
        binds.append((entry, f"{PACKAGES_DIR}/{base}", False))

    read = _landlock.READ | (_landlock.EXECUTE if executables else 0)
    device_rules = [
        (d, _landlock.READ | (_landlock.WRITE if d in _WRITABLE_DEVICES else 0)) for d in _DEVICES if os.path.exists(d)
    ]
    rules_in_root = [(dst, read) for _, dst, _ in binds if not dst.startswith("/dev/")] + device_rules
    if entries:
        rules_in_root.append((PACKAGES_DIR, _landlock.READ))
    carved: list[str] = [_LOCALTIME] if os.path.isfile(_LOCALTIME) else []
    for root in roots:
        carved += _carve(root, hide)
    rules_on_host = [(path, read) for path in carved] + [(e, _landlock.READ) for e in entries] + device_rules
    package_parents = sorted({os.path.dirname(e) for e in entries})
    rules_on_host += [(p, _landlock.READ_DIR) for p in package_parents]  # so the import system can list them
    return RootPlan(
        binds=tuple(binds),
        symlinks=tuple(links),
        hide=tuple(hide),
        rules_in_root=tuple(rules_in_root),
        rules_on_host=tuple(rules_on_host),
        sys_path_in_root=(PACKAGES_DIR,) if entries else (),
        sys_path_on_host=tuple(package_parents),
        packages=tuple(entries),
    )
