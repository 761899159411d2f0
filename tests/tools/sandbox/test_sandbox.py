"""The sandbox contains what model-written code may try: endless loops, fork bombs, huge allocations, network
access, floods of output -- and reports each one. Every run here finishes in a few seconds."""

from __future__ import annotations

import ast
import os
import resource

import pytest

from verl.tools.sandbox import SandboxLimits, _seccomp, available_layers, run_python_sync
from verl.tools.sandbox.rundir import sandbox_ids

FAST = dict(wall_timeout_s=10.0, cpu_time_s=2)


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_normal_code_prints_output_and_runs_in_a_private_folder_with_an_empty_environment():
    os.environ["VERL_SANDBOX_TEST_SECRET"] = "hunter2"
    try:
        result = run_python_sync(
            "import os\nprint(sum(range(10)))\nopen('note.txt', 'w').write('x')\nprint(os.getcwd())\n"
            "print(sorted(os.environ))\nprint(os.environ.get('VERL_SANDBOX_TEST_SECRET'))",
            SandboxLimits(**FAST),
        )
    finally:
        del os.environ["VERL_SANDBOX_TEST_SECRET"]
    assert result.status == "ok", result
    lines = result.stdout.splitlines()
    assert lines[0] == "45"
    if "minimal_root" in result.layers:
        assert lines[1] == "/sandbox"
    else:
        assert os.path.basename(os.path.dirname(lines[1])).startswith("verl-sandbox-")
        assert not os.path.exists(lines[1]), "the run's folder is removed after the run"
    assert ast.literal_eval(lines[2]) == ["HOME", "LANG", "TMPDIR"], "nothing of the parent's environment leaks"
    assert lines[3] == "None"
    assert result.to_text() == result.stdout.rstrip("\n")


def test_exit_quit_and_help_exist_as_in_an_interactive_interpreter():
    result = run_python_sync("print(callable(help), callable(quit))\nexit(5)", SandboxLimits(**FAST))
    assert result.stdout.split() == ["True", "True"] and result.exit_code == 5, result


def test_stdin_is_fed_to_the_program():
    result = run_python_sync("import sys; print(sys.stdin.read().upper())", SandboxLimits(**FAST), stdin="abc")
    assert result.status == "ok" and result.stdout.strip() == "ABC"


def test_infinite_loop_is_stopped_by_the_cpu_limit_and_reported_as_timeout():
    result = run_python_sync("while True:\n    pass", SandboxLimits(wall_timeout_s=20.0, cpu_time_s=1))
    assert result.status == "timeout" and result.timeout_kind == "cpu", result
    assert "timeout (CPU time limit exceeded)" in result.to_text()


def test_sleeping_program_is_killed_at_the_wall_timeout():
    result = run_python_sync(
        "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)",
        SandboxLimits(wall_timeout_s=1.0, cpu_time_s=5),
    )
    assert result.status == "timeout" and result.timeout_kind == "wall", result
    assert result.duration_s < 10
    assert _gone(int(result.stdout.split()[0])), "the whole process group is killed"
    assert "wall-clock" in result.to_text()


FORK_BOMB = "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    os.fork()\n"


def test_fork_bomb_is_contained_and_reported():
    result = run_python_sync(FORK_BOMB, SandboxLimits(**FAST))
    assert result.status == "error", result
    assert result.error_type == "PermissionError"
    assert "starting processes is disabled" in result.error_message
    assert _gone(int(result.stdout.split()[0]))


def test_fork_bomb_is_contained_by_the_kernel_layer_alone():
    """Without the Python audit hook: seccomp denies fork (and for non-root users RLIMIT_NPROC caps it too)."""
    limits = SandboxLimits(**FAST, python_guards=False)
    if "seccomp" not in available_layers(limits) and os.geteuid() == 0:
        pytest.skip("root without seccomp: RLIMIT_NPROC does not bind root, so a real fork bomb would not be contained")
    result = run_python_sync(FORK_BOMB, limits)
    assert result.status in ("error", "timeout"), result
    if "seccomp" in result.layers:
        assert result.error_type == "PermissionError" and "Operation not permitted" in result.error_message
    assert _gone(int(result.stdout.split()[0]))


def test_process_limit_is_set_in_the_child():
    result = run_python_sync(
        "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])", SandboxLimits(**FAST, max_processes=7)
    )
    assert result.status == "ok", result
    if os.geteuid() == 0 and "user" not in result.layers:
        assert int(result.stdout) == 7  # root is exempt from the count, so the limit is just the allowance
    else:
        assert int(result.stdout) >= 7  # the user's existing tasks plus 7


def test_ten_gigabyte_allocation_raises_memory_error():
    result = run_python_sync("x = bytearray(10 * 1024 ** 3)\nprint('allocated')", SandboxLimits(**FAST, memory_mb=512))
    assert result.status == "error", result
    assert result.error_type == "MemoryError"
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.to_text()


