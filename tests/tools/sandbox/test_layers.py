"""Which layers a run gets, the refusal to run without a required one, the opt-in to the weaker sandbox, and the
minimal root's contents. The scenarios "the trainer is not root" and "this machine has no user namespaces" run
for real in a child trainer process inside a user namespace (skipped where ``unshare`` cannot make one)."""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl.tools.sandbox import (
    REQUIRED_LAYERS,
    SandboxLimits,
    SandboxUnavailableError,
    _landlock,
    _seccomp,
    available_layers,
    check_layers,
    layers,
    missing_layers,
    run_python_sync,
)
from verl.tools.sandbox.plan import PACKAGES_DIR, root_plan

FAST = dict(wall_timeout_s=10.0, cpu_time_s=2)
REPO = Path(__file__).resolve().parents[3]


def _fake_probe(monkeypatch, **outcomes):
    """Pretend this machine's probe reported ``outcomes`` (layer -> reason) and every other layer worked."""

    def probe(limits):
        return tuple((name, outcomes.get(name, "ok")) for name in layers.wanted_layers(limits))

    monkeypatch.setattr(layers, "_probe", probe)


def test_limits_ask_for_every_layer_by_default_and_drop_the_network_ones_when_the_network_is_on():
    assert layers.wanted_layers(SandboxLimits()) == [
        "minimal_root",
        "netns",
        "user",
        "capabilities",
        "landlock_fs",
        "landlock_net",
        "landlock_scope",
        "seccomp",
        "audit_hook",
    ]
    wanted = layers.wanted_layers(SandboxLimits(network=True, allow_subprocesses=True))
    assert "netns" not in wanted and "landlock_net" not in wanted and "audit_hook" not in wanted
    assert layers.wanted_layers(SandboxLimits(minimal_root=False, seccomp=False))[:2] == ["netns", "user"]


def test_allow_missing_layers_takes_true_false_or_layer_names():
    assert SandboxLimits(allow_missing_layers=True).accepts_missing("seccomp")
    assert not SandboxLimits().accepts_missing("seccomp")
    limits = SandboxLimits(allow_missing_layers=["landlock_fs"])
    assert limits.allow_missing_layers == ("landlock_fs",) and limits.accepts_missing("landlock_fs")
    assert not limits.accepts_missing("minimal_root")
    with pytest.raises(ValueError, match=r"allow_missing_layers: unknown layer\(s\) \['landlock'\]"):
        SandboxLimits(allow_missing_layers=["landlock"])
    with pytest.raises(ValueError, match="allow_missing_layers must be true, false or a list"):
        SandboxLimits(allow_missing_layers="seccomp")
    with pytest.raises(ValueError, match="allowed_packages must be a list of top-level import names"):
        SandboxLimits(allowed_packages="numpy")
    assert SandboxLimits(allowed_packages=["numpy"]).allowed_packages == ("numpy",)


def test_a_missing_required_layer_is_named_at_start_up_and_refused(monkeypatch):
    _fake_probe(
        monkeypatch,
        landlock_fs="OSError: sandbox landlock: not supported by this kernel",
        landlock_net="same",
        landlock_scope="same",
    )
    limits = SandboxLimits(**FAST)
    assert missing_layers(limits) == {"landlock_fs": "OSError: sandbox landlock: not supported by this kernel"}
    with pytest.raises(SandboxUnavailableError) as info:
        check_layers(limits, where="tool 'code_interpreter'")
    message = str(info.value)
    assert "tool 'code_interpreter'" in message and "['landlock_fs']" in message
    assert "not supported by this kernel" in message and "allow_missing_layers" in message
    with pytest.raises(SandboxUnavailableError):
        run_python_sync("print('never runs')", limits)


