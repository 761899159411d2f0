"""verl's single-controller API pieces that need no Ray: ClassWithInitArgs, ``__wrapped__`` of registered methods,
colocated (fused) classes built in-process, mesh re-declaration, worker-group environment checks, TensorDict
dispatch and the ``ray.base`` namespace."""

import asyncio
import inspect

import pytest
import torch
from tensordict import TensorDict

from verl.single_controller.base import ClassWithInitArgs, Dispatch, Worker, register
from verl.single_controller.base.dispatch import PAD_SIZE_KEY, dispatch_dp_compute_data_proto, unpad_batch
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.class_with_init_args import RayClassWithInitArgs
from verl.single_controller.ray.colocated import create_colocated_worker_cls_fused, create_colocated_worker_raw_cls
from verl.single_controller.ray.worker_env import check_port_range, check_worker_env, local_layout


class Adder(Worker):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, x):
        return x + self.offset

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def add_later(self, x):
        await asyncio.sleep(0)
        return x + self.offset

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def generate(self, prompt):
        return f"{prompt}+{self.offset}"


class Scaler(Worker):
    def __init__(self, factor=2):
        super().__init__()
        self.factor = factor

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def scale(self, x):
        # a role sees the other roles of its process
        return self.fused_worker_dict["actor"].add(x) * self.factor


def test_class_with_init_args_defers_construction():
    deferred = ClassWithInitArgs(dict, [("b", 2)], a=1)
    assert deferred.fused_worker_used is False
    assert deferred() == {"a": 1, "b": 2}
    assert deferred() is not deferred()  # one instance per call (per rank)


def test_wrapped_is_the_undecorated_method_with_a_ray_friendly_signature():
    adder = Adder(5)
    assert Adder.add.__wrapped__(adder, 1) == 6
    assert asyncio.run(Adder.add_later.__wrapped__(adder, 1)) == 6
    assert inspect.iscoroutinefunction(Adder.add_later.__wrapped__)
    innermost = inspect.unwrap(Adder.add)  # what Ray reads the signature of
    kinds = [p.kind for p in inspect.signature(innermost).parameters.values()]
    assert inspect.Parameter.VAR_KEYWORD in kinds  # lifted future arguments are accepted


def test_raw_colocated_class_builds_every_role_in_one_process():
    raw = create_colocated_worker_raw_cls(
        {
            "actor": RayClassWithInitArgs(Adder, offset=10),
            "critic": RayClassWithInitArgs(Scaler, factor=3),
        }
    )

    class Hybrid(raw):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def both(self, x):
            return self.critic.scale(self.actor.add(x))

    worker = Hybrid()
    assert worker.actor.add(1) == 11 and worker.both(1) == (11 + 10) * 3
    assert worker.actor.fused_worker_dict is worker.fused_worker_dict is worker.worker_dict
    assert worker.get_fused_worker_by_name("critic") is worker.critic
    assert worker.actor_add(2) == 12 and worker.critic_scale(0) == 30  # prefixed delegates the group binds
    assert worker._fuw_execute("critic_fwmn_scale", 0) == 30
    assert not hasattr(Hybrid, "generate")  # only roles named *rollout* expose direct rollout methods unprefixed
    with pytest.raises(ValueError, match="expected '<role>_fwmn_<method>'"):
        worker._fuw_execute("nobody_fwmn_add", 0)


def test_rollout_roles_expose_direct_rollout_methods_unprefixed():
    cia = create_colocated_worker_cls_fused({"actor_rollout": RayClassWithInitArgs(Adder, offset=1)})
    assert cia.fused_worker_used is True
    worker = cia.user_cls()
    assert asyncio.run(worker.generate("q")) == "q+1"
    assert asyncio.run(worker.actor_rollout_generate("q")) == "q+1"


def test_colocated_role_names_must_not_shadow_worker_attributes():
    with pytest.raises(ValueError, match=r"\['rank'\] clash with Worker attributes"):
        create_colocated_worker_raw_cls({"rank": RayClassWithInitArgs(Adder, offset=1)})


def test_mesh_layout_can_be_copied_from_a_wrapped_worker():
    inner, outer = Worker(), Worker()
    inner._register_dispatch_collect_info("train", dp_rank=3, is_collect=False)
    layout = inner.get_dispatch_collect()
    assert layout == {"dispatch_dp_rank": {"train": 3}, "collect_dp_rank": {"train": False}}
    outer.set_dispatch_collect("actor", **layout)
    assert outer._query_dispatch_info("actor") == 3 and outer.query_collect_info("actor") is False
    inner._register_dispatch_collect_info("other", dp_rank=0, is_collect=True)
    with pytest.raises(ValueError, match="exactly one mesh"):
        outer.set_dispatch_collect("ref", **inner.get_dispatch_collect())


def test_worker_env_may_not_override_the_group_environment():
    assert check_worker_env({"MY_FLAG": 1}) == {"MY_FLAG": "1"}
    with pytest.raises(ValueError, match=r"\['MASTER_PORT', 'WORLD_SIZE'\]"):
        check_worker_env({"WORLD_SIZE": "9", "MASTER_PORT": "1", "OK": "x"})
    assert check_port_range([20000, 20100]) == (20000, 20100) and check_port_range(None) is None
    with pytest.raises(ValueError, match="master_port_range"):
        check_port_range([5, 5])


def test_local_layout_counts_slots_per_placement_group():
    a, b = object(), object()
    assert local_layout([(a, 2), (a, 3), (b, 0), (a, 4)]) == [(0, 3), (1, 3), (0, 1), (2, 3)]


class _Group(WorkerGroup):
    def __init__(self, n):
        super().__init__()
        self._workers = list(range(n))


def test_dp_compute_proto_splits_and_unpads_tensordicts():
    td = TensorDict({"x": torch.arange(5)}, batch_size=[5])
    args, kwargs = dispatch_dp_compute_data_proto(_Group(2), td)
    pad = kwargs.pop(PAD_SIZE_KEY)
    assert pad == 1 and [len(chunk) for chunk in args[0]] == [3, 3]
    merged = torch.cat([chunk["x"] for chunk in args[0]])
    assert unpad_batch(TensorDict({"x": merged}, batch_size=[6]), pad)["x"].tolist() == [0, 1, 2, 3, 4]


def test_ray_base_namespace_holds_verl_names():
    from verl.single_controller.ray import base

    for name in (
        "RayClassWithInitArgs",
        "RayResourcePool",
        "RayWorkerGroup",
        "ResourcePoolManager",
        "SubRayResourcePool",
        "create_colocated_worker_cls",
        "create_colocated_worker_cls_fused",
        "create_colocated_worker_raw_cls",
        "merge_resource_pool",
        "split_resource_pool",
    ):
        assert hasattr(base, name), name
