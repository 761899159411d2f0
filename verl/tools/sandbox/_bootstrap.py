"""Child side of the sandbox: lock the process down, then run the user's code. Standard library only.

Run as ``python -I -u _bootstrap.py '<json settings>'`` by :mod:`verl.tools.sandbox.runner`, in the run's temporary
working directory and its own session (process group). Order matters: resource limits first (they bind everything
after); then every capability dropped (a root child keeps uid 0 but none of root's powers); then Landlock (writes
only in the run's directory, no TCP, no signals outside); then the seccomp filter (kernel: no new processes, no
sockets, no touching other processes); then the audit hook (Python: the same rules with readable messages); and
only then the user's code, compiled as ``main.py``. A failure in any step ends the run before user code starts.

An uncaught exception prints its traceback (without this file's frames) to stderr and exits with code 1; the
runner reads the exception's type from the traceback's last line.
"""

import json
import os
import resource
import sys
import traceback

_MB = 1024 * 1024


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


def _set_limits(settings: dict) -> None:
    cpu = int(settings["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(settings["memory_mb"]) * _MB
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    file_size = int(settings["max_file_mb"]) * _MB
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    files = int(settings["max_open_files"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    uid = os.getuid()
    # root is exempt from RLIMIT_NPROC in the kernel; the seccomp filter is what holds there
    base = 0 if uid == 0 else _user_task_count(uid)
    nproc = base + int(settings["max_processes"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _sibling(name: str):
    """A helper module of this folder, loaded by path (the bootstrap runs isolated, without the verl package)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_verl_sandbox{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_NETWORK_EVENTS = frozenset({
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
    "socket.getnameinfo", "urllib.Request",
})
_PROCESS_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec", "subprocess.Popen", "os.startfile",
})


def _install_audit_hook(block_network: bool, block_processes: bool) -> None:
    import socket

    unix = int(socket.AF_UNIX)

    def hook(event: str, args: tuple) -> None:
        if block_network:
            if event == "socket.__new__" and int(args[1]) != unix:
                raise PermissionError("sandbox: network access is disabled (socket creation blocked)")
            if event in _NETWORK_EVENTS:
                raise PermissionError(f"sandbox: network access is disabled ({event} blocked)")
        if block_processes and event in _PROCESS_EVENTS:
            raise PermissionError(f"sandbox: starting processes is disabled ({event} blocked)")

    sys.addaudithook(hook)


def _run_user_code(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        source = f.read()
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
        traceback.print_exception(type(exc), exc, tb)
        return 1
    return 0


def main() -> int:
    settings = json.loads(sys.argv[1])
    try:
        _set_limits(settings)
        if settings["drop_capabilities"]:
            _sibling("_capabilities").drop_all()
        if settings["landlock"]:
            _sibling("_landlock").restrict([settings["workdir"]], block_tcp=not settings["network"])
        if settings["seccomp"]:
            _sibling("_seccomp").install(block_network=not settings["network"],
                                         block_processes=not settings["allow_subprocesses"])
        if settings["python_guards"]:
            _install_audit_hook(not settings["network"], not settings["allow_subprocesses"])
    except Exception as exc:  # fail closed: no user code runs in a half-locked process
        print(f"SandboxSetupError: {exc!r}", file=sys.stderr)
        return 3
    del sys.argv[1:]
    sys.argv[0] = "main.py"
    sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
    status = _run_user_code(settings["code_file"])
    sys.stdout.flush()
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