def test_the_opt_in_runs_the_weaker_sandbox_and_says_so(monkeypatch, caplog):
    _fake_probe(monkeypatch, landlock_fs="kernel without Landlock", landlock_net="-", landlock_scope="-")
    limits = SandboxLimits(**FAST, allow_missing_layers=["landlock_fs"])
    with caplog.at_level(logging.WARNING, logger="verl.tools.sandbox.layers"):
        got = check_layers(limits, where="opt-in test")
    assert "landlock_fs" not in got and "seccomp" in got
    assert "running WITHOUT the sandbox layer(s) ['landlock_fs']" in caplog.text
    result = run_python_sync("print(6 * 7)", limits)
    assert result.status == "ok" and result.stdout.strip() == "42", result
    assert "landlock_fs" not in result.layers and "landlock_net" not in result.layers
    # a layer the list does not name is still refused
    with pytest.raises(SandboxUnavailableError, match=r"\['seccomp'\]"):
        _fake_probe(monkeypatch, seccomp="unsupported machine")
        check_layers(SandboxLimits(allow_missing_layers=["landlock_fs"]))


def test_an_explicitly_disabled_layer_is_not_missing(monkeypatch):
    _fake_probe(monkeypatch, seccomp="unsupported machine")
    assert check_layers(SandboxLimits(seccomp=False)) == [
        name for name in available_layers(SandboxLimits(seccomp=False))
    ]


@pytest.mark.skipif(not ctypes.util.find_library("seccomp"), reason="libseccomp not installed (the oracle)")
def test_syscall_numbers_match_libseccomp():
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    for machine, (arch, _) in _seccomp._ARCHES.items():
        for name, number in _seccomp.syscall_numbers(machine).items():
            assert lib.seccomp_syscall_resolve_name_arch(arch, name.encode()) == number, (machine, name)
    assert set(_seccomp.ALWAYS_DENIED) >= {
        "ptrace",
        "mount",
        "unshare",
        "setns",
        "keyctl",
        "bpf",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "perf_event_open",
        "personality",
    }
    assert {"execve", "execveat"} <= set(_seccomp.PROCESS_DENIED)


def test_the_plan_binds_the_interpreter_and_hides_site_packages():
    plan = root_plan(("numpy",))
    sources = [source for source, _, _ in plan.binds]
    assert os.path.realpath(sys.base_prefix) in sources
    assert not any(s.startswith(("/etc/passwd", "/home", str(REPO))) for s in sources)
    numpy_dir = os.path.dirname(__import__("numpy").__file__)
    assert any(d in numpy_dir for d in plan.hide), "site-packages is covered"
    assert (os.path.realpath(numpy_dir), f"{PACKAGES_DIR}/numpy", False) in plan.binds
    assert plan.sys_path_in_root == (PACKAGES_DIR,)
    # without a minimal root, Landlock carves site-packages out of the interpreter's folder: its entries may be
    # listed (the import system needs that for the allowed packages) but not read
    assert all(rights == _landlock.READ_DIR for path, rights in plan.rules_on_host if path in plan.hide)
    assert not any(
        path.startswith(plan.hide) and path not in plan.packages and path not in plan.hide
        for path, _ in plan.rules_on_host
    )
    with pytest.raises(ValueError, match="allowed_packages: no installed package 'no_such_package_xyz'"):
        root_plan(("no_such_package_xyz",))
    with pytest.raises(ValueError, match="'json' is part of the standard library"):
        root_plan(("json",))


def test_allowed_packages_import_and_the_others_stay_hidden():
    limits = SandboxLimits(wall_timeout_s=20.0, cpu_time_s=10, allowed_packages=["numpy"])
    result = run_python_sync("import numpy\nprint(int(numpy.arange(5).sum()))\nimport yaml", limits)
    assert result.stdout.strip() == "10", result
    assert result.error_type == "ModuleNotFoundError", result


_LISTING = """
import json, os
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as err:
        return type(err).__name__
chains = {}
for prefix in json.loads(PREFIXES):
    parts = [p for p in prefix.split("/") if p]
    for depth in range(len(parts)):
        folder = "/" + "/".join(parts[:depth])
        chains[folder] = listing(folder)
print(json.dumps({"etc": listing("/etc"), "dev": listing("/dev"), "chains": chains}))
open("/x", "w")
"""
# the system's folders the minimal root may show at its top level, besides the run's own and the interpreter's path
_SYSTEM_TOP = {"sandbox", "packages", "usr", "lib", "lib64", "lib32", "libx32", "etc", "dev"}


