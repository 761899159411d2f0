"""``collective``: a broadcast group between trainer rank 0 and every replica process; each bucket is sent once.

The group lives outside any ``init_process_group`` world (the replicas are not trainer ranks): the driver hosts a
``TCPStore`` on a free port, and each member builds a ``ProcessGroupGloo`` (CPU, ``device="cpu"``, default) or
``ProcessGroupNCCL`` (``device="cuda"``) on a per-group prefix of it. Rank 0 is the trainer; replica ``i`` is
rank ``i + 1``. Per bucket: a length header, the pickled layout (names, dtypes, shapes, offsets), then one flat
byte buffer (``ScratchBuffer``s reused for every bucket of the version: one on the sender, a ring of three on the
receiver, where two buckets may still be loading); a zero header ends the version.

On the replica side the receive loop runs inside the replica's Ray actor (via the actor's ``__ray_call__``, on a
thread, so the engine's event loop keeps serving), and loads each bucket through the actor's own public
``update_weights`` method, so any engine behind the rollout contract works unchanged. That call hands the
bucket over as a ``LocalHandoff`` (the same process: the tensors themselves, no pickling of their bytes).

The group is kept from one version to the next while its members are the same actors and every update
succeeded (building one is a TCP rendezvous of every member); any failure makes the next version build a new one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import itertools
import os
import pickle
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from verl.checkpoint_engine.backend import (
    BucketLog,
    WeightSyncBackend,
    WeightSyncRequest,
    describe_error,
    register_checkpoint_engine,
)
from verl.checkpoint_engine.ray_backend import replica_actor

__all__ = [
    "CollectiveCheckpointEngine",
    "make_broadcast_group",
    "joined_group",
    "broadcast_bucket",
    "receive_bucket",
    "ScratchBuffer",
    "LocalHandoff",
]

_ALIGN = 64  # every tensor starts on a 64-byte boundary of the flat buffer, so dtype views are always legal
_DEVICES = ("cpu", "cuda")


def make_broadcast_group(spec: dict[str, Any], rank: int) -> Any:
    """Join the group described by ``spec`` (host, port, group, world_size, device, timeout_s) as ``rank``."""
    from torch.distributed import PrefixStore, TCPStore

    timeout = datetime.timedelta(seconds=float(spec["timeout_s"]))
    store = PrefixStore(spec["group"], TCPStore(spec["host"], int(spec["port"]), is_master=False, timeout=timeout))
    size = int(spec["world_size"])
    if spec["device"] == "cuda":
        return torch.distributed.ProcessGroupNCCL(store, rank, size)
    group = torch.distributed.ProcessGroupGloo
    try:
        import ray

        options = group._Options()
        options._devices = [group.create_device(hostname=ray.util.get_node_ip_address())]
        options._timeout = timeout
        return group(store, rank, size, options)
    except (AttributeError, TypeError):  # a torch without the options overload: default device
        return group(store, rank, size, timeout)


def joined_group(cache: dict[str, Any], spec: dict[str, Any], rank: int) -> Any:
    """The group named by ``spec`` from ``cache``, joined on first use; older groups in the cache are dropped.

    Why: building a gloo group is a TCP rendezvous of every member (~35 ms on CPU), a fixed cost per version
    that dominates small models. The driver keeps a group's name while its members and every update stay healthy,
    and names a new group after any failure, so a group left mid-stream by an error is never reused.
    """
    group = cache.get(spec["group"])
    if group is None:
        if not spec.get("fresh", True):
            raise RuntimeError(
                f"broadcast group {spec['group']!r} is not live in this process (it restarted since the last "
                "update?); the next update builds a new group"
            )
        cache.clear()  # at most one live group per process and cache: a new name means the old one is done
        group = cache[spec["group"]] = make_broadcast_group(spec, rank)
    return group


def _broadcast(group: Any, tensor: torch.Tensor) -> None:
    options = torch.distributed.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


def _pad(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class ScratchBuffer:
    """One flat byte buffer reused for every bucket of a version.

    Why: a fresh 64 MiB buffer per bucket is fresh memory from the OS, and touching it page by page costs about
    as much as the broadcast itself on CPU. The buffer only grows, to the largest bucket seen.
    """

    def __init__(self, device: str):
        self.device = device
        self.tensor = torch.empty(0, dtype=torch.uint8, device=device)

    def take(self, nbytes: int) -> torch.Tensor:
        """The first ``nbytes`` of the buffer (its previous contents are overwritten by the caller)."""
        if self.tensor.numel() < nbytes:
            self.tensor = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return self.tensor[:nbytes]


def broadcast_bucket(
    group: Any, bucket: list[tuple[str, torch.Tensor]] | None, device: str, scratch: ScratchBuffer | None = None
) -> None:
    """Rank 0: send one bucket (or, with ``None``, the end-of-version marker), packed in ``scratch`` if given."""
    if bucket is None:
        _broadcast(group, torch.zeros(1, dtype=torch.int64, device=device))
        return
    layout, offset = [], 0
    for name, tensor in bucket:
        nbytes = tensor.numel() * tensor.element_size()
        layout.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset, nbytes))
        offset = _pad(offset + nbytes)
    flat = (scratch or ScratchBuffer(device)).take(max(offset, 1))
    for (_, tensor), (_, _, _, start, nbytes) in zip(bucket, layout):
        flat[start : start + nbytes].copy_(tensor.contiguous().reshape(-1).view(torch.uint8))
    meta = torch.frombuffer(bytearray(pickle.dumps((layout, flat.numel()))), dtype=torch.uint8).to(device)
    _broadcast(group, torch.tensor([meta.numel()], dtype=torch.int64, device=device))
    _broadcast(group, meta)
    _broadcast(group, flat)


def receive_bucket(
    group: Any, device: str, scratch: ScratchBuffer | None = None
) -> list[tuple[str, torch.Tensor]] | None:
    """Ranks > 0: receive one bucket as CPU tensors, or None at the end of the version.

    The tensors are views of one flat buffer (``scratch`` if given: they are valid until the next call with it).
    """
    header = torch.zeros(1, dtype=torch.int64, device=device)
    _broadcast(group, header)
    length = int(header.item())
    if length == 0:
        return None
    meta = torch.empty(length, dtype=torch.uint8, device=device)
    _broadcast(group, meta)
    layout, total = pickle.loads(meta.cpu().numpy().tobytes())
    flat = (scratch or ScratchBuffer(device)).take(total)
    _broadcast(group, flat)
    flat = flat.cpu()
    return [
        (name, flat[start : start + nbytes].view(getattr(torch, dtype)).reshape(shape))
        for name, dtype, shape, start, nbytes in layout
    ]


def _receive_loop(handle: Any, groups: dict[str, Any], spec: dict[str, Any], rank: int, version: int) -> dict[str, Any]:
    """Receive every bucket of one version and load each through the replica actor's own ``update_weights``."""
    group = joined_group(groups, spec, rank)
    log, error = BucketLog(), None
    pending: deque[Any] = deque()
    timeout_s = float(spec["timeout_s"])

    def settle_oldest() -> None:
        nonlocal error
        ref = pending.popleft()
        try:  # waited for even after an error: the load reads a scratch buffer the next bucket will overwrite
            checksum = str(ref.future().result(timeout=timeout_s)["checksum"])
        except Exception as exc:  # noqa: BLE001 - keep receiving so the trainer's broadcasts complete
            error = error or describe_error(exc)
        else:
            log.checksums.append(checksum)

    # A load reads its bucket in place, so a scratch buffer is busy until that load settled: with at most
    # _MAX_PENDING_LOADS loads outstanding, one more buffer is always free for the next receive.
    scratches = [ScratchBuffer(spec["device"]) for _ in range(_MAX_PENDING_LOADS + 1)]
    for index in itertools.count():
        bucket = receive_bucket(group, spec["device"], scratches[index % len(scratches)])
        if bucket is None:
            break
        if error is not None:
            continue
        while len(pending) >= _MAX_PENDING_LOADS:
            settle_oldest()
        pending.append(handle.update_weights.remote(LocalHandoff(bucket), version))
    while pending:
        settle_oldest()
    return {"error": error} if error is not None else {"version": version, "checksum": log.checksum}


