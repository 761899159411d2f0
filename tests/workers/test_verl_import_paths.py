"""verl's import paths served by this package: re-exported names are this package's objects, and the names of
engines not in this build import and refuse use with MissingExtraError."""

from __future__ import annotations

import importlib

import pytest
from torch import nn

from verl.utils.extras import MissingExtraError


def resolve(path: str):
    module, _, name = path.rpartition(":")
    return getattr(importlib.import_module(module), name)


SAME_OBJECT = [
    ("verl.workers.fsdp_workers:ActorRolloutRefWorker", "verl.workers.fsdp.actor_worker:ActorRolloutRefWorker"),
    ("verl.workers.fsdp_workers:CriticWorker", "verl.workers.fsdp.critic_worker:CriticWorker"),
    ("verl.workers.fsdp_workers:RewardModelWorker", "verl.workers.reward_model.worker:RewardModelWorker"),
    ("verl.workers.fsdp_workers:Worker", "verl.single_controller.base:Worker"),
    ("verl.workers.fsdp_workers:DictConfig", "omegaconf:DictConfig"),
    ("verl.workers.fsdp_workers:copy_to_local", "verl.utils.fs:copy_to_local"),
    ("verl.workers.fsdp_workers:hf_tokenizer", "verl.utils:hf_tokenizer"),
    ("verl.workers.rollout.utils:is_valid_ipv6_address", "verl.utils.net_utils:is_valid_ipv6_address"),
    ("verl.workers.fsdp_workers:create_device_mesh", "verl.workers.engine.fsdp.utils:create_device_mesh"),
    ("verl.workers.fsdp_workers:get_sharding_strategy", "verl.workers.engine.fsdp.utils:get_sharding_strategy"),
    ("verl.workers.actor.dp_actor:get_device_id", "verl.utils.device:get_device_id"),
    ("verl.workers.actor.dp_actor:prepare_dynamic_batch", "verl.utils.seqlen_balancing:prepare_dynamic_batch"),
    ("verl.workers.roles.utils.padding:no_padding_2_padding", "verl.workers.utils.padding:no_padding_2_padding"),
    ("verl.workers.roles.utils.losses:ppo_loss", "verl.workers.utils.losses:ppo_loss"),
    (
        "verl.workers.rollout.async_server:AsyncLLMServerManager",
        "verl.experimental.agent_loop.server_manager:AsyncLLMServerManager",
    ),
    (
        "verl.workers.rollout.llm_server:LLMServerClient",
        "verl.experimental.agent_loop.server_manager:AsyncLLMServerManager",
    ),
    (
        "verl.workers.rollout.llm_server:FullyAsyncLLMServerClient",
        "verl.experimental.fully_async_policy.server_manager:PartialRolloutServerManager",
    ),
    (
        "verl.workers.rollout.vllm_rollout.vllm_async_server:AsyncvLLMServer",
        "verl.workers.rollout.vllm.server:VLLMRolloutServer",
    ),
    (
        "verl.workers.rollout.sglang_rollout.async_sglang_server:AsyncSGLangServer",
        "verl.workers.rollout.sglang.server:SGLangRolloutServer",
    ),
    ("verl.workers.rollout.vllm_rollout:vLLMAsyncRollout", "verl.workers.rollout.vllm_rollout:vLLMRollout"),
    ("verl.workers.engine.base:EngineRegistry", "verl.workers.engine:EngineRegistry"),
]


@pytest.mark.parametrize("alias, target", SAME_OBJECT)
def test_reexports_are_this_packages_objects(alias, target):
    assert resolve(alias) is resolve(target)


def test_vllm_names_are_backed_by_the_hybrid_rollout_and_replica():
    from verl.workers.fsdp.hybrid_rollout import HybridRollout
    from verl.workers.rollout.replica import StandaloneReplica
    from verl.workers.rollout.vllm_rollout import ServerAdapter, vllm_mode, vLLMRollout
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

    assert issubclass(vLLMRollout, HybridRollout) and issubclass(ServerAdapter, vLLMRollout)
    assert issubclass(vLLMReplica, StandaloneReplica)
    assert vllm_mode == "spmd"


def test_vision_tower_lookup():
    from verl.workers.fsdp_workers import get_vl_model_vision_tower

    tower = nn.Linear(1, 1)
    new_layout = nn.Module()
    new_layout.model = nn.Module()
    new_layout.model.visual = tower
    old_layout = nn.Module()
    old_layout.visual = tower
    assert get_vl_model_vision_tower(new_layout) is tower
    assert get_vl_model_vision_tower(old_layout) is tower
    assert get_vl_model_vision_tower(nn.Linear(1, 1)) is None


def test_third_party_vllm_facts():
    from importlib.metadata import PackageNotFoundError, version

    from verl.third_party.vllm import VLLM_SLEEP_LEVEL, vllm_version

    try:
        installed = version("vllm")
    except PackageNotFoundError:
        installed = None
    assert vllm_version == installed and VLLM_SLEEP_LEVEL == 1


UNAVAILABLE = [
    ("verl.workers.megatron_workers:ActorRolloutRefWorker", "verl.single_controller.base:Worker"),
    ("verl.workers.megatron_workers:CriticWorker", "verl.single_controller.base:Worker"),
    ("verl.workers.megatron_workers:RewardModelWorker", "verl.single_controller.base:Worker"),
    ("verl.single_controller.ray.megatron:NVMegatronRayWorkerGroup", "verl.single_controller.ray:RayWorkerGroup"),
    ("verl.workers.engine.megatron.transformer_impl:MegatronEngineWithLMHead", "verl.workers.engine:BaseEngine"),
    ("verl.workers.engine.torchtitan.transformer_impl:TorchTitanEngineWithLMHead", "verl.workers.engine:BaseEngine"),
    ("verl.workers.engine.mindspeed.transformer_impl:MindspeedEngineWithLMHead", "verl.workers.engine:BaseEngine"),
    ("verl.workers.sharding_manager:FSDPVLLMShardingManager", "verl.workers.sharding_manager.base:BaseShardingManager"),
    ("verl.workers.reward_model.sglang_reward_model:SGLangRewardModel", "builtins:object"),
    ("verl.workers.rollout.async_server:ChatCompletionScheduler", "builtins:object"),
    ("verl.workers.rollout.vllm_rollout:FIREvLLMRollout", "verl.workers.rollout.vllm_rollout:vLLMRollout"),
    ("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightSender", "builtins:object"),
    ("verl.third_party.vllm:LLM", "builtins:object"),
]


@pytest.mark.parametrize("path, base", UNAVAILABLE)
def test_unavailable_classes_import_and_refuse_construction(path, base):
    cls = resolve(path)
    assert issubclass(cls, resolve(base))
    if path == "verl.third_party.vllm:LLM" and resolve("verl.third_party.vllm:vllm_version") is not None:
        pytest.skip("vLLM is installed: LLM is vLLM's own class")
    with pytest.raises(MissingExtraError, match=r"needs .*(not part of this build|pip install verl\[)"):
        cls()


@pytest.mark.parametrize(
    "path",
    [
        "verl.workers.engine.mindspeed.transformer_impl:repatch",
        "verl.third_party.sglang.parallel_state:initialize_parallel_state",
        "verl.third_party.sglang.parallel_state:get_tensor_model_parallel_rank",
    ],
)
def test_unavailable_functions_refuse_calls(path):
    with pytest.raises(MissingExtraError, match="not part of this build"):
        resolve(path)()