def minimal_root_listing(limits: SandboxLimits) -> tuple[dict, object]:
    """What a sandboxed program sees at its root, in ``/etc`` and ``/dev``, and in every folder on the way to the
    interpreter's installation (and to its virtual environment, if any)."""
    prefixes = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)})
    result = run_python_sync(f"PREFIXES = {json.dumps(json.dumps(prefixes))}\n" + _LISTING, limits)
    return json.loads(result.stdout), result


def check_minimal_root(seen: dict, prefixes: list[str]) -> None:
    """Each folder on the way to an interpreter prefix holds only the next step towards one; nothing else of the
    host (home folders, /tmp, /proc, the project) shows."""
    steps: dict[str, set[str]] = {}
    for prefix in prefixes:
        parts = [p for p in prefix.split("/") if p]
        for depth in range(len(parts)):
            steps.setdefault("/" + "/".join(parts[:depth]), set()).add(parts[depth])
    for folder, listed in seen["chains"].items():
        allowed = steps[folder] | (_SYSTEM_TOP if folder == "/" else set())
        if folder != "/" and any(folder.startswith(p) for p in ("/usr", "/lib")):
            continue  # the system's library folders are bound whole
        assert set(listed) <= allowed, f"{folder} shows {sorted(set(listed) - allowed)}"
    assert "sandbox" in seen["chains"]["/"] and not {"proc", "sys", "boot", "var"} & set(seen["chains"]["/"])
    assert set(seen["etc"]) <= {"ld.so.cache", "localtime"}, seen["etc"]
    assert set(seen["dev"]) <= {"null", "zero", "full", "random", "urandom"}, seen["dev"]


def test_the_minimal_root_holds_only_what_python_needs():
    limits = SandboxLimits(**FAST, landlock=False)  # look at the mounts alone
    if "minimal_root" not in available_layers(limits):
        pytest.skip("no minimal root on this machine")
    seen, result = minimal_root_listing(limits)
    check_minimal_root(seen, sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}))
    assert result.error_type == "OSError" and "Read-only file system" in result.error_message, result


def test_the_minimal_root_of_an_interpreter_in_a_venv_under_a_temporary_folder(tmp_path):
    """Where the user's venv lives (/tmp, a home folder, /opt) shows in the root as the path to it, and only that."""
    limits = SandboxLimits(**FAST, landlock=False)
    if "minimal_root" not in available_layers(limits):
        pytest.skip("no minimal root on this machine")
    venv = tmp_path / "home" / "someone" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    script = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_layers import FAST, minimal_root_listing
        from verl.tools.sandbox import SandboxLimits
        seen, result = minimal_root_listing(SandboxLimits(**FAST, landlock=False))
        prefixes = sorted({{os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}})
        print(json.dumps({{"seen": seen, "prefixes": prefixes}}))
    """)
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert str(venv.resolve()) in report["prefixes"]
    check_minimal_root(report["seen"], report["prefixes"])
    assert report["seen"]["chains"][str(tmp_path.resolve())] == ["home"]  # the temporary folder shows one step


# --- the trainer is not root; the machine has no user namespaces (real kernels, in a child trainer) -------------

_TRAINER = textwrap.dedent("""
    import json, os, sys, types
    for name, folder in (("verl", "verl"), ("verl.tools", "verl/tools")):  # only the sandbox, not all of verl
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(sys.argv[1], folder)]
        sys.modules[name] = module
    from verl.tools.sandbox import SandboxLimits, SandboxUnavailableError, check_layers, run_python_sync
    out = {"uid": os.geteuid()}
    code = "import os\\nprint(os.getuid(), os.getcwd())\\nopen('/etc/passwd')"
    try:
        out["layers"] = check_layers(SandboxLimits())
    except SandboxUnavailableError as err:
        out["refused"] = str(err)
        limits = SandboxLimits(allow_missing_layers=["minimal_root", "netns"])
        out["layers"] = check_layers(limits)
    else:
        limits = SandboxLimits()
    result = run_python_sync(code, limits)
    out["stdout"], out["error"] = result.stdout.split(), result.error_type
    print(json.dumps(out))
