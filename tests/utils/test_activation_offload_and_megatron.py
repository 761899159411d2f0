"""verl.utils.activation_offload on this package's offload hooks, and the Megatron names that import but say they
need the megatron extra when used."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from verl.utils.activation_offload import enable_activation_offloading
from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager
from verl.utils.extras import MissingExtraError


def test_activation_offloading_keeps_results_and_rejects_other_strategies():
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    offloaded = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    offloaded.load_state_dict(plain.state_dict())
    assert enable_activation_offloading(offloaded, "fsdp2", enable_ckpt=True) is None
    x = torch.randn(3, 4)
    plain(x).sum().backward()
    offloaded(x).sum().backward()
    for a, b in zip(plain.parameters(), offloaded.parameters()):
        assert torch.equal(a.grad, b.grad)
    with pytest.raises(ValueError, match="strategy='megatron'"):
        enable_activation_offloading(plain, "megatron")


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("verl.utils.megatron_utils", "get_model"),
        ("verl.utils.megatron_utils", "get_dist_checkpoint_path"),
        ("verl.utils.megatron_utils", "offload_megatron_model_to_cpu"),
        ("verl.utils.megatron.dist_checkpointing", "load_dist_checkpointing"),
        ("verl.utils.megatron.optimizer", "get_megatron_optimizer"),
        ("verl.utils.megatron.tensor_parallel", "vocab_parallel_log_probs_from_logits"),
        ("verl.utils.megatron.pipeline_parallel", "make_batch_generator"),
        ("verl.utils.megatron.sequence_parallel", "pad_to_sequence_parallel"),
    ],
)
def test_megatron_functions_import_and_name_the_extra(module, name):
    function = getattr(importlib.import_module(module), name)
    with pytest.raises(MissingExtraError, match=rf"{module}\.{name}.*verl\[megatron\]"):
        function("ckpt")


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("verl.utils.checkpoint.megatron_checkpoint_manager", "MegatronCheckpointManager"),
        ("verl.utils.megatron_utils", "McoreModuleWrapperConfig"),
        ("verl.utils.megatron.memory", "MemoryBuffer"),
    ],
)
def test_megatron_classes_import_and_refuse_instantiation(module, name):
    cls = getattr(importlib.import_module(module), name)
    with pytest.raises(MissingExtraError, match=r"verl\[megatron\]"):
        cls()


def test_megatron_checkpoint_manager_is_a_checkpoint_manager():
    from verl.utils.checkpoint.megatron_checkpoint_manager import MegatronCheckpointManager

    assert issubclass(MegatronCheckpointManager, BaseCheckpointManager)
