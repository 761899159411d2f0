"""Resource pool bookkeeping, ResourcePoolManager validation and Role (no Ray cluster needed)."""

import pytest

from verl.single_controller.base import ResourcePool
from verl.single_controller.ray import RayResourcePool, ResourcePoolManager
from verl.single_controller.ray.errors import default_call_timeout_s
from verl.trainer.ppo.roles import Role


def test_resource_pool_rank_layout():
    pool = ResourcePool([2, 3])
    assert pool.world_size == 5
    assert pool.local_world_size_list() == [2, 2, 3, 3, 3]
    assert pool.local_rank_list() == [0, 1, 0, 1, 2]
    with pytest.raises(ValueError, match=r"process_on_nodes\[1\] must be a positive int, got 0"):
        ResourcePool([2, 0])
    with pytest.raises(ValueError, match="max_colocate_count"):
        ResourcePool([1], max_colocate_count=0)


def test_cpu_pool_uses_fractional_cpu_slots(monkeypatch):
    monkeypatch.delenv("VERL_CPUS_PER_PROCESS", raising=False)
    pool = RayResourcePool([8], use_gpu=False, max_colocate_count=2)
    assert pool.bundle() == {"CPU": 0.25}  # 8 processes fit on 2 cores
    assert pool.actor_resources() == {"num_cpus": 0.125}
    gpu = RayResourcePool([2], use_gpu=True, max_colocate_count=4, accelerator_type="H100")
    assert gpu.bundle() == {"CPU": 1.0, "GPU": 1, "accelerator_type:H100": 1e-3}
    assert gpu.actor_resources() == {"num_cpus": 0.25, "num_gpus": 0.25}


def test_pool_names_are_unique_per_instance():
    a = RayResourcePool([1], use_gpu=False, name_prefix="global_pool")
    b = RayResourcePool([1], use_gpu=False, name_prefix="global_pool")
    assert a.name_prefix.startswith("global_pool_") and a.name_prefix != b.name_prefix


def test_pool_rejects_bad_settings(monkeypatch):
    with pytest.raises(ValueError, match="cpus_per_process must be > 0"):
        RayResourcePool([1], use_gpu=False, cpus_per_process=0)
    with pytest.raises(ValueError, match="at least one node"):
        RayResourcePool([], use_gpu=False)
    monkeypatch.setenv("VERL_CPUS_PER_PROCESS", "lots")
    with pytest.raises(ValueError, match="VERL_CPUS_PER_PROCESS must be a number"):
        RayResourcePool([1], use_gpu=False)


def test_call_timeout_env(monkeypatch):
    monkeypatch.delenv("VERL_WORKER_CALL_TIMEOUT_S", raising=False)
    assert default_call_timeout_s() == 1800.0
    monkeypatch.setenv("VERL_WORKER_CALL_TIMEOUT_S", "12.5")
    assert default_call_timeout_s() == 12.5
    monkeypatch.setenv("VERL_WORKER_CALL_TIMEOUT_S", "-1")
    with pytest.raises(ValueError, match="VERL_WORKER_CALL_TIMEOUT_S must be > 0"):
        default_call_timeout_s()


def test_manager_validates_spec_and_mapping():
    with pytest.raises(ValueError, match="names pool 'missing'"):
        ResourcePoolManager({"global_pool": [2]}, {Role.ActorRollout: "missing"})
    with pytest.raises(ValueError, match=r"resource_pool_spec\['global_pool'\] must be a non-empty list"):
        ResourcePoolManager({"global_pool": [0]}, {Role.ActorRollout: "global_pool"})
    with pytest.raises(ValueError, match="device must be one of"):
        ResourcePoolManager({"p": [1]}, {Role.Critic: "p"}, device="tpu")
    manager = ResourcePoolManager({"a": [2, 2], "b": [1]}, {Role.ActorRollout: "a", Role.Critic: "b"})
    assert manager.get_n_gpus() == 5
    with pytest.raises(KeyError, match="role ref has no resource pool"):
        manager.get_resource_pool(Role.RefPolicy)
    with pytest.raises(RuntimeError, match="call create_resource_pool"):
        manager.get_resource_pool(Role.Critic)


def test_role_names():
    assert str(Role.ActorRolloutRef) == "actor_rollout_ref" and str(Role.RefPolicy) == "ref"
    assert Role.from_string("actor_rollout") is Role.ActorRollout
    assert Role.from_string("Critic") is Role.Critic
    assert {r.name for r in Role} >= {
        "Actor",
        "Rollout",
        "ActorRollout",
        "Critic",
        "RefPolicy",
        "RewardModel",
        "ActorRolloutRef",
    }
    with pytest.raises(ValueError, match="unknown role 'judge'"):
        Role.from_string("judge")