""")


def _child_trainer(tmp_path, max_user_namespaces: int | None = None, *, without_sys_admin: bool = False) -> dict:
    tool = "setpriv" if without_sys_admin else "unshare"
    if shutil.which(tool) is None or os.geteuid() != 0:
        pytest.skip(f"needs root and util-linux {tool} to start the trainer this scenario describes")
    script = tmp_path / "trainer.py"
    script.write_text(_TRAINER)
    trainer = f"{sys.executable} -I {script} {REPO}"
    if without_sys_admin:  # root, as in a container that was not given CAP_SYS_ADMIN
        argv = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "sh", "-c", trainer]
    else:  # a non-root trainer (uid 1000)
        inner = f"unshare -U --map-user=1000 --map-group=1000 {trainer}"
        if max_user_namespaces is not None:  # the trainer may not create user namespaces of its own
            inner = f"echo {max_user_namespaces} > /proc/sys/user/max_user_namespaces && exec {inner}"
        argv = ["unshare", "-U", "-r", "sh", "-c", inner]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"user namespaces unavailable here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_non_root_trainer_gets_every_layer_in_a_user_namespace(tmp_path):
    out = _child_trainer(tmp_path)
    assert out["uid"] == 1000 and "refused" not in out
    assert set(REQUIRED_LAYERS) <= set(out["layers"])
    assert out["stdout"] == ["1000", "/sandbox"] and out["error"] == "FileNotFoundError", out


def test_without_user_namespaces_the_sandbox_refuses_then_runs_weaker_by_opt_in(tmp_path):
    out = _child_trainer(tmp_path, 1)
    assert "['minimal_root', 'netns']" in out["refused"] and "No space left on device" in out["refused"]
    assert "allow_missing_layers" in out["refused"]
    assert "minimal_root" not in out["layers"] and {"landlock_fs", "seccomp", "user"} <= set(out["layers"])
    assert out["stdout"][0] == "1000" and out["error"] == "PermissionError", out  # Landlock still denies the read


def test_a_root_trainer_without_cap_sys_admin_still_gets_every_layer(tmp_path):
    """As in a container: the namespaces come from a user namespace, where a helper also maps ``nobody``."""
    out = _child_trainer(tmp_path, without_sys_admin=True)
    assert out["uid"] == 0 and "refused" not in out, out
    assert set(REQUIRED_LAYERS) <= set(out["layers"])
    assert out["stdout"] == ["65534", "/sandbox"] and out["error"] == "FileNotFoundError", out


def test_the_host_sees_an_unprivileged_confined_process():
    """Read, from the host's /proc, the status of the sandboxed process once its set-up is over (the seccomp
    filter, its last step, is in place), then end it."""
    import signal
    import threading
    import time

    limits = SandboxLimits(**FAST)
    check_layers(limits)  # probe first: the probe is a sandbox process too
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(run_python_sync("import time\ntime.sleep(30)", limits)))
    runner.start()
    status, pid = [], None
    deadline = time.monotonic() + 8
    while "Seccomp:\t2" not in status and runner.is_alive() and time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if (
                    entry.name.isdigit()
                    and b"_bootstrap" in (entry / "cmdline").read_bytes()
                    and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
                ):
                    status, pid = (entry / "status").read_text().splitlines(), int(entry.name)
            except (OSError, ValueError):
                continue
        time.sleep(0.01)  # polls for the condition; the sandboxed program waits for the kill below
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    runner.join()
    result = outcome[0]
    assert result.error_message == "killed by signal SIGKILL", result
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in status}
    assert fields["CapEff"] == ["0000000000000000"] and fields["CapPrm"] == ["0000000000000000"]
    assert fields["NoNewPrivs"] == ["1"] and fields["Seccomp"] == ["2"]
    if os.geteuid() == 0 and "user" in result.layers:
        assert set(fields["Uid"]) == {"65534"} and set(fields["Gid"]) != {"0"}, "the host sees nobody, not root"