class LocalHandoff:
    """A bucket passed to a Ray call on an actor in this same process, without copying its tensors.

    Why: the receive loop loads each bucket through its own actor's ``update_weights`` (a Ray call, so the
    engine's event loop runs it). Pickled as tensors, a bucket would be copied into the object store and back
    (40-120 ms per 64 MiB on CPU); this pickles as a key into a process-local table, and the call receives the
    very same list. Unpickling anywhere but the process that made it is an error.
    """

    _table: dict[str, list[tuple[str, torch.Tensor]]] = {}
    _lock = threading.Lock()

    def __init__(self, named_tensors: list[tuple[str, torch.Tensor]]):
        self.key = uuid.uuid4().hex
        with self._lock:
            self._table[self.key] = list(named_tensors)

    def __reduce__(self) -> tuple:
        # The entry leaves the table when the call unpickles it (this wrapper is gone by then); a call that never
        # runs can only be one whose actor, and so this process and table, is gone.
        return _take_local_handoff, (self.key, os.getpid())


def _take_local_handoff(key: str, pid: int) -> list[tuple[str, torch.Tensor]]:
    if pid != os.getpid():
        raise RuntimeError(f"a LocalHandoff made by process {pid} was unpickled in process {os.getpid()}")
    with LocalHandoff._lock:
        bucket = LocalHandoff._table.pop(key, None)
    if bucket is None:
        raise RuntimeError(f"LocalHandoff {key} was already taken or released")
    return bucket


