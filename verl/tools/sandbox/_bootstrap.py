"""Child side of the sandbox: lock the process down, then run the user's code. Standard library only.

Imported and run (``main()``) by ``python -I -S -u -X utf8 -c ... SETTINGS`` (``SETTINGS``: a ``marshal`` file)
from :mod:`verl.tools.sandbox.runner`, in its own session (process group), with an environment of HOME, TMPDIR and
LANG only. ``-S`` keeps site-packages off ``sys.path`` (the allowed packages are added by path) and skips the
``.pth`` files; importing (not running) this file lets its bytecode be cached. Both make start-up cheaper.
Order matters, and each step needs the privileges the next one gives up:

1. read the settings and the program, load the helper modules (they live in the project, which the program
   will not see);
2. resource limits (they bind everything after);
3. namespaces and the minimal root (needs the capabilities root has, or those of a fresh user namespace);
4. the user switch (root -> ``nobody``) and every capability dropped, ``no_new_privs``;
5. Landlock (read only the plan's paths, write only the run's folder, execute nothing, no TCP, no signals out);
6. the seccomp filter (no exec, no new processes, no sockets, none of the dangerous syscalls);
7. the audit hook (Python: readable error messages for the same rules);
8. only then the user's code, compiled as ``main.py``.

The runner names the layers to apply; a failure in any of them ends the run before user code starts (exit code 3,
``SandboxSetupError`` on stderr). In probe mode (``"probe": true``) every layer is tried, failures are recorded
instead, and the outcome of each is printed as JSON: that is how the runner learns at start-up what this machine
can provide.

An uncaught exception of the user's code prints its traceback (without this file's frames) to stderr and exits
with code 1; the runner reads the exception's type from the traceback's last line.
"""

import marshal
import os
import resource
import sys

_MB = 1024 * 1024
_SETUP_FAILED = 3


def _helpers():
    """The helper modules of this folder. The launcher put the folder first on sys.path (the bootstrap runs
    isolated, without the verl package); plain imports reuse their cached bytecode and cost less than
    ``importlib.util``, which pulls in half of the standard library."""
    import _capabilities
    import _landlock
    import _namespaces
    import _seccomp

    return _landlock, _seccomp, _capabilities, _namespaces


