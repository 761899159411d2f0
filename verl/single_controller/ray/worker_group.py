"""RayWorkerGroup: one Ray actor per rank, driven as one object."""

from __future__ import annotations

import functools
import time
import uuid
from typing import TYPE_CHECKING, Any

import ray

from verl.single_controller.base.decorator import get_register_attrs
from verl.single_controller.base.future_args import lift_future_args
from verl.single_controller.base.worker import BACKEND_ENV
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.class_with_init_args import RayClassWithInitArgs
from verl.single_controller.ray.errors import (
    DEFAULT_STARTUP_TIMEOUT_S,
    STARTUP_TIMEOUT_KEY,
    WorkerDiedError,
    WorkerError,
    default_call_timeout_s,
    startup_timeout_error,
    translate_ray_error,
    wait_for_startup,
    wait_for_workers,
)
from verl.single_controller.ray.resource_pool import RayResourcePool
from verl.single_controller.ray.worker_env import check_port_range, check_worker_env, local_layout
from verl.single_controller.ray.worker_process import (
    PORT_RANGE_ENV,
    RENDEZVOUS_ENV,
    clear_first_error,
    clear_rendezvous,
    read_rendezvous,
)
from verl.utils.ray_utils import parallel_put

# Attribute create_colocated_worker_cls puts on its class: {role: {method name on the role: name on the class}}.
ROLE_METHODS_ATTR = "_verl_role_methods"


def _is_batch(value: Any) -> bool:
    from tensordict import TensorDict

    from verl.protocol import DataProto

    return isinstance(value, DataProto | TensorDict)