_MAX_PENDING_LOADS = 2
_JOBS_ATTR = "_verl_checkpoint_engine_jobs"
_GROUPS_ATTR = "_verl_checkpoint_engine_groups"
_SENDER_GROUPS: dict[str, Any] = {}  # trainer rank 0's side of the live group


def _start_receiver(actor_self: Any, spec: dict[str, Any], rank: int, version: int, job: str) -> bool:
    """Runs inside the replica actor (``__ray_call__``): start the receive loop on a thread and return at once.

    A blocking ``__ray_call__`` would hold the actor's task dispatch, so the loads (tasks on the same actor)
    could never run; the thread keeps the actor free, and the driver polls ``_poll_receiver`` for the outcome.
    """
    import ray

    handle = ray.get_runtime_context().current_actor
    future: concurrent.futures.Future = concurrent.futures.Future()
    groups = actor_self.__dict__.setdefault(_GROUPS_ATTR, {})

    def run() -> None:
        try:
            future.set_result(_receive_loop(handle, groups, spec, rank, version))
        except BaseException as exc:  # noqa: BLE001 - reported to the driver by _poll_receiver
            groups.pop(spec["group"], None)
            future.set_result({"error": describe_error(exc)})

    jobs = actor_self.__dict__.setdefault(_JOBS_ATTR, {})
    jobs[job] = future
    threading.Thread(target=run, name=f"verl-ckpt-recv-{job[:8]}", daemon=True).start()
    return True


def _poll_receiver(actor_self: Any, job: str) -> dict[str, Any] | None:
    """The receive loop's report once it finished (and forget the job), else None."""
    jobs = actor_self.__dict__.get(_JOBS_ATTR, {})
    future = jobs.get(job)
    if future is None:
        return {"error": f"no receive job {job!r} on this replica"}
    if not future.done():
        return None
    del jobs[job]
    return future.result()


