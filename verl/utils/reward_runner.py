"""RewardRunner: run a scoring function over many samples in a small pool of processes.

Why processes: user reward functions are arbitrary Python (regexes, math verifiers, sandboxes) that can be slow, hang
or crash; in a process each one gets a wall-clock timeout and a hung or dead one can be killed without stopping the
run. Samples travel to a worker in chunks and their results come back together, one pipe round trip per chunk (a
message per sample cost more than scoring a short answer). Before each call the worker writes the sample's index and
start time into a small shared array, so the timeout, the failure count and the log line still name exactly one
sample; the rest of a chunk whose worker hangs or dies goes to another worker and is scored there (functions are
assumed to be pure, so a sample scored twice gives the same result).

A sample whose function raises, times out or kills its worker scores ``0.0``; the outcome says which happened so the
caller can count ``reward/num_failed`` and ``reward/num_timeout``, and each failing sample is logged once with its index
and error. A killed worker is replaced and the remaining samples go on.

Workers are forked from a forkserver that has imported this module and the built-in scoring functions once; neither
imports torch (seconds per process), which is why this module lives outside the reward-manager package (whose classes
handle DataProto). The function travels to them by pickle, so a function loaded from a user file pickles as its path
and name (:class:`CustomRewardFn`). ``num_workers=0`` scores in the calling process: no timeout is enforced there, but
exceptions still score 0.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import sys
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from verl.utils.import_utils import load_extern_object

__all__ = ["CustomRewardFn", "RewardRunner", "ScoreOutcome"]

logger = logging.getLogger(__name__)

_PRELOAD = ["verl.utils.reward_runner", "verl.utils.reward_score"]
_READY = "ready"
# A worker that has not reported ready by then is broken (e.g. its interpreter cannot import verl).
STARTUP_TIMEOUT_S = 300.0
# Most samples sent to a worker in one message.
_MAX_CHUNK = 64
_CONTEXT: Any = None


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _CONTEXT = multiprocessing.get_context(method)
        if method == "forkserver":
            _CONTEXT.set_forkserver_preload(_PRELOAD)
    return _CONTEXT


class CustomRewardFn:
    """A scoring function defined in a user file, callable like the function itself.

    It pickles as ``(path, name, kwargs)`` and re-imports the file on first use, so it can be sent to the scoring
    processes (a function object from a file loaded by path would not unpickle there). ``kwargs`` are bound like
    ``functools.partial``: ``reward.custom_reward_function.reward_kwargs``.
    """

    def __init__(self, path: str, name: str, kwargs: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.name = name
        self.kwargs = dict(kwargs or {})
        self._fn: Any = None

    @property
    def fn(self) -> Any:
        if self._fn is None:
            fn = load_extern_object(
                self.path, self.name, config_key="reward.custom_reward_function.path", what="reward function"
            )
            if not callable(fn):
                raise TypeError(
                    f"reward function {self.name!r} in {self.path!r} (reward.custom_reward_function.name) is not "
                    f"callable: {fn!r}"
                )
            self._fn = fn
        return self._fn

    def warm_up(self) -> None:
        """Import the file now (scoring processes call this before taking work)."""
        self.fn  # noqa: B018

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **{**self.kwargs, **kwargs})

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "kwargs": self.kwargs, "_fn": None}

    def __repr__(self) -> str:
        return f"CustomRewardFn(path={self.path!r}, name={self.name!r})"


@dataclass
class ScoreOutcome:
    """The result for one sample: ``value`` is what the function returned (0.0 when it did not return)."""

    value: Any = 0.0
    error: str | None = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    try:
        return True, fn(**kwargs)
    except Exception as err:  # a scoring bug must cost one sample, not the run
        logger.debug("reward function raised:\n%s", traceback.format_exc())
        return False, _describe(err)


def _sendable(result: tuple[int, bool, Any]) -> tuple[int, bool, Any]:
    """``result`` if it pickles, else the same sample as a failure saying why."""
    try:
        pickle.dumps(result)
        return result
    except Exception as err:  # e.g. an unpicklable return value
        return result[0], False, f"the reward function's result could not be sent back: {_describe(err)}"


def _worker_main(conn: Connection, fn: Callable[..., Any], progress: Any) -> None:
    """Worker loop: receive a chunk ``[(index, kwargs), ...]``, send the list of ``(index, ok, value_or_error)`` once
    the chunk is scored; ``None`` stops it. ``progress`` holds ``[index, start]`` of the sample being scored now.

    Before the loop the worker imports what the function needs (``fn.warm_up()`` when it has one) and reports ready,
    so start-up time never counts against the first sample's timeout.
    """
    warm_up = getattr(fn, "warm_up", None)
    if callable(warm_up):
        try:
            warm_up()
        except Exception:  # the same error comes back, per sample, from the calls
            pass
    conn.send(_READY)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        results = []
        for index, kwargs in message:
            progress[0], progress[1] = index, time.monotonic()
            ok, value = _call(fn, kwargs)
            results.append((index, ok, value))
        try:
            conn.send(results)
        except Exception:  # some result does not pickle: send the others, that one as a failure
            conn.send([_sendable(result) for result in results])


@contextlib.contextmanager
def _main_hidden(hide: bool) -> Iterator[None]:
    """Start children without re-running the driver's ``__main__`` script in them.

    spawn/forkserver children re-import the parent's main script so that objects defined there unpickle; for a
    trainer that is costly (its imports) and can have side effects (an unguarded script, Ray's worker entry point).
    The scoring function pickles by module name, so main is only needed when the function lives in it.
    """
    main = sys.modules.get("__main__")
    if not hide or main is None:
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[..., Any], needs_main: bool) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.progress = ctx.Array("d", [-1.0, 0.0], lock=False)  # [index being scored, its start (monotonic)]
        self.process = ctx.Process(
            target=_worker_main, args=(child, fn, self.progress), daemon=True, name="verl-reward-worker"
        )
        with _main_hidden(not needs_main):
            self.process.start()
        child.close()
        self.conn: Connection = parent
        self.jobs: deque[int] = deque()  # the chunk submitted and not answered yet
        self.submitted = 0.0  # when the chunk was sent

    def wait_ready(self) -> None:
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self.kill()
            raise TimeoutError(f"reward worker process did not report ready within {STARTUP_TIMEOUT_S:g} s")
        try:
            message = self.conn.recv()
        except EOFError:
            self.process.join(timeout=1)
            raise RuntimeError(
                f"reward worker process exited while starting (exit code {self.process.exitcode})"
            ) from None
        if message != _READY:
            raise RuntimeError(f"reward worker process sent {message!r} instead of {_READY!r}")

    def submit(self, indices: list[int], jobs: list[dict[str, Any]]) -> None:
        self.submitted = time.monotonic()  # before the send: the worker may start the chunk at once
        self.conn.send([(index, jobs[index]) for index in indices])
        self.jobs.extend(indices)

    def current(self) -> tuple[int, float]:
        """The job being scored now and when it started; the chunk's first job until the worker reports one."""
        index, start = int(self.progress[0]), float(self.progress[1])
        if index in self.jobs and start >= self.submitted:
            return index, start
        return self.jobs[0], self.submitted

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(timeout=1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


class RewardRunner:
    """Score samples with ``fn(**kwargs)``; ``num_workers`` processes (0: in-process), ``timeout_s`` per sample.

    The pool starts on first use and is reused by later calls; call :meth:`close` (or use ``with``) to stop it.
    """

    def __init__(self, fn: Callable[..., Any], num_workers: int = 2, timeout_s: float | None = 300.0) -> None:
        if num_workers < 0:
            raise ValueError(f"reward.num_workers must be >= 0, got {num_workers}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"reward.timeout_s must be > 0, got {timeout_s}")
        self._needs_main = False
        if num_workers > 0:
            try:
                self._needs_main = b"__main__" in pickle.dumps(fn)
            except Exception as err:
                logger.warning(
                    "reward function %r cannot be sent to worker processes (%s); scoring in-process without a "
                    "timeout. Load it from a file with reward.custom_reward_function.path to use the pool.",
                    fn,
                    _describe(err),
                )
                num_workers = 0
        self.fn = fn
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()  # one batch at a time: workers hold one job each

    def __enter__(self) -> RewardRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------------------------------------ scoring

    def run(self, jobs: list[dict[str, Any]], describe: Callable[[int], str] | None = None) -> list[ScoreOutcome]:
        """One outcome per job, in order. Each failing job is logged once, named by ``describe(index)``
        (default ``"sample <index>"``)."""
        with self._lock:
            if self.num_workers == 0 or not jobs:
                outcomes = [self._run_inline(kwargs) for kwargs in jobs]
            else:
                outcomes = self._run_pool(jobs)
        for index, outcome in enumerate(outcomes):
            if not outcome.ok:
                name = describe(index) if describe is not None else f"sample {index}"
                logger.warning("reward function failed on %s (scored 0.0): %s", name, outcome.error)
        return outcomes

    def _run_inline(self, kwargs: dict[str, Any]) -> ScoreOutcome:
        ok, value = _call(self.fn, kwargs)
        return ScoreOutcome(value=value) if ok else ScoreOutcome(error=value)

    def _start_workers(self, count: int) -> None:
        ctx = _context()
        fresh = [_Worker(ctx, self.fn, self._needs_main) for _ in range(count - len(self._workers))]
        for worker in fresh:
            worker.wait_ready()
        self._workers.extend(fresh)

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(_context(), self.fn, self._needs_main)
        fresh.wait_ready()
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def _chunk_size(self, count: int) -> int:
        """Samples per message: about four chunks per worker, so a slow chunk does not leave the others idle."""
        return max(1, min(_MAX_CHUNK, -(-count // (4 * max(1, len(self._workers))))))

    def _run_pool(self, jobs: list[dict[str, Any]]) -> list[ScoreOutcome]:
        self._start_workers(min(self.num_workers, max(len(jobs), len(self._workers))))
        outcomes: list[ScoreOutcome | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        chunk = self._chunk_size(len(jobs))
        busy: dict[Connection, _Worker] = {}

        def fill() -> None:
            for worker in list(self._workers):
                if not pending:
                    return
                if worker.jobs:
                    continue
                indices = [pending.popleft() for _ in range(min(chunk, len(pending)))]
                try:
                    worker.submit(indices, jobs)
                except (BrokenPipeError, OSError):  # the worker died while idle: replace it and retry once
                    worker.jobs.clear()
                    worker = self._replace(worker)
                    worker.submit(indices, jobs)
                busy[worker.conn] = worker

        def lose(worker: _Worker, outcome: ScoreOutcome) -> None:
            """The job being scored gets ``outcome``; the rest of the chunk goes back to the front of the queue, in
            order; the worker is replaced."""
            del busy[worker.conn]
            index, _ = worker.current()
            outcomes[index] = outcome
            pending.extendleft(reversed([job for job in worker.jobs if job != index]))
            worker.jobs.clear()
            self._replace(worker)

        fill()
        while busy:
            timeout = None
            if self.timeout_s is not None:
                deadline = min(w.current()[1] for w in busy.values()) + self.timeout_s
                timeout = max(0.0, deadline - time.monotonic())
            for conn in wait(list(busy), timeout=timeout):
                worker = busy[conn]
                try:
                    results = conn.recv()
                except (EOFError, OSError):
                    worker.process.join(timeout=1)
                    code = worker.process.exitcode
                    lose(worker, ScoreOutcome(error=f"reward worker process died (exit code {code})"))
                    continue
                for index, ok, value in results:
                    outcomes[index] = ScoreOutcome(value=value) if ok else ScoreOutcome(error=value)
                worker.jobs.clear()
                del busy[conn]
            if self.timeout_s is not None:
                now = time.monotonic()
                for worker in list(busy.values()):
                    if now - worker.current()[1] >= self.timeout_s:
                        lose(
                            worker,
                            ScoreOutcome(
                                error=f"timed out after {self.timeout_s:g} s (reward.timeout_s); worker killed",
                                timed_out=True,
                            ),
                        )
            fill()
        return [outcome if outcome is not None else ScoreOutcome(error="not scored") for outcome in outcomes]
