"""Training-step metrics: data statistics, timing, spec decoding, variance proxies, rollout MoE load balance."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo import metric_utils
from verl.trainer.ppo.metric_utils import (
    RolloutMoELoadBalanceMetricsAccumulator,
    compute_data_metrics,
    compute_moe_lb_metrics,
    compute_rollout_moe_load_balance_metrics,
    compute_spec_decode_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
    infer_rollout_moe_num_experts,
)


def _batch(response_mask: torch.Tensor, prompt_len: int = 2) -> DataProto:
    n, r = response_mask.shape
    scores = torch.zeros(n, r)
    scores[:, 0] = torch.arange(n, dtype=torch.float32)
    return DataProto.from_dict(
        tensors={
            "prompts": torch.ones(n, prompt_len, dtype=torch.long),
            "responses": torch.ones(n, r, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(n, prompt_len, dtype=torch.long), response_mask], -1),
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores,
            "advantages": torch.ones(n, r),
            "returns": torch.ones(n, r),
        }
    )


def test_data_metrics_leave_aborted_samples_out_of_scores():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    metrics = compute_data_metrics(_batch(mask), use_critic=False)
    assert metrics["critic/score/max"] == 1.0 and metrics["critic/score/mean"] == 0.5  # row 2 (score 2) aborted
    assert metrics["response/aborted_ratio"] == pytest.approx(1 / 3)
    assert metrics["response_length/mean"] == pytest.approx(4 / 3)
    assert metrics["response_length_non_aborted/mean"] == 2.0
    assert metrics["response_length/clip_ratio"] == pytest.approx(1 / 3)
    assert metrics["prompt_length/clip_ratio"] == 1.0
    assert "critic/values/mean" not in metrics
    everything_aborted = compute_data_metrics(_batch(torch.zeros(2, 3, dtype=torch.long)), use_critic=False)
    assert math.isnan(everything_aborted["critic/score/mean"])


def test_timing_per_token():
    batch = _batch(torch.tensor([[1, 1, 0], [1, 1, 1]]))
    metrics = compute_timing_metrics(batch, {"gen": 1.0, "update_actor": 2.0, "step": 4.0})
    assert metrics["timing_s/step"] == 4.0
    assert metrics["timing_per_token_ms/gen"] == pytest.approx(1000 / 5)
    assert metrics["timing_per_token_ms/update_actor"] == pytest.approx(2000 / 9)
    empty = compute_timing_metrics(_batch(torch.zeros(1, 2, dtype=torch.long), prompt_len=0), {"gen": 1.0})
    assert empty["timing_per_token_ms/gen"] == 0.0


def test_spec_decode_metrics():
    metrics = compute_spec_decode_metrics([4, 0, 2], [2, 0, 2], [2, 0, 1])
    assert metrics["rollout/spec_accept_rate"] == pytest.approx((0.5 + 0 + 1.0) / 3)
    assert metrics["rollout/spec_accept_length"] == pytest.approx((2.0 + 0 + 3.0) / 3)
    assert compute_spec_decode_metrics(None, None, None) == {}
    assert compute_spec_decode_metrics([1], [1], [1], non_padding_mask=[False]) == {}
    with pytest.raises(ValueError, match="needs all of"):
        compute_spec_decode_metrics([1], None, [1])


def test_variance_proxies():
    mask = torch.tensor([[1, 1], [1, 0]])
    batch = _batch(mask)
    assert compute_variance_proxy_metrics(batch) == {}
    batch.batch["old_log_probs"] = torch.log(torch.full((2, 2), 0.5))
    batch.batch["sum_pi_squared"] = torch.full((2, 2), 0.5)
    batch.batch["advantages"] = torch.tensor([[2.0, 2.0], [1.0, 7.0]])
    metrics = compute_variance_proxy_metrics(batch, gradient_norm=1.0)
    # W = 0.5 per token: rows have W 1.0 and 0.5; mean advantages 2 and 1
    assert metrics["variance_proxy/proxy2_total_power"] == pytest.approx((4 * 1.0 + 1 * 0.5) / 2)
    assert metrics["variance_proxy/proxy3_pure_noise"] == pytest.approx(2.25 - 1.0)
    assert metrics["variance_proxy/expected_w"] == pytest.approx(0.75)


def test_moe_load_balance_ignores_each_responses_last_token():
    # 1 layer, top-1, 2 experts; the final token of every response holds filler (expert 1 here)
    routed = torch.tensor([[[[0]], [[1]], [[1]]], [[[0]], [[1]], [[1]]]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    counts = metric_utils._compute_rollout_moe_load_counts(routed, mask, num_experts=2)
    assert counts.tolist() == [[2, 1]]
    metrics = compute_rollout_moe_load_balance_metrics(routed, mask, num_experts=2)
    assert metrics["rollout/moe/max_vio/layer_0"] == pytest.approx(2 / 3 * 2 - 1)
    assert metrics["rollout/moe/avg_vio/avg"] == pytest.approx(1 / 3)
    assert compute_rollout_moe_load_balance_metrics(routed, mask, num_experts=1) == {}  # ids out of range


def test_moe_metrics_accumulate_over_the_interval():
    accumulator = RolloutMoELoadBalanceMetricsAccumulator(model_config={"hf_config": {"n_routed_experts": 2}})
    batch = SimpleNamespace(
        batch={"routed_experts": torch.tensor([[[[0]], [[1]], [[0]]]]), "response_mask": torch.ones(1, 3)}
    )
    assert compute_moe_lb_metrics(batch, 3, 1, accumulator) == {}
    assert compute_moe_lb_metrics(batch, 3, 2, accumulator) == {}
    metrics = compute_moe_lb_metrics(batch, 3, 3, accumulator)
    assert metrics["rollout/moe/routed_expert_assignments"] == 6
    assert metrics["rollout/moe/max_vio/max"] == pytest.approx(0.0)
    assert accumulator.total_assignments() == 0


def test_num_experts_from_the_config_on_disk(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "mixtral", "num_local_experts": 8, "hidden_size": 8, "num_attention_heads": 2}'
    )
    config = {"path": str(tmp_path), "override_config": {"model_config": {"num_local_experts": 4}}}
    assert infer_rollout_moe_num_experts(config) == 4
    assert infer_rollout_moe_num_experts({}) is None
    assert np.isscalar(infer_rollout_moe_num_experts({"path": str(tmp_path)}))
