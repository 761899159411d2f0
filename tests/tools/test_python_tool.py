import asyncio

import pytest

from verl.tools.python_tool import PythonTool
from verl.tools.sandbox import SandboxUnavailableError


def test_python_tool_runs_code_in_the_sandbox():
    tool = PythonTool({"wall_timeout_s": 5, "cpu_time_s": 2, "memory_mb": 256})
    assert tool.name == "code_interpreter" and tool.timeout_s == 10.0

    async def go():
        instance, _ = await tool.create()
        ok, _, metrics = await tool.execute(instance, {"code": "print(6 * 7)"})
        assert ok.text == "42" and metrics["sandbox_status"] == "ok"
        bad, _, metrics = await tool.execute(instance, {"code": "import socket; socket.socket()"})
        assert metrics["sandbox_status"] == "error" and metrics["sandbox_error_type"] == "PermissionError"
        assert "network access is disabled" in bad.text
        empty, _, _ = await tool.execute(instance, {"code": "  "})
        assert empty.text == "Error: 'code' must be a non-empty string"
        await tool.release(instance)

    asyncio.run(go())


def test_python_tool_limits_concurrency():
    tool = PythonTool({"max_concurrency": 1, "wall_timeout_s": 5})

    async def go():
        instance, _ = await tool.create()
        code = "import time; t = time.time(); time.sleep(0.3); print(t, time.time())"
        results = await asyncio.gather(*(tool.execute(instance, {"code": code}) for _ in range(2)))
        spans = sorted(tuple(map(float, r[0].text.split())) for r in results)
        assert spans[1][0] >= spans[0][1], "with max_concurrency=1 the second run starts after the first ended"

    asyncio.run(go())


def _machine_without(monkeypatch, layer: str, reason: str) -> None:
    """Pretend the probe found ``layer`` missing (and, for a root trainer, the user switch that needs it)."""
    import os

    from verl.tools.sandbox import layers

    missing = {layer, "user"} if os.geteuid() == 0 and layer == "minimal_root" else {layer}

    def probe(limits):
        return tuple((name, reason if name in missing else "ok") for name in layers.wanted_layers(limits))

    monkeypatch.setattr(layers, "_probe", probe)


def test_python_tool_refuses_at_start_up_when_a_sandbox_layer_is_missing(monkeypatch):
    _machine_without(monkeypatch, "minimal_root", "unshare(CLONE_NEWUSER) failed: Operation not permitted")
    with pytest.raises(SandboxUnavailableError) as info:
        PythonTool({"wall_timeout_s": 5})
    message = str(info.value)
    assert "tool 'code_interpreter'" in message and "minimal_root" in message
    assert "Operation not permitted" in message and "allow_missing_layers" in message


def test_python_tool_runs_the_weaker_sandbox_when_the_config_opts_in(monkeypatch):
    _machine_without(monkeypatch, "minimal_root", "unshare(CLONE_NEWUSER) failed: Operation not permitted")
    tool = PythonTool({"wall_timeout_s": 5, "allow_missing_layers": ["minimal_root", "user"]})
    assert "minimal_root" not in tool.layers and "landlock_fs" in tool.layers

    async def go():
        instance, _ = await tool.create()
        ok, _, metrics = await tool.execute(instance, {"code": "print(open('/etc/passwd').read())"})
        assert metrics["sandbox_status"] == "error" and metrics["sandbox_error_type"] == "PermissionError", ok.text

    asyncio.run(go())


def test_python_tool_config_allows_packages_by_name():
    tool = PythonTool({"wall_timeout_s": 20, "cpu_time_s": 10, "allowed_packages": ["numpy"]})

    async def go():
        instance, _ = await tool.create()
        ok, _, _ = await tool.execute(instance, {"code": "import numpy\nprint(numpy.ones(3).sum())"})
        assert ok.text == "3.0"

    asyncio.run(go())
    with pytest.raises(ValueError, match="allowed_packages: no installed package 'not_a_real_pkg'"):
        PythonTool({"allowed_packages": ["not_a_real_pkg"]})
