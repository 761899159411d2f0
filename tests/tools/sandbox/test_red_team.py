"""Red team: programs a policy could write to get out of the sandbox. Each one must be refused, and the trainer
(this test process, a stand-in process beside it, its files and its sockets) must come out untouched.

The suite needs the full sandbox (every required layer); on a machine without one it is skipped with the reason,
as the sandbox itself would refuse to run there. Every attempt is one short run: the whole suite takes seconds.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import verl
from verl.tools.sandbox import SandboxLimits, _seccomp, missing_layers, run_python_sync

LIMITS = SandboxLimits(wall_timeout_s=10.0, cpu_time_s=3, memory_mb=512)
KERNEL_ONLY = SandboxLimits(wall_timeout_s=10.0, cpu_time_s=3, memory_mb=512, python_guards=False)
_MISSING = missing_layers(LIMITS) if _seccomp.supported() else {"seccomp": "unsupported machine"}
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"this machine lacks sandbox layers: {_MISSING}")

SECRET = f"trainer-secret-{uuid.uuid4().hex}"
REFUSED = ("PermissionError", "FileNotFoundError", "OSError", "ModuleNotFoundError", "NotADirectoryError")
_WATCHED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)


def _session_members(sid: int) -> list[int]:
    """Processes whose session or process group is ``sid`` (everything a sandbox run started)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if sid in (int(fields[2]), int(fields[3])):  # pgrp, session
            members.append(int(entry))
    return members


@dataclass
class Trainer:
    """What the sandbox must not touch: files, a sibling process, listening sockets, this process."""

    folder: Path
    canary: Path
    victim: subprocess.Popen
    tcp: socket.socket
    unix: socket.socket
    unix_path: str
    abstract_name: bytes
    abstract: socket.socket
    signals: list[int] = field(default_factory=list)
    scratch: str = field(default_factory=lambda: f"verl-redteam-{uuid.uuid4().hex}")

    @property
    def facts(self) -> dict:
        return {
            "CANARY": str(self.canary),
            "FOLDER": str(self.folder),
            "TRAINER_PID": os.getpid(),
            "VICTIM_PID": self.victim.pid,
            "TCP_PORT": self.tcp.getsockname()[1],
            "UNIX_PATH": self.unix_path,
            "ABSTRACT": self.abstract_name,
            "SCRATCH": self.scratch,
            "PYTHON": sys.executable,
            "PROJECT": str(Path(verl.__file__).resolve().parents[1]),
            "HOME_DIR": os.path.expanduser("~"),
            "NUMPY": _module_file("numpy"),
        }


def _module_file(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return spec.origin if spec and spec.origin else "/nonexistent"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trainer")
    canary = folder / "checkpoint.txt"
    canary.write_text(SECRET)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    tcp = socket.create_server(("127.0.0.1", 0))
    unix_path = str(folder / "trainer.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen()
    abstract_name = f"\0verl-redteam-{uuid.uuid4().hex}".encode()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(abstract_name)
    abstract.listen()
    for s in (tcp, unix, abstract):
        s.setblocking(False)
    state = Trainer(folder, canary, victim, tcp, unix, unix_path, abstract_name, abstract)
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: state.signals.append(signum)) for sig in _WATCHED_SIGNALS
    }
    os.environ["VERL_REDTEAM_SECRET"] = SECRET
    try:
        yield state
    finally:
        del os.environ["VERL_REDTEAM_SECRET"]
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for s in (tcp, unix, abstract):
            s.close()
        victim.kill()
        victim.wait()


def _snapshot(trainer: Trainer) -> dict:
    info = trainer.canary.stat()
    return {
        "canary": (trainer.canary.read_text(), info.st_mtime_ns, info.st_nlink, info.st_mode, info.st_uid),
        "folder": sorted(p.name for p in trainer.folder.iterdir()),
        "cwd": os.getcwd(),
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS),
    }


