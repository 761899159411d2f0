"""verl's older mismatch_helper API over this package's rollout correction: weights, rejection, veto, metrics."""

import math

import pytest
import torch

from verl.trainer.ppo.mismatch_helper import compute_mismatch_metrics, compute_rollout_importance_weights

# two responses; the second has one padded token. log ratios (trainer - rollout):
#   row 0: [log 3, 0, log 0.5]    row 1: [0, log 1.5, pad]
ROLLOUT = torch.zeros(2, 3)
OLD = torch.log(torch.tensor([[3.0, 1.0, 0.5], [1.0, 1.5, 1.0]]))
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_no_threshold_means_no_correction():
    assert compute_rollout_importance_weights(OLD, ROLLOUT, MASK) == (None, MASK, {})


def test_token_truncate_clips_weights_and_keeps_the_mask():
    proto, mask, metrics = compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "token", "truncate", 2.0)
    expected = torch.tensor([[2.0, 1.0, 0.5], [1.0, 1.5, 0.0]])
    torch.testing.assert_close(proto.batch["rollout_is_weights"], expected)
    assert torch.equal(mask, MASK)
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(3.0)  # reported before truncation
    assert metrics["mismatch/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)
    assert metrics["mismatch/rollout_is_veto_fraction"] == 0.0


def test_token_mask_mode_rejects_out_of_range_tokens_and_keeps_true_ratios():
    proto, mask, metrics = compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "token", "mask", 2.0, 0.6)
    torch.testing.assert_close(proto.batch["rollout_is_weights"], torch.tensor([[3.0, 1.0, 0.5], [1.0, 1.5, 0.0]]))
    assert mask.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert metrics["mismatch/rollout_is_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["mismatch/rollout_is_seq_masked_fraction"] == pytest.approx(0.5)


def test_sequence_and_geometric_levels():
    proto, _, _ = compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "sequence", "truncate", 10.0)
    torch.testing.assert_close(proto.batch["rollout_is_weights"], torch.tensor([[1.5] * 3, [1.5, 1.5, 0.0]]))
    proto, mask, _ = compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "geometric", "mask", 1.2)
    geo0, geo1 = 1.5 ** (1 / 3), 1.5**0.5
    torch.testing.assert_close(proto.batch["rollout_is_weights"], torch.tensor([[geo0] * 3, [geo1, geo1, 0.0]]))
    assert mask.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]  # 1.22 > 1.2 drops the whole second response


def test_veto_drops_whole_responses_in_both_modes():
    for mode in ("truncate", "mask"):
        _, mask, metrics = compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "token", mode, 5.0, 0.1, 0.6)
        assert mask[0].tolist() == [0.0, 0.0, 0.0] and mask[1].tolist() == [1.0, 1.0, 0.0]
        assert metrics["mismatch/rollout_is_veto_fraction"] == pytest.approx(0.5)


def test_mismatch_metrics_and_argument_errors():
    metrics = compute_mismatch_metrics(OLD, ROLLOUT, MASK)
    k1 = -(math.log(3) + math.log(0.5) + math.log(1.5)) / 5
    assert metrics["mismatch_kl"] == pytest.approx(k1)
    assert metrics["mismatch_rollout_ppl"] == pytest.approx(1.0)
    assert set(compute_mismatch_metrics(OLD, None, MASK)) == {"mismatch_training_ppl", "mismatch_training_log_ppl"}
    with pytest.raises(ValueError, match="rollout_is_level='seq'"):
        compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "seq", "truncate", 2.0)
    with pytest.raises(ValueError, match="rollout_is_mode='clip'"):
        compute_rollout_importance_weights(OLD, ROLLOUT, MASK, "token", "clip", 2.0)