SOCKET = (
    "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\ns.connect(('1.1.1.1', 80))\n"
    "print('connected')"
)


def test_socket_is_blocked_and_reported():
    result = run_python_sync(SOCKET, SandboxLimits(**FAST))
    assert result.status == "error", result
    assert result.error_type == "PermissionError"
    assert "network access is disabled" in result.error_message
    assert "connected" not in result.stdout


def test_dns_lookup_is_blocked():
    result = run_python_sync("import socket; print(socket.getaddrinfo('example.com', 80))", SandboxLimits(**FAST))
    assert result.status == "error" and "network access is disabled" in result.error_message, result


@pytest.mark.skipif(not _seccomp.supported(), reason="seccomp filter not supported on this machine")
def test_socket_is_blocked_by_seccomp_alone():
    result = run_python_sync(
        SOCKET, SandboxLimits(**FAST, python_guards=False, network_namespace=False, landlock=False)
    )
    assert "seccomp" in result.layers and "netns" not in result.layers
    assert result.status == "error" and result.error_type == "PermissionError", result
    assert "Permission denied" in result.error_message


def test_socket_is_blocked_by_the_network_namespace_alone():
    limits = SandboxLimits(**FAST, python_guards=False, seccomp=False, landlock=False)
    if "netns" not in available_layers(limits):
        pytest.skip("no network namespace here (needs root and a working `unshare -n`)")
    result = run_python_sync(SOCKET, limits)
    assert result.status == "error" and result.error_type == "OSError", result
    assert "unreachable" in result.error_message.lower()


def test_tcp_connect_is_blocked_by_landlock_alone():
    limits = SandboxLimits(**FAST, python_guards=False, seccomp=False, network_namespace=False)
    if "landlock_net" not in available_layers(limits):
        pytest.skip("kernel without Landlock network rules (ABI 4)")
    result = run_python_sync(SOCKET, limits)
    assert result.status == "error" and result.error_type == "PermissionError", result


def test_the_program_writes_only_in_its_own_folder(tmp_path):
    limits = SandboxLimits(**FAST)
    target = tmp_path / "escape.txt"
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    code = (
        f"import os\nopen('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())\n"
        f"os.mkdir('sub'); os.rename('inside.txt', 'sub/moved.txt'); print(os.listdir('sub'))\n"
        f"for attempt in (lambda: os.remove({str(victim)!r}), lambda: open({str(victim)!r}).read(),\n"
        f"                lambda: open({str(target)!r}, 'w').write('escaped')):\n"
        f"    try:\n        attempt()\n        print('ESCAPED')\n    except OSError as e:\n"
        f"        print(type(e).__name__)\n"
    )
    result = run_python_sync(code, limits)
    assert result.status == "ok", result
    lines = result.stdout.split()
    assert lines[:2] == ["ok", "['moved.txt']"] and "ESCAPED" not in lines, result
    assert set(lines[2:]) <= {"PermissionError", "FileNotFoundError"}
    assert not target.exists() and victim.read_text() == "precious"


def test_signals_to_other_processes_are_denied():
    import signal
    import subprocess

    victim = subprocess.Popen(["sleep", "30"])
    try:
        result = run_python_sync(f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)", SandboxLimits(**FAST))
        assert result.status == "error" and result.error_type == "PermissionError", result
        assert victim.poll() is None, "the other process is still alive"
        # and the sandbox may still signal itself
        result = run_python_sync(
            "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('got it'))\n"
            "os.kill(os.getpid(), signal.SIGUSR1)",
            SandboxLimits(**FAST),
        )
        assert result.status == "ok" and result.stdout.strip() == "got it", result
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


