"""verl.utils.flops_counter: the transformer FLOPs estimate behind MFU, and device peaks by name."""

from __future__ import annotations

import math

import pytest
from transformers import LlamaConfig, Qwen2MoeConfig

from verl.utils.flops_counter import FlopsCounter, get_device_flops


def test_dense_estimate_is_six_flops_per_parameter_per_token_plus_attention():
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    head_dim = 16
    per_layer = 64 * head_dim * (2 * 4 + 2 * 2) + 3 * 64 * 128
    params = 2 * per_layer + 2 * 100 * 64
    seqlens = [10, 30]
    attention = 6 * (10**2 + 30**2) * head_dim * 4 * 2
    achieved, peak = FlopsCounter(config).estimate_flops(seqlens, delta_time=2.0)
    assert achieved == pytest.approx((6 * params * 40 + attention) / 2.0 / 1e12)
    assert peak == get_device_flops()


def test_moe_counts_routed_and_shared_experts_only():
    config = Qwen2MoeConfig(
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        shared_expert_intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=50,
    )
    head_dim = 8
    mlp = 32 * 8 + 3 * 32 * 16 * 2 + 3 * 32 * 24
    params = 32 * head_dim * (8 + 8) + mlp + 2 * 50 * 32
    achieved, _ = FlopsCounter(config).estimate_flops([4], delta_time=1.0)
    assert achieved == pytest.approx((6 * params * 4 + 6 * 16 * head_dim * 4) / 1e12)


def test_unknown_families_read_zero(caplog):
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1)
    config.model_type = "deepseek_v3"
    achieved, _ = FlopsCounter(config).estimate_flops([8], delta_time=1.0)
    assert achieved == 0.0 and "deepseek_v3" in caplog.text


def test_device_peaks_by_name():
    assert get_device_flops(device_name="NVIDIA H200") == pytest.approx(989)  # not the H20's 148
    assert get_device_flops(device_name="NVIDIA H20") == pytest.approx(148)
    assert get_device_flops(device_name="NVIDIA L40S") == pytest.approx(362)
    assert get_device_flops(unit="P", device_name="NVIDIA A100-SXM4-80GB") == pytest.approx(0.312)
    assert math.isinf(get_device_flops(device_name="Mystery GPU"))
    with pytest.raises(ValueError, match="unit"):
        get_device_flops(unit="X")
