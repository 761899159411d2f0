import asyncio

from verl.tools.python_tool import PythonTool


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
