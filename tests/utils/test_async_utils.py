"""Async helpers: logged background tasks that mark their owner failed, named timeouts, the blocking runner."""

from __future__ import annotations

import asyncio
import logging

import pytest

from verl.utils.async_utils import FAILURE_ATTR, run_blocking, spawn_logged, wait_named


class Owner:
    background_error = None


def test_spawn_logged_logs_and_marks_the_owner_on_failure(caplog):
    owner = Owner()

    async def boom():
        raise ValueError("engine exploded")

    async def run():
        task = spawn_logged(boom(), owner=owner, name="engine loop")
        await asyncio.sleep(0.01)
        return task

    with caplog.at_level(logging.ERROR, logger="verl.utils.async_utils"):
        task = asyncio.run(run())
    assert task.done() and isinstance(getattr(owner, FAILURE_ATTR), ValueError)
    assert "engine loop (Owner) failed" in caplog.text and "engine exploded" in caplog.text


def test_spawn_logged_keeps_the_first_failure_and_ignores_cancellation():
    owner = Owner()

    async def fail(msg):
        raise RuntimeError(msg)

    async def run():
        spawn_logged(fail("first"), owner=owner, name="a")
        await asyncio.sleep(0.01)
        spawn_logged(fail("second"), owner=owner, name="b")
        sleeper = spawn_logged(asyncio.sleep(10), owner=Owner(), name="c")
        await asyncio.sleep(0.01)
        sleeper.cancel()
        await asyncio.sleep(0.01)
        return sleeper

    sleeper = asyncio.run(run())
    assert str(owner.background_error) == "first"
    assert sleeper.cancelled()


def test_spawn_logged_returns_the_result():
    async def run():
        return await spawn_logged(asyncio.sleep(0, result=7), name="ok")

    assert asyncio.run(run()) == 7


def test_wait_named_names_what_timed_out():
    with pytest.raises(TimeoutError, match="replica 3 generate did not finish within 0.01s"):
        asyncio.run(wait_named(asyncio.sleep(5), 0.01, "replica 3 generate"))
    assert asyncio.run(wait_named(asyncio.sleep(0, result="x"), None, "no limit")) == "x"


def test_run_blocking_runs_and_refuses_nesting():
    async def value():
        return 3

    assert run_blocking(value(), "f") == 3

    async def nested():
        return run_blocking(value(), "Manager.generate_sequences")

    with pytest.raises(RuntimeError, match="Manager.generate_sequences is blocking and was called from a running"):
        asyncio.run(nested())