class RayWorkerGroup(WorkerGroup):
    """Spawn ``ray_cls_with_init`` once per slot of ``resource_pool`` and expose its ``@register`` methods.

    Each actor gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (also as RAY_LOCAL_WORLD_SIZE), MASTER_ADDR and
    MASTER_PORT (rank 0 picks a free port on its node, within ``master_port_range`` when given, so every group has
    its own; or pass both ``master_addr`` and ``master_port``), plus ``worker_env``, which may not override any of
    those. The group is returned once every constructor has returned; that start-up is bounded by
    ``startup_timeout_s`` (verl's ``ray_wait_register_center_timeout``, the trainer's
    ``trainer.ray_wait_register_center_timeout``, default 300 s), so a worker that cannot start fails the run at once
    instead of at its first call. Every later wait is bounded by ``call_timeout_s`` (default
    $VERL_WORKER_CALL_TIMEOUT_S or 1800 s). Alternatively attach to running actors with ``worker_names`` or
    ``worker_handles``.
    """

    if TYPE_CHECKING:
        # The worker class's @register methods are bound onto the group at run time (init_model, generate_sequences...).
        def __getattr__(self, name: str) -> Any: ...

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_wait_register_center_timeout: float | None = None,
        call_timeout_s: float | None = None,
        role: str | None = None,
        startup_timeout_s: float | None = None,
        worker_env: dict[str, Any] | None = None,
        master_addr: str | None = None,
        master_port: str | int | None = None,
        master_port_range: list[int] | None = None,
        use_gpu: bool | None = None,
        device_name: str | None = None,
        profile_steps: list[int] | None = None,
        worker_nsight_options: dict[str, Any] | None = None,
        **kwargs,
    ) -> None:
        if ray_cls_with_init is not None and not isinstance(ray_cls_with_init, RayClassWithInitArgs):
            raise TypeError(f"ray_cls_with_init must be a RayClassWithInitArgs, got {type(ray_cls_with_init).__name__}")
        role = role or (ray_cls_with_init.user_cls.__name__ if ray_cls_with_init is not None else "worker")
        super().__init__(resource_pool, role=role)
        if call_timeout_s is not None and call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s!r}")
        self.call_timeout_s = float(call_timeout_s) if call_timeout_s is not None else default_call_timeout_s()
        if startup_timeout_s is None:
            startup_timeout_s = ray_wait_register_center_timeout
        if startup_timeout_s is not None and not startup_timeout_s > 0:
            raise ValueError(
                f"startup_timeout_s ({STARTUP_TIMEOUT_KEY}) must be > 0 seconds, got {startup_timeout_s!r}"
            )
        self.startup_timeout_s = float(startup_timeout_s or DEFAULT_STARTUP_TIMEOUT_S)
        self.customized_worker_env = check_worker_env(worker_env)
        if (master_addr is None) != (master_port is None):
            raise ValueError("RayWorkerGroup: give both master_addr and master_port, or neither (rank 0 picks them)")
        self._explicit_master = None if master_addr is None else (str(master_addr), str(master_port))
        self._master_port_range = check_port_range(master_port_range)
        # None: as the pool says (a GPU share on a GPU pool); False: no GPU share even there
        pool_gpu = getattr(resource_pool, "use_gpu", True)
        self.use_gpu = bool(pool_gpu) if use_gpu is None else bool(use_gpu)
        self.device_name = device_name or "cuda"
        self.profile_steps = profile_steps
        self.worker_nsight_options = dict(worker_nsight_options) if worker_nsight_options else None
        self.ray_cls_with_init = ray_cls_with_init
        self.fused_worker_used = bool(getattr(ray_cls_with_init, "fused_worker_used", False))
        self.sub_cls_name = ""
        self.wg_dict: dict[str, RayWorkerGroup] | None = None
        self.resource_pool = resource_pool
        self.detached = detached
        # A random suffix keeps actor names unique when a run is retried in the same cluster.
        self.name_prefix = f"{name_prefix or role}_{uuid.uuid4().hex[:8]}"
        self.master_address: str | None = None
        self.master_port: str | None = None
        self._health: dict[str, WorkerError | None] = {"failure": None}
        self._actor_ids: list[str] = []

        if worker_names is not None or worker_handles is not None:
            self._attach(worker_names, worker_handles)
        elif resource_pool is not None and ray_cls_with_init is not None:
            if not isinstance(resource_pool, RayResourcePool):
                raise TypeError(f"resource_pool must be a RayResourcePool, got {type(resource_pool).__name__}")
            if use_gpu and not resource_pool.use_gpu:
                raise ValueError(f"{role}: use_gpu=True but resource pool {resource_pool.name_prefix!r} has no GPUs")
            self._spawn_workers(resource_pool, ray_cls_with_init, bin_pack)
        else:
            raise ValueError("RayWorkerGroup needs resource_pool and ray_cls_with_init, or worker_names/worker_handles")
        self.method_names: list[str] = []
        if ray_cls_with_init is not None:
            self.method_names = self._bind_worker_method(ray_cls_with_init.user_cls)

    # -- creation ---------------------------------------------------------------------------------------------
    def _attach(self, worker_names: list[str] | None, worker_handles: list[Any] | None) -> None:
        if worker_handles is None:
            assert worker_names is not None  # __init__ attaches only when names or handles are given
            worker_handles = []
            for name in worker_names:
                try:
                    worker_handles.append(ray.get_actor(name))
                except ValueError:
                    raise ValueError(f"no running actor named {name!r} to attach the {self.role} group to") from None
        self._workers = list(worker_handles)
        self._worker_names = (
            list(worker_names) if worker_names is not None else [f"{self.role}_{i}" for i in range(len(worker_handles))]
        )
        self._actor_ids = [w._actor_id.hex() for w in self._workers]

    def _spawn_workers(self, pool: RayResourcePool, cls_with_init: RayClassWithInitArgs, bin_pack: bool) -> None:
        """Create one actor per slot and wait until all of them are up; on any failure kill what was created, so
        a failed start-up holds no pool slots."""
        pgs = pool.get_placement_groups(strategy="STRICT_PACK" if bin_pack else "PACK")
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            self._create_actors(pool, pgs, cls_with_init, deadline)
            wait_for_startup(
                [w.__ray_ready__.remote() for w in self._workers],
                role=self.role,
                remaining_s=deadline - time.monotonic(),
                limit_s=self.startup_timeout_s,
                actor_ids=self._actor_ids,
                worker_names=self._worker_names,
            )
        except BaseException:
            self.shutdown()
            raise

    def _create_actors(
        self, pool: RayResourcePool, pgs: list, cls_with_init: RayClassWithInitArgs, deadline: float
    ) -> None:
        slots = pool.bundle_slots(pgs)
        world_size = len(slots)
        rendezvous_key = f"rendezvous/{self.name_prefix}_{uuid.uuid4().hex[:8]}"
        resources: dict[str, Any] = pool.actor_resources(use_gpu=self.use_gpu)  # num_cpus / num_gpus keywords
        runtime_env = self._profiling_runtime_env()
        if self._explicit_master is not None:
            self.master_address, self.master_port = self._explicit_master
        try:
            for rank, ((pg, bundle), (local_rank, local_world_size)) in enumerate(zip(slots, local_layout(slots))):
                env = {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(local_world_size),
                    "RAY_LOCAL_WORLD_SIZE": str(local_world_size),
                    "WG_PREFIX": self.name_prefix,
                    "WG_BACKEND": "ray",
                    BACKEND_ENV: "ray",
                }
                publishes = rank == 0 and self._explicit_master is None
                if publishes:
                    env[RENDEZVOUS_ENV] = rendezvous_key
                    if self._master_port_range is not None:
                        env[PORT_RANGE_ENV] = "{}-{}".format(*self._master_port_range)
                else:
                    # set above (explicit master) or by rank 0's rendezvous in an earlier iteration
                    assert self.master_address is not None and self.master_port is not None
                    env["MASTER_ADDR"], env["MASTER_PORT"] = self.master_address, self.master_port
                env.update(self.customized_worker_env)
                name = f"{self.name_prefix}_rank{rank}"
                actor = cls_with_init(
                    pg, bundle, env_vars=env, name=name, detached=self.detached, runtime_env=runtime_env, **resources
                )
                self._workers.append(actor)
                self._worker_names.append(name)
                self._actor_ids.append(actor._actor_id.hex())
                if publishes:
                    self.master_address, self.master_port = self._wait_rendezvous(
                        rendezvous_key, actor, deadline, world_size
                    )
        finally:
            clear_rendezvous(rendezvous_key)

    def _profiling_runtime_env(self) -> dict[str, Any] | None:
        """Nsight Systems capture for every worker when ``profile_steps`` and ``worker_nsight_options`` ask for it
        on CUDA; the capture range ends after the profiled steps (6 ranges each) unless the options say otherwise."""
        if not (self.profile_steps and self.worker_nsight_options and self.device_name == "cuda"):
            return None
        options = dict(self.worker_nsight_options)
        if options.get("capture-range-end") is None:
            options["capture-range-end"] = f"repeat-shutdown:{6 * len(self.profile_steps)}"
        return {"nsight": options}

    def _wait_rendezvous(self, key: str, rank0: Any, deadline: float, world_size: int) -> tuple[str, str]:
        """Rank 0 publishes MASTER_ADDR/PORT before its constructor runs; wait for it, or for rank 0's failure."""
        ready = rank0.__ray_ready__.remote()
        while time.monotonic() < deadline:
            found = read_rendezvous(key)
            if found:
                return found
            done, _ = ray.wait([ready], timeout=0.05)
            if done:
                try:
                    ray.get(done[0])
                except Exception as err:
                    raise translate_ray_error(
                        err,
                        role=self.role,
                        rank=0,
                        method="__init__",
                        actor_id=self._actor_ids[0],
                        worker_names=self._worker_names,
                    ) from err
                found = read_rendezvous(key)
                if found:
                    return found
                raise RuntimeError(f"{self.role} rank 0 started but published no MASTER_ADDR/MASTER_PORT")
        raise startup_timeout_error(
            self.role,
            self.startup_timeout_s,
            0,
            world_size,
            [0],
            f"rank 0 ({self._worker_names[0]}) never ran, so the other ranks were not created; its pool slot may be "
            "full (more groups than max_colocate_count share it) or the cluster lacks resources",
        )

    # -- backend hooks ------------------------------------------------------------------------------------------
    def _remote_call(self, rank: int, method_name: str, args: tuple, kwargs: dict) -> Any:
        try:
            method = getattr(self._workers[rank], method_name)
        except AttributeError:
            raise AttributeError(f"{self.role} workers have no method {method_name!r}") from None
        args, kwargs = lift_future_args(args, kwargs)
        return method.remote(*args, **kwargs)

    def _share_objects(self, calls: list[tuple[tuple, dict]]) -> list[tuple[tuple, dict]]:
        """Put each batch (DataProto / TensorDict) that several ranks receive into the object store once; the ranks
        get its reference (Ray resolves a top-level reference before the call), instead of one copy per call."""
        count: dict[int, int] = {}
        objects: dict[int, Any] = {}
        for args, kwargs in calls:
            for value in (*args, *kwargs.values()):
                if _is_batch(value):
                    count[id(value)] = count.get(id(value), 0) + 1
                    objects[id(value)] = value
        shared = [key for key, n in count.items() if n > 1]
        if not shared:
            return calls
        refs = dict(zip(shared, parallel_put([objects[key] for key in shared])))

        def swap(value: Any) -> Any:
            return refs.get(id(value), value) if _is_batch(value) else value

        return [(tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}) for args, kwargs in calls]

    def _wait(self, method_name: str, handles: list, ranks: list[int]) -> list:
        try:
            return wait_for_workers(
                handles,
                ranks=ranks,
                method=method_name,
                role=self.role,
                timeout_s=self.call_timeout_s,
                actor_ids=self._actor_ids,
                worker_names=self._worker_names,
            )
        except WorkerDiedError as err:
            self._health["failure"] = err
            raise

    def _make_data_proto_future(self, method_name: str, handles: list, ranks: list[int], pad_size: int) -> Any:
        from verl.single_controller.ray.future import RayDataProtoFuture, concat_and_unpad

        return RayDataProtoFuture(
            collect_fn=functools.partial(concat_and_unpad, pad_size=pad_size, ranks=list(ranks)),
            futures=list(handles),
            role=self.role,
            method=method_name,
            ranks=list(ranks),
            timeout_s=self.call_timeout_s,
            actor_ids=list(self._actor_ids),
            worker_names=list(self._worker_names),
        )

    def _check_usable(self) -> None:
        failure = self._health["failure"]
        if failure is not None and failure.rank is None:  # shut down on purpose
            raise WorkerDiedError(str(failure), role=self.role, rank=None, method=failure.method)
        if failure is not None:
            raise WorkerDiedError(
                f"{self.role} worker group is unusable: {failure.role} rank {failure.rank} died earlier.\n{failure}",
                role=failure.role,
                rank=failure.rank,
                method=failure.method,
                first_logged_error=getattr(failure, "first_logged_error", None),
                node_id=getattr(failure, "node_id", None),
            )

    # -- colocated roles ----------------------------------------------------------------------------------------
    def spawn(self, prefix_set) -> dict[str, RayWorkerGroup]:
        """One group per role of a colocated group: same actors, each exposing only that role's methods."""
        user_cls = self.ray_cls_with_init.user_cls if self.ray_cls_with_init is not None else None
        role_methods = getattr(user_cls, ROLE_METHODS_ATTR, None)
        if role_methods is None:
            raise ValueError("spawn() needs a group built from create_colocated_worker_cls(...)")
        groups = {}
        for prefix in prefix_set:
            if prefix not in role_methods:
                raise KeyError(f"role {prefix!r} is not part of this colocated group; roles: {sorted(role_methods)}")
            groups[prefix] = self._derive(prefix, role_methods[prefix])
        return groups

    def spawn_fused(self, prefix_set) -> dict[str, RayWorkerGroup]:
        """``spawn`` for a group built with ``create_colocated_worker_cls_fused`` (same per-role groups)."""
        return self.spawn(prefix_set)

    def fuse(self, prefix_set) -> None:
        """Expose each role's group as an attribute of this group (``group.actor.update(...)``), next to the fused
        class's own registered methods."""
        if self.wg_dict is None:
            self.wg_dict = self.spawn(prefix_set)
        for role, group in self.wg_dict.items():
            if role in self._bound_methods or hasattr(type(self), role):
                raise ValueError(f"fuse: role {role!r} clashes with the worker group attribute of the same name")
            setattr(self, role, group)

    def _derive(self, role: str, methods: dict[str, str]) -> RayWorkerGroup:
        group = object.__new__(type(self))
        WorkerGroup.__init__(group, None, role=role)
        group._is_init_with_detached_workers = False
        for attr in (
            "call_timeout_s",
            "startup_timeout_s",
            "ray_cls_with_init",
            "resource_pool",
            "detached",
            "name_prefix",
            "master_address",
            "master_port",
            "_health",
            "customized_worker_env",
            "_explicit_master",
            "_master_port_range",
            "use_gpu",
            "device_name",
            "profile_steps",
            "worker_nsight_options",
            "fused_worker_used",
        ):
            setattr(group, attr, getattr(self, attr))
        group.sub_cls_name = role
        group.wg_dict = None
        group.method_names = list(methods)
        group._workers, group._worker_names, group._actor_ids = self._workers, self._worker_names, self._actor_ids
        group._method_prefix = f"{role}_"
        assert self.ray_cls_with_init is not None  # a fused group was spawned from its class
        user_cls = self.ray_cls_with_init.user_cls
        for name, full_name in methods.items():
            attrs = get_register_attrs(getattr(user_cls, full_name))
            assert attrs is not None  # methods lists the fused class's registered methods
            setattr(group, name, group._make_group_method(full_name, attrs))
            group._bound_methods[name] = full_name
        return group

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @classmethod
    def from_detached(
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        **kwargs,
    ) -> RayWorkerGroup:
        """Attach to actors started elsewhere (e.g. by another driver with detached=True)."""
        return cls(
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            ray_cls_with_init=ray_cls_with_init,
            **kwargs,
        )

    def shutdown(self) -> None:
        """Kill this group's actors and forget their recorded errors."""
        for worker, actor_id in zip(self._workers, self._actor_ids):
            try:
                ray.kill(worker)
            except Exception:
                pass
            clear_first_error(actor_id)
        self._health["failure"] = WorkerDiedError(
            f"{self.role} worker group was shut down", role=self.role, rank=None, method="shutdown"
        )
