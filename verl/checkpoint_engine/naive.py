"""``naive``: the rollout engine lives in the trainer's own process (hybrid engine); buckets are loaded in place.

No serialisation and no copy beyond gathering each full tensor: every trainer rank walks the buckets and loads
them into the engine(s) it hosts. This is the colocated default.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from torch import nn

from verl.checkpoint_engine.backend import (
    BucketLog,
    WeightSyncBackend,
    WeightSyncRequest,
    describe_error,
    register_checkpoint_engine,
)

__all__ = ["NaiveCheckpointEngine", "LoopRunner"]


class LoopRunner:
    """Run coroutines from synchronous worker code: on ``loop`` (owned by another thread) or on a private loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, timeout_s: float) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            # Blocking is fine while another thread's loop does the work; waiting on our own loop would deadlock.
            if loop is None or loop is running:
                raise RuntimeError(
                    "checkpoint engine: send_weights blocks and was called from inside a running event loop; "
                    "call it from a worker thread (asyncio.to_thread) and pass loop= the loop owning the engine"
                )
        self.loop = loop
        self.timeout_s = timeout_s
        self._runner = asyncio.Runner() if loop is None else None

    def run(self, coro: Coroutine, what: str) -> Any:
        if self._runner is not None:
            return self._runner.run(asyncio.wait_for(coro, self.timeout_s))
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"checkpoint engine: {what} did not finish within {self.timeout_s}s") from None

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


@register_checkpoint_engine("naive")
class NaiveCheckpointEngine(WeightSyncBackend):
    """Same-process transfer: the trainer worker loads its buckets straight into its local rollout engine."""

    def sync(
        self, call_trainer: Callable[[WeightSyncRequest], list[Any]], replicas: dict[str, Any], version: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        if replicas:
            raise ValueError(
                f"checkpoint engine 'naive' loads the engines inside the trainer workers; it cannot reach the separate "
                f"replicas {sorted(replicas)}: use backend 'ray' or 'collective' for standalone rollout"
            )
        reports = [r for r in call_trainer(self.make_request(version)) if r is not None]
        if not reports:
            raise RuntimeError("checkpoint engine 'naive': no trainer rank reported (none hosts a rollout engine)")
        trainer = next((r for r in reports if r.get("rank") == 0), reports[0])
        found: dict[str, dict[str, Any]] = {}
        for report in reports:
            found.update(report.get("replicas", {}))
        return trainer, found

    @classmethod
    def send(
        cls,
        module: nn.Module,
        request: WeightSyncRequest,
        rank: int,
        local_replicas: list[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any] | None:
        if not local_replicas:
            raise ValueError(
                f"checkpoint engine 'naive': trainer rank {rank} hosts no rollout engine (local_replicas is empty); "
                "naive needs the hybrid (colocated) layout, use backend 'ray' or 'collective' otherwise"
            )
        names = [f"rank{rank}/local{i}" for i in range(len(local_replicas))]
        logs = {name: BucketLog() for name in names}
        errors: dict[str, str] = {}
        sent = BucketLog()
        runner = LoopRunner(loop, request.timeout_s)
        try:
            for bucket in request.buckets(module, device=None):  # same process: no trip through host memory
                sent.add(bucket)
                for name, replica in zip(names, local_replicas):
                    if name in errors:
                        continue
                    try:
                        result = runner.run(replica.update_weights(bucket, request.version), f"{name} update_weights")
                        logs[name].checksums.append(str(result["checksum"]))
                    except Exception as exc:  # noqa: BLE001 - keep walking: the other ranks gather with us
                        errors[name] = describe_error(exc)
        finally:
            runner.close()
        replicas = {
            name: {"error": errors[name]} if name in errors else {"version": request.version, "checksum": log.checksum}
            for name, log in logs.items()
        }
        return {
            "rank": rank,
            "checksum": sent.checksum,
            "num_buckets": len(sent.checksums),
            "bytes": sent.nbytes,
            "replicas": replicas,
        }
