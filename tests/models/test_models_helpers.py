"""verl.models: padding-removal support check, apply_monkey_patch's checks, text-only rope indices of the Qwen
vision-language families, and the Megatron names that are not part of this build."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from verl.models.registry import check_model_support_rmpad
from verl.models.transformers import qwen2_vl, qwen3_vl
from verl.models.transformers.monkey_patch import apply_monkey_patch
from verl.utils.extras import MissingExtraError


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def test_rmpad_support_check():
    check_model_support_rmpad("llama")
    check_model_support_rmpad("qwen2")
    with pytest.raises(ValueError, match="qwen2_vl.*use_remove_padding=false"):
        check_model_support_rmpad("qwen2_vl")
    with pytest.raises(ValueError, match="not a transformers architecture"):
        check_model_support_rmpad("no_such_model")
    with pytest.raises(TypeError):
        check_model_support_rmpad(None)


def test_apply_monkey_patch_checks_and_refuses_by_name(tiny_lm):
    apply_monkey_patch(tiny_lm, use_remove_padding=True, use_fused_kernels=True)
    with pytest.raises(NotImplementedError, match="ulysses_sp_size=2"):
        apply_monkey_patch(tiny_lm, ulysses_sp_size=2)
    with pytest.raises(NotImplementedError, match="use_tiled_mlp"):
        apply_monkey_patch(tiny_lm, use_tiled_mlp=True)
    with pytest.raises(NotImplementedError, match="triton"):
        apply_monkey_patch(tiny_lm, use_fused_kernels=True, fused_kernels_backend="triton")
    with pytest.raises(ValueError, match="use_fused_kernels"):
        apply_monkey_patch(nn.Linear(2, 2), use_fused_kernels=True)


@pytest.mark.parametrize("module", [qwen2_vl, qwen3_vl])
def test_text_only_rope_index(module):
    ids = torch.tensor([9, 9, 5, 6, 7])
    mask = torch.tensor([0, 0, 1, 1, 1])
    positions = module.get_rope_index(None, ids, attention_mask=mask)
    assert positions.tolist() == [[1, 1, 0, 1, 2]] * 3
    assert module.get_rope_index(None, ids).tolist() == [list(range(5))] * 3
    with pytest.raises(NotImplementedError, match="image_grid_thw.*text-only"):
        module.get_rope_index(None, ids, image_grid_thw=torch.tensor([[1, 2, 2]]))
    with pytest.raises(ValueError, match="unbatched"):
        module.get_rope_index(None, ids.unsqueeze(0))


def test_mcore_names_import_and_refuse_use():
    from verl.models.mcore import get_mcore_weight_converter, hf_to_mcore_config
    from verl.models.mcore.loader import load_state_dict_to_megatron_gptmodel

    for function in (get_mcore_weight_converter, hf_to_mcore_config, load_state_dict_to_megatron_gptmodel):
        with pytest.raises(MissingExtraError, match="Megatron-LM.*not part of this build"):
            function(None)