def _user_task_count(uid: int) -> int:
    """Threads (kernel tasks) owned by ``uid`` now: RLIMIT_NPROC counts them all, not just this run's."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return count


def _set_limits(settings: dict, uid: int) -> None:
    cpu = int(settings["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(settings["memory_mb"]) * _MB
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    file_size = int(settings["max_file_mb"]) * _MB
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    files = int(settings["max_open_files"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # the kernel does not apply RLIMIT_NPROC to root; the seccomp filter is what holds there
    base = 0 if uid == 0 else _user_task_count(uid)
    nproc = base + int(settings["max_processes"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


_NETWORK_EVENTS = frozenset(
    {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyname_ex",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "urllib.Request",
    }
)
_PROCESS_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.system",
        "os.exec",
        "subprocess.Popen",
        "os.startfile",
    }
)


def _install_audit_hook(block_network: bool, block_processes: bool) -> None:
    import _socket  # the C module: importing ``socket`` would cost more than every other step together

    unix = int(_socket.AF_UNIX)

    def hook(event: str, args: tuple) -> None:
        if block_network:
            if event == "socket.__new__" and int(args[1]) != unix:
                raise PermissionError("sandbox: network access is disabled (socket creation blocked)")
            if event in _NETWORK_EVENTS:
                raise PermissionError(f"sandbox: network access is disabled ({event} blocked)")
        if block_processes and event in _PROCESS_EVENTS:
            raise PermissionError(f"sandbox: starting processes is disabled ({event} blocked)")

    sys.addaudithook(hook)


def _interactive_builtins() -> None:
    """``-S`` skips ``site``, which is where exit(), quit() and help() come from; programs call them."""
    import _sitebuiltins
    import builtins

    eof = "Ctrl-D (i.e. EOF)"
    builtins.exit = _sitebuiltins.Quitter("exit", eof)
    builtins.quit = _sitebuiltins.Quitter("quit", eof)
    builtins.help = _sitebuiltins._Helper()


def _check_reachable(folder: str, uid: int, gid: int | None) -> None:
    """Raise unless ``uid`` may enter every folder down to ``folder`` and list it (checked before switching, so a
    failed check leaves the process as it was)."""
    import stat

    path = "/"
    for part in [p for p in folder.split("/") if p] + [None]:
        info = os.stat(path)
        need = stat.S_IXUSR | (stat.S_IRUSR if part is None else 0)
        if info.st_uid == uid:
            ok = info.st_mode & need == need
        elif info.st_gid == gid:
            ok = info.st_mode & (need >> 3) == need >> 3
        else:
            ok = info.st_mode & (need >> 6) == need >> 6
        if not ok:
            raise OSError(
                f"uid {uid} cannot reach the standard library at {folder} without the minimal root "
                f"({path} is closed to other users)"
            )
        if part is not None:
            path = os.path.join(path, part)


class _Setup:
    """Applies the layers in order; in probe mode records each outcome instead of stopping at the first failure."""

    def __init__(self, settings: dict):
        self.wanted = set(settings["layers"])
        self.probe = bool(settings.get("probe"))
        self.report: dict[str, str] = {}

    def step(self, layers: tuple[str, ...], action) -> bool:
        layers = tuple(name for name in layers if name in self.wanted)
        if not layers:
            return False
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - every failure of a layer is reported by name
            if not self.probe:
                raise RuntimeError(f"layer {'/'.join(layers)}: {exc!r}") from exc
            for name in layers:
                self.report[name] = f"{type(exc).__name__}: {exc}"
            return False
        for name in layers:
            self.report.setdefault(name, "ok")
        return True


def _setup(settings: dict, source: str) -> _Setup:
    landlock, seccomp, capabilities, namespaces = _helpers()
    _interactive_builtins()

    setup = _Setup(settings)
    target_uid = settings.get("uid")
    _set_limits(settings, os.getuid() if target_uid is None else target_uid)
    block_network, block_processes = not settings["network"], not settings["allow_subprocesses"]
    # a non-root trainer needs a user namespace; a root one only when the kernel refuses it the others
    userns = True if settings.get("user_namespace") else None
    also = None if target_uid is None else (target_uid, settings.get("gid"))
    setup.step(("netns",), lambda: namespaces.enter(user=userns, mount=False, network=True, also=also))
    owner = (os.geteuid(), os.getegid()) if target_uid is None else (target_uid, settings.get("gid"))

    def minimal_root() -> None:
        namespaces.enter(user=userns, mount=True, network=False, also=also)
        namespaces.build_root(settings["plan"], settings["new_root"], settings["max_folder_mb"], owner)
        with open(os.path.join(settings["plan"]["folder"], "main.py"), "w", encoding="utf-8") as f:
            f.write(source)  # tracebacks quote the program's lines from it

    in_root = setup.step(("minimal_root",), minimal_root)
    workdir = settings["plan"]["folder"] if in_root else settings["workdir"]

    def switch_user() -> None:
        if target_uid is not None and not in_root:
            _check_reachable(os.path.dirname(os.__file__), target_uid, settings.get("gid"))
        capabilities.drop_all(target_uid, settings.get("gid"))
        if os.geteuid() == 0:
            raise OSError("still uid 0")

    setup.step(("user",), switch_user)
    os.chdir(workdir)  # before the capabilities go: a probe whose user switch failed still gets in
    setup.step(("capabilities",), lambda: capabilities.drop_all())

    def restrict() -> None:
        rules = settings["plan"]["rules_in_root" if in_root else "rules_on_host"]
        parts = landlock.restrict([(path, rights) for path, rights in rules], block_tcp=block_network)
        for part in ("net", "scope"):
            if f"landlock_{part}" in setup.wanted and part not in parts:
                setup.report[f"landlock_{part}"] = "kernel Landlock ABI too old"
                if not setup.probe:
                    raise OSError(f"landlock_{part}: kernel Landlock ABI too old")

    setup.step(("landlock_fs", "landlock_net", "landlock_scope"), restrict)
    setup.step(("seccomp",), lambda: seccomp.install(block_network=block_network, block_processes=block_processes))
    setup.step(("audit_hook",), lambda: _install_audit_hook(block_network, block_processes))
    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    sys.path += settings["plan"]["sys_path_in_root" if in_root else "sys_path_on_host"]
    return setup


def _run_user_code(source: str) -> int:
    namespace = {"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}
    try:
        code = compile(source, "main.py", "exec")
        exec(code, namespace)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: B036 - every failure of user code is reported, KeyboardInterrupt too
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        import traceback

        traceback.print_exception(type(exc), exc, tb)
        return 1
    return 0


def main() -> int:
    try:
        with open(sys.argv[1], "rb") as f:
            settings = marshal.load(f)  # written by the runner of this same interpreter; json would import re
        source = ""
        if not settings.get("probe"):
            with open(settings["code_file"], encoding="utf-8") as f:
                source = f.read()
        setup = _setup(settings, source)
    except Exception as exc:  # fail closed: no user code runs in a half-locked process
        print(f"SandboxSetupError: {exc}", file=sys.stderr)
        return _SETUP_FAILED
    if setup.probe:
        import json

        print(json.dumps(setup.report))
        return 0
    del sys.argv[1:]
    sys.argv[0] = "main.py"
    status = _run_user_code(source)
    sys.stdout.flush()
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
