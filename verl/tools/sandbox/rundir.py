"""One sandboxed run's folder, settings file, command line and environment (parent side).

Layout of the run's folder (a fresh ``verl-sandbox-*`` under the temp folder, removed afterwards)::

    settings        what the bootstrap applies, in ``marshal`` format (read before it gives up its privileges)
    work/           the program's own folder (main.py, whatever it writes) when there is no minimal root; inside
                    one, the program's folder is a size-limited tmpfs at ``/sandbox`` instead
    root/           the mount point of the minimal root (empty on the host: the tmpfs lives in the child's mount
                    namespace and dies with it)

When the trainer is root the program runs as ``nobody``, so ``work/`` is handed to that user.
"""

from __future__ import annotations

import marshal
import os
import shutil
import stat
import sys
import tempfile

# the child loads these by path; importing them here writes their bytecode cache, which the child then reuses
from verl.tools.sandbox import _bootstrap, _capabilities, _landlock, _namespaces, _seccomp  # noqa: F401
from verl.tools.sandbox.limits import SandboxLimits
from verl.tools.sandbox.plan import SANDBOX_DIR, root_plan

__all__ = ["BOOTSTRAP", "RunDir", "sandbox_ids"]

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
# The child imports the bootstrap as a module rather than running it as a script, so its bytecode is cached
# (a script is compiled on every start); the bootstrap takes its own folder off sys.path before user code.
_LAUNCH = "import sys; sys.path.insert(0, {folder!r}); import _bootstrap; sys.exit(_bootstrap.main())"
_NOBODY = 65534


def sandbox_ids() -> tuple[int | None, int | None]:
    """(uid, gid) the program switches to: ``nobody``/``nogroup`` when the trainer is root, else (None, None)
    (a non-root trainer's program keeps the trainer's own unprivileged uid, inside a user namespace)."""
    if os.geteuid() != 0:
        return None, None
    import pwd

    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return _NOBODY, _NOBODY


def _remove_tree(path: str) -> None:
    """Remove a run's folder, also where the program took the permissions away from its own sub-folders."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    for folder, subfolders, _ in os.walk(path):
        for name in subfolders:
            try:
                os.chmod(os.path.join(folder, name), stat.S_IRWXU)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


class RunDir:
    """Context manager: creates the run's folder and settings; removes everything on exit."""

    def __init__(self, limits: SandboxLimits, layers: list[str], code: str | None = None, *, probe: bool = False):
        self.limits, self.layers, self.code, self.probe = limits, layers, code, probe
        self.path = ""

    def __enter__(self) -> RunDir:
        limits, layers = self.limits, self.layers
        self.path = tempfile.mkdtemp(prefix="verl-sandbox-")
        try:
            os.chmod(self.path, 0o711)
            self.workdir = os.path.join(self.path, "work")
            os.mkdir(self.workdir, 0o700)
            code_file = os.path.join(self.workdir, "main.py")
            with open(code_file, "w", encoding="utf-8") as f:
                f.write(self.code or "")
            new_root = os.path.join(self.path, "root")
            if "minimal_root" in layers:
                os.mkdir(new_root, 0o755)
            uid, gid = sandbox_ids() if "user" in layers else (None, None)
            if self.probe:  # runs no code, and must get in whether or not its user switch works
                os.chmod(self.workdir, 0o777)
            elif uid is not None:
                os.chown(self.workdir, uid, gid)
                os.chown(code_file, uid, gid)
            plan = root_plan(limits.allowed_packages, network=limits.network, executables=limits.allow_subprocesses)
            settings = {
                "probe": self.probe,
                "layers": [name for name in layers if name not in ("rlimits", "process_group", "tempdir")],
                "code_file": code_file,
                "cpu_time_s": int(max(1, round(limits.cpu_time_s))),
                "memory_mb": int(limits.memory_mb),
                "max_file_mb": int(limits.max_file_mb),
                "max_open_files": int(limits.max_open_files),
                "max_processes": int(limits.max_processes),
                "max_folder_mb": int(limits.max_folder_mb),
                "network": bool(limits.network),
                "allow_subprocesses": bool(limits.allow_subprocesses),
                "uid": uid,
                "gid": gid,
                "user_namespace": os.geteuid() != 0,
                "workdir": self.workdir,
                "new_root": new_root,
                "plan": plan.to_dict(self.workdir),
            }
            self.settings_file = os.path.join(self.path, "settings")
            fd = os.open(self.settings_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                marshal.dump(settings, f)
        except BaseException:
            _remove_tree(self.path)
            raise
        return self

    def __exit__(self, *exc) -> None:
        _remove_tree(self.path)

    @property
    def argv(self) -> list[str]:
        launch = _LAUNCH.format(folder=os.path.dirname(BOOTSTRAP))
        return [sys.executable, "-I", "-S", "-u", "-X", "utf8", "-c", launch, self.settings_file]

    @property
    def env(self) -> dict[str, str]:
        """The program's whole environment: where its folder is, and a UTF-8 locale."""
        home = SANDBOX_DIR if "minimal_root" in self.layers else self.workdir
        env = {"HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
        if self.limits.allow_subprocesses:
            env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        return env