CREDENTIALS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
data = (Data * 2)()
assert libc.capget(ctypes.byref(Header(0x20080522, 0)), data) == 0
print(os.getuid(), os.getgid(), os.getgroups())
print([d.effective | d.permitted | d.inheritable for d in data])
print([cap for cap in range(41) if libc.prctl(23, cap, 0, 0, 0) == 1])  # PR_CAPBSET_READ
print(libc.prctl(39, 0, 0, 0, 0), libc.prctl(21, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP
"""


def test_least_privilege_unprivileged_user_no_capabilities_no_new_privs():
    result = run_python_sync(CREDENTIALS, SandboxLimits(**FAST))
    assert result.status == "ok", result
    ids, sets, bounding, flags = (
        ast.literal_eval(line) if line.startswith("[") else line.split() for line in result.stdout.splitlines()
    )
    assert sets == [0, 0], "effective, permitted and inheritable sets are empty"
    assert flags[0] == "1", "no_new_privs is set"
    if "seccomp" in result.layers:
        assert flags[1] == "2", "a seccomp filter is installed"
    if "user" in result.layers:
        assert ids[0] != "0" and ids[1] != "0" and ids[2] == "[]"
        if os.geteuid() == 0:
            assert (int(ids[0]), int(ids[1])) == sandbox_ids(), "a root trainer's program runs as nobody"
    if os.geteuid() == 0 or "minimal_root" in result.layers:
        assert bounding == [], "the bounding set is cleared (needs the privilege to clear it)"


def test_opt_ins_allow_subprocesses_and_sockets():
    result = run_python_sync(
        "import subprocess, socket, sys\nprint(subprocess.run(['echo', 'hi'], capture_output=True,"
        " text=True).stdout.strip())\nsocket.socket().close()\nprint('socket ok')\n"
        "print(subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True,"
        " text=True).stdout.strip())",
        SandboxLimits(**FAST, allow_subprocesses=True, network=True),
    )
    assert result.status == "ok", result
    assert result.stdout.split() == ["hi", "socket", "ok", "7"]
    assert "netns" not in result.layers and "landlock_net" not in result.layers


def test_with_subprocesses_allowed_nothing_the_program_wrote_can_be_executed():
    code = (
        "import os, subprocess\nopen('run.sh', 'w').write('#!/bin/sh\\necho ESCAPED\\n')\n"
        "os.chmod('run.sh', 0o755)\nsubprocess.run(['./run.sh'])"
    )
    result = run_python_sync(code, SandboxLimits(**FAST, allow_subprocesses=True))
    assert result.status == "error" and result.error_type == "PermissionError", result
    assert "ESCAPED" not in result.stdout


def test_asyncio_and_threads_still_work_under_the_filters():
    code = (
        "import asyncio, threading\nt = threading.Thread(target=print, args=('thread',))\nt.start(); t.join()\n"
        "print(asyncio.run(asyncio.sleep(0, result='loop')))"
    )
    result = run_python_sync(code, SandboxLimits(**FAST))
    assert result.status == "ok", result
    assert result.stdout.split() == ["thread", "loop"]


def test_output_is_truncated_keeping_head_and_tail():
    result = run_python_sync("print('A' * 50000 + 'END')", SandboxLimits(**FAST, max_output_bytes=1000))
    assert result.status == "ok"
    assert result.stdout_truncated
    assert result.stdout.startswith("A" * 100) and result.stdout.rstrip().endswith("END")
    assert "bytes of output truncated" in result.stdout
    assert len(result.stdout) < 1100


def test_the_programs_folder_is_a_bounded_tmpfs():
    limits = SandboxLimits(**FAST, max_folder_mb=4)
    if "minimal_root" not in available_layers(limits):
        pytest.skip("no minimal root: the folder is on the host's disk")
    result = run_python_sync(
        "import os\nopen('a.bin', 'wb').write(b'0' * (3 * 2 ** 20))\nprint(os.listdir('.'))\n"
        "open('b.bin', 'wb').write(b'0' * (3 * 2 ** 20))",
        limits,
    )
    assert sorted(ast.literal_eval(result.stdout)) == ["a.bin", "main.py"], result
    assert result.error_type == "OSError" and "No space left on device" in result.error_message, result


def test_file_size_limit():
    result = run_python_sync(
        "open('big.bin', 'wb').write(b'0' * (3 * 1024 * 1024))", SandboxLimits(**FAST, max_file_mb=1)
    )
    assert result.status == "error", result
    assert "File too large" in result.stderr


def test_exit_code_and_exception_are_reported():
    result = run_python_sync("import sys\nprint('partial')\nsys.exit(4)", SandboxLimits(**FAST))
    assert result.status == "error" and result.exit_code == 4 and result.error_type is None
    assert "exited with code 4" in result.to_text()
    result = run_python_sync("1/0", SandboxLimits(**FAST))
    assert result.error_type == "ZeroDivisionError" and result.error_message == "division by zero"
    assert "_bootstrap" not in result.stderr, "the traceback shows user frames only"
    result = run_python_sync("def broken(:\n    pass", SandboxLimits(**FAST))
    assert result.error_type == "SyntaxError" and 'File "main.py", line 1' in result.stderr, result


def test_limits_reject_bad_values_with_the_field_name():
    with pytest.raises(ValueError, match="SandboxLimits.memory_mb must be a positive number"):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError, match="my tool: SandboxLimits.wall_timeout_s"):
        SandboxLimits.from_config({"wall_timeout_s": "soon"}, where="my tool")


def test_seccomp_filter_assembles_for_every_supported_machine():
    for machine in ("x86_64", "aarch64"):
        program = _seccomp.build_filter(machine)
        assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in program)
        for index, (code, jt, jf, _) in enumerate(program):
            if code & 0x07 == 0x05:  # jumps land inside the program
                assert index + 1 + max(jt, jf) < len(program)
    with pytest.raises(OSError, match="unsupported machine 'sparc'"):
        _seccomp.build_filter("sparc")


def test_parent_limits_are_untouched():
    before = resource.getrlimit(resource.RLIMIT_AS)
    run_python_sync("print(1)", SandboxLimits(**FAST))
    assert resource.getrlimit(resource.RLIMIT_AS) == before