@register_checkpoint_engine("collective")
class CollectiveCheckpointEngine(WeightSyncBackend):
    """Broadcast transfer; options: ``device`` ("cpu" -> gloo, default; "cuda" -> nccl)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        device = self.options.setdefault("device", "cpu")
        if device not in _DEVICES:
            raise ValueError(f"checkpoint engine 'collective': device must be one of {_DEVICES}, got {device!r}")
        self._store = None
        self._group: tuple[tuple[str, ...], str] | None = None  # (members, name) of the group kept across versions

    def _group_name(self, actors: dict[str, Any]) -> tuple[str, bool]:
        """The live group's name while its members are the same actors, else a new one; and whether it is new."""
        members = tuple(f"{name}={actor._actor_id.hex()}" for name, actor in actors.items())
        if self._group is None or self._group[0] != members:
            self._group = (members, f"verl_ckpt/{uuid.uuid4().hex}")
            return self._group[1], True
        return self._group[1], False

    def _rendezvous(self) -> tuple[str, int]:
        """The driver hosts the store (port 0: the OS picks a free one), so no port can be raced for."""
        import ray
        from torch.distributed import TCPStore

        if self._store is None:
            host = ray.util.get_node_ip_address()
            self._store = TCPStore(
                host, 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=self.timeout_s)
            )
            self._host = host
        return self._host, int(self._store.port)

    def sync(
        self, call_trainer: Callable[[WeightSyncRequest], list[Any]], replicas: dict[str, Any], version: int
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        if not replicas:
            raise ValueError("checkpoint engine 'collective': no replicas to update")
        actors = {name: replica_actor(name, replica) for name, replica in replicas.items()}
        host, port = self._rendezvous()
        name, fresh = self._group_name(actors)
        spec = {
            "host": host,
            "port": port,
            "group": name,
            "fresh": fresh,
            "world_size": 1 + len(actors),
            "device": self.options["device"],
            "timeout_s": self.timeout_s,
        }
        job = f"{spec['group']}/{version}"
        healthy = False
        try:
            trainer, found = self._sync_in_group(call_trainer, actors, spec, job, version)
            healthy = all("error" not in report for report in found.values())
            return trainer, found
        finally:
            if not healthy:  # whatever went wrong, the next version builds a fresh group
                self._group = None

    def _sync_in_group(
        self,
        call_trainer: Callable[[WeightSyncRequest], list[Any]],
        actors: dict[str, Any],
        spec: dict[str, Any],
        job: str,
        version: int,
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        import ray

        started = {
            name: actor.__ray_call__.remote(_start_receiver, spec, i + 1, int(version), job)
            for i, (name, actor) in enumerate(actors.items())
        }
        found: dict[str, dict[str, Any]] = {}
        for name, ref in started.items():
            try:
                ray.get(ref, timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - the replica cannot join: no trainer call can succeed
                found[name] = {"error": describe_error(exc)}
        if found:
            detail = "; ".join(f"replica {name!r}: {r['error']}" for name, r in found.items())
            raise RuntimeError(f"checkpoint engine 'collective', version {version}: cannot start receiving on {detail}")
        reports = call_trainer(self.make_request(version, spec))
        trainer = next((r for r in reports if r is not None), None)
        if trainer is None:
            raise RuntimeError("checkpoint engine 'collective': trainer rank 0 returned no report")
        return trainer, self._collect(actors, job)

    def _collect(self, actors: dict[str, Any], job: str) -> dict[str, dict[str, Any]]:
        """Poll every replica until its receive loop reported (loads may still be finishing after the broadcast)."""
        import ray

        found: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + self.timeout_s
        delay = 0.002
        while len(found) < len(actors):
            waiting = [name for name in actors if name not in found]
            polls = {name: actors[name].__ray_call__.remote(_poll_receiver, job) for name in waiting}
            for name, ref in polls.items():
                try:
                    report = ray.get(ref, timeout=self.timeout_s)
                except Exception as exc:  # noqa: BLE001 - reported per replica by the manager
                    report = {"error": describe_error(exc)}
                if report is not None:
                    found[name] = report
            if len(found) < len(actors):
                if time.monotonic() > deadline:
                    for name in actors:
                        found.setdefault(name, {"error": f"no report within {self.timeout_s}s"})
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        return found

    @classmethod
    def send(
        cls,
        module: nn.Module,
        request: WeightSyncRequest,
        rank: int,
        local_replicas: list[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> dict[str, Any] | None:
        if rank != 0:
            for _ in request.buckets(module):  # take part in the gathers; rank 0 broadcasts
                pass
            return None
        spec = request.targets
        device = spec["device"]
        group = joined_group(_SENDER_GROUPS, spec, 0)
        sent = BucketLog()
        scratch = ScratchBuffer(device)
        try:
            for bucket in request.buckets(module):
                sent.add(bucket)
                broadcast_bucket(group, bucket, device, scratch)
            broadcast_bucket(group, None, device)
        except BaseException:
            _SENDER_GROUPS.pop(spec["group"], None)
            raise
        return {"rank": rank, "checksum": sent.checksum, "num_buckets": len(sent.checksums), "bytes": sent.nbytes}