def _no_pending_connection(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def attempt(trainer: Trainer, code: str, limits: SandboxLimits = LIMITS, *, allowed=REFUSED):
    """Run ``code`` (``{NAME}`` placeholders filled from the trainer's facts) and check the refusal (the run
    failed with one of the ``allowed`` errors; any outcome when empty) and that the trainer is untouched; returns
    the result for attempt-specific checks."""
    before = _snapshot(trainer)
    program = code
    for key, value in trainer.facts.items():
        program = program.replace("{" + key + "}", repr(value) if not isinstance(value, int) else str(value))
    result = run_python_sync(program, limits)
    # the refusal
    assert "ESCAPED" not in result.stdout, result
    assert SECRET not in result.stdout + result.stderr, "a trainer secret reached the program's output"
    if allowed:
        assert result.status == "error" and result.error_type in allowed, result
    # the trainer is untouched
    assert _snapshot(trainer) == before
    assert trainer.victim.poll() is None, "the trainer's sibling process was killed"
    assert trainer.signals == [], f"the trainer received signals {trainer.signals}"
    assert _session_members(result.pid) == [], "a process of the run outlived it"
    for listener in (trainer.tcp, trainer.unix, trainer.abstract):
        assert _no_pending_connection(listener), "the program reached a trainer's socket"
    for leftover in (f"/tmp/{trainer.scratch}", f"/dev/shm/{trainer.scratch}"):
        assert not os.path.exists(leftover), f"the program wrote {leftover} on the host"
    assert "verl-sandbox-" not in Path("/proc/self/mountinfo").read_text(), "a sandbox mount reached the host"
    return result


SYSCALL = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(name, ret):
    if ret == -1:
        code = ctypes.get_errno()
        raise PermissionError(code, name + ": " + errno.errorcode.get(code, str(code)))
    print("ESCAPED", name, ret)
"""


def _nr(name: str) -> int:
    return _seccomp.syscall_numbers(os.uname().machine)[name]


# --- the table: reads outside, exec through ctypes -------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "print(open('/etc/passwd').read())",
        "import os; print(os.listdir('/root'))",
        "import os; print(os.listdir({HOME_DIR}))",
        "print(open({HOME_DIR} + '/.gitconfig').read())",
        "import os; print(os.listdir(os.path.dirname({PROJECT})))",
        "print(open({PROJECT} + '/verl/__init__.py').read())",
        "print(open({CANARY}).read())",
        "import os; print(os.listdir({FOLDER}))",
    ],
    ids=[
        "etc_passwd",
        "list_root_home",
        "list_trainer_home",
        "read_home_dotfile",
        "list_beside_project",
        "read_project_source",
        "read_run_checkpoint",
        "list_run_outputs",
    ],
)
def test_reading_outside_the_sandbox_is_refused(trainer, code):
    attempt(trainer, code)


@pytest.mark.parametrize("target", ["'/usr/bin/id'", "'/bin/echo'", "{PYTHON}"], ids=["id", "echo", "python"])
@pytest.mark.parametrize("limits", [LIMITS, KERNEL_ONLY], ids=["all_layers", "kernel_only"])
def test_exec_through_ctypes_is_refused(trainer, target, limits):
    code = (
        SYSCALL + f"argv = (ctypes.c_char_p * 2)(os.fsencode({target}), None)\n"
        f"check('execve', libc.execve(os.fsencode({target}), argv, None))"
    )
    result = attempt(trainer, code, limits, allowed=("PermissionError",))
    assert "EPERM" in result.error_message and "uid=" not in result.stdout


@pytest.mark.parametrize(
    "code",
    [
        "import os, sys; os.execv(sys.executable, [sys.executable, '-c', 'print(\"ESCAPED\")'])",
        "import os; os.posix_spawn('/bin/echo', ['echo', 'ESCAPED'], {})",
        "import subprocess; print(subprocess.run(['id'], capture_output=True, text=True).stdout)",
        "import os\nif os.system('echo ESCAPED') != 0:\n    raise PermissionError('os.system could not start a shell')",
    ],
    ids=["os_execv", "posix_spawn", "subprocess_run", "os_system"],
)
@pytest.mark.parametrize("limits", [LIMITS, KERNEL_ONLY], ids=["all_layers", "kernel_only"])
def test_exec_through_python_is_refused(trainer, code, limits):
    attempt(trainer, code, limits, allowed=("PermissionError", "FileNotFoundError"))


def test_execveat_of_a_memfd_copy_of_the_interpreter_is_refused(trainer):
    code = SYSCALL + (
        "fd = os.memfd_create('x')\nos.write(fd, open({PYTHON}, 'rb').read())\n"
        "argv = (ctypes.c_char_p * 2)(b'python', None)\n"
        f"check('execveat', libc.syscall({_nr('execveat')}, fd, b'', argv, None, 0x1000))"
    )
    result = attempt(trainer, code, KERNEL_ONLY, allowed=("PermissionError",))
    assert "EPERM" in result.error_message


def test_proc_self_mem_is_not_there_to_patch(trainer):
    attempt(trainer, "f = open('/proc/self/mem', 'r+b'); print('ESCAPED')")


# --- the syscalls --------------------------------------------------------------------------------------

DANGEROUS_SYSCALLS = {
    "ptrace": "16, {TRAINER_PID}, 0, 0",  # PTRACE_ATTACH to the trainer
    "mount": "b'tmpfs', b'/sandbox', b'tmpfs', 0, 0",
    "unshare": "0x10000000",  # CLONE_NEWUSER
    "setns": "0, 0",
    "keyctl": "0, -3, 0",  # KEYCTL_GET_KEYRING_ID of the session keyring
    "bpf": "5, 0, 0",  # BPF_PROG_LOAD
    "userfaultfd": "0",
    "io_uring_setup": "8, 0",
    "perf_event_open": "0, 0, -1, -1, 0",
    "personality": "0x0400000",  # READ_IMPLIES_EXEC
    "open_by_handle_at": "-100, 0, 0",
    "setsid": "",
    "pidfd_send_signal": "0, 15, 0, 0",
}


@pytest.mark.parametrize("name", sorted(DANGEROUS_SYSCALLS))
def test_dangerous_syscalls_are_refused(trainer, name):
    args = DANGEROUS_SYSCALLS[name]
    code = SYSCALL + f"check({name!r}, libc.syscall({_nr(name)}{', ' if args else ''}{args}))"
    result = attempt(trainer, code, KERNEL_ONLY, allowed=("PermissionError",))
    assert "EPERM" in result.error_message, result


def test_clone_into_new_namespaces_is_refused(trainer):
    code = SYSCALL + f"check('clone', libc.syscall({_nr('clone')}, 0x10000000 | 0x20000000 | 17, 0, 0, 0, 0))"
    attempt(trainer, code, KERNEL_ONLY, allowed=("PermissionError",))


def test_becoming_root_again_is_refused(trainer):
    attempt(trainer, "import os; os.setuid(0); print('ESCAPED')", allowed=("PermissionError",))


# --- links, scratch folders, the trainer's files -----------------------------------------------------------------


def test_symlinks_out_of_the_folder_lead_nowhere(trainer):
    attempt(trainer, "import os\nos.symlink({CANARY}, 'link')\nprint(open('link').read())")
    attempt(trainer, "import os\nos.symlink('/', 'up')\nprint(os.listdir('up/etc'))")


def test_hard_links_to_trainer_files_are_refused(trainer):
    nlink = trainer.canary.stat().st_nlink
    attempt(trainer, "import os\nos.link({CANARY}, 'hard')\nprint(open('hard').read())")
    attempt(trainer, "import os\nos.link('/etc/ld.so.cache', 'hard')\nprint('ESCAPED')")
    assert trainer.canary.stat().st_nlink == nlink


@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm"])
def test_writes_to_shared_scratch_folders_are_refused(trainer, folder):
    attempt(trainer, f"open({folder!r} + '/' + {{SCRATCH}}, 'w').write('x'); print('ESCAPED')")


def test_filling_the_disk_is_refused(trainer):
    code = "for i in range(1000):\n    open(f'fill{i}', 'wb').write(b'0' * (4 * 2 ** 20))\nprint('ESCAPED')"
    result = attempt(
        trainer, code, SandboxLimits(wall_timeout_s=10.0, cpu_time_s=3, max_folder_mb=8), allowed=("OSError",)
    )
    assert "No space left on device" in result.error_message


def test_overwriting_a_trainer_file_is_refused(trainer):
    attempt(trainer, "open({CANARY}, 'w').write('poisoned'); print('ESCAPED')")


def test_the_runs_own_settings_are_out_of_reach(trainer):
    attempt(trainer, "import os; print(os.listdir('..'), open('../settings', 'rb').read())")


# --- processes, signals, the parent's environment -----------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import os, signal; os.kill({TRAINER_PID}, signal.SIGTERM)",
        "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)",
        "import os, signal; os.kill({VICTIM_PID}, signal.SIGKILL)",
        "import os, signal; os.killpg(os.getpgid({TRAINER_PID}), signal.SIGHUP)",
        "import os, signal; os.kill(-1, signal.SIGTERM)",
    ],
    ids=["trainer", "parent", "sibling", "trainer_group", "everyone"],
)
def test_signals_to_the_trainer_are_refused(trainer, code):
    attempt(trainer, code, KERNEL_ONLY, allowed=("PermissionError", "ProcessLookupError"))


@pytest.mark.parametrize("path", ["/proc/{TRAINER_PID}/environ", "/proc/1/environ", "/proc/self/environ"])
def test_environments_of_other_processes_are_not_readable(trainer, path):
    attempt(trainer, f"print(open('{path}', 'rb').read())")


def test_the_trainers_environment_is_not_inherited(trainer):
    result = attempt(trainer, "import os; print(dict(os.environ))", allowed=())
    assert result.status == "ok" and "VERL_REDTEAM_SECRET" not in result.stdout


def test_fork_bomb_is_refused_by_the_kernel(trainer):
    attempt(trainer, "import os\nwhile True:\n    os.fork()", KERNEL_ONLY, allowed=("PermissionError",))


def test_thread_bomb_is_capped(trainer):
    code = (
        "import threading, time\nthreads = []\nfor _ in range(10000):\n"
        "    t = threading.Thread(target=time.sleep, args=(5,), daemon=True)\n"
        "    t.start()\n    threads.append(t)\nprint('ESCAPED')"
    )
    attempt(
        trainer,
        code,
        SandboxLimits(wall_timeout_s=10.0, cpu_time_s=3, memory_mb=512, max_processes=8),
        allowed=("RuntimeError",),
    )


# --- the trainer's sockets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import socket; socket.create_connection(('127.0.0.1', {TCP_PORT}), timeout=2); print('ESCAPED')",
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect({UNIX_PATH}); print('ESCAPED')",
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect({ABSTRACT}); print('ESCAPED')",
    ],
    ids=["tcp", "unix_path", "unix_abstract"],
)
@pytest.mark.parametrize("limits", [LIMITS, KERNEL_ONLY], ids=["all_layers", "kernel_only"])
def test_the_trainers_sockets_are_unreachable(trainer, code, limits):
    attempt(
        trainer, code, limits, allowed=("PermissionError", "FileNotFoundError", "ConnectionRefusedError", "OSError")
    )


# --- resource attacks ---------------------------------------------------------------------------------------------


def test_huge_output_is_cut(trainer):
    code = "import sys\nchunk = 'A' * 65536\nfor _ in range(512):\n    sys.stdout.write(chunk)\n"
    result = attempt(trainer, code, allowed=())
    assert result.status == "ok" and result.stdout_truncated
    assert len(result.stdout) < 2 * LIMITS.max_output_bytes


@pytest.mark.parametrize(
    "code",
    [
        "def f(n):\n    return f(n + 1)\nf(0)",
        "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return list(map(f, [n + 1]))\nf(0)",
    ],
    ids=["python_frames", "c_stack_with_the_limit_raised"],
)
def test_deep_recursion_ends_the_run_only(trainer, code):
    result = attempt(trainer, code, SandboxLimits(wall_timeout_s=10.0, cpu_time_s=2, memory_mb=256), allowed=())
    assert result.status == "timeout" or result.error_type in ("RecursionError", "MemoryError", "Signal"), result
    if "setrecursionlimit" not in code:
        assert result.error_type == "RecursionError", result


@pytest.mark.parametrize(
    "payload, refused",
    [
        (b"cos\nsystem\n(S'echo ESCAPED'\ntR.", ("PermissionError",)),
        (b"cbuiltins\nbytearray\n(I100000000000\ntR.", ("MemoryError",)),
        (b"coperator\nmul\n(S'A'\nI100000000000\ntR.", ("MemoryError",)),
        (b"(" * 20000 + b"l" * 20000 + b".", ("RecursionError", "MemoryError")),
    ],
    ids=["reduce_to_os_system", "reduce_to_huge_allocation", "reduce_to_string_repeat", "deep_nesting"],
)
def test_pickle_bombs_are_contained(trainer, payload, refused):
    attempt(trainer, f"import pickle\nobj = pickle.loads({payload!r})\nprint(repr(obj)[:20])", allowed=refused)


def test_importing_packages_that_were_not_allowed_is_refused(trainer):
    attempt(trainer, "import numpy; print('ESCAPED')")
    attempt(trainer, "print(open({NUMPY}).read()[:10]); print('ESCAPED')")


def test_errno_of_a_denied_call_is_a_refusal_not_a_crash(trainer):
    result = attempt(
        trainer, "import os\ntry:\n    os.setsid()\nexcept PermissionError as e:\n    print(e.errno)", allowed=()
    )
    assert result.status == "ok" and result.stdout.strip() == str(errno.EPERM)
