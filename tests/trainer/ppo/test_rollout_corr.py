import math

import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr import (
    apply_rollout_correction,
    compute_rollout_is_weights,
    mismatch_metrics,
    rejection_mask,
)


def _reference_weights(old, rollout, mask, level, threshold):
    out = torch.zeros_like(old, dtype=torch.float64)
    for i in range(old.shape[0]):
        seq_log_ratio = sum(float(old[i, j] - rollout[i, j]) for j in range(old.shape[1]) if mask[i, j])
        for j in range(old.shape[1]):
            if not mask[i, j]:
                continue
            log_ratio = seq_log_ratio if level == "sequence" else float(old[i, j] - rollout[i, j])
            out[i, j] = min(math.exp(log_ratio), threshold)
    return out


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_weights_match_loop_reference(level):
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64)
    rollout = old + 0.3 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 6)
    mask[1, 3:] = 0
    mask[3, :] = 0
    weights = compute_rollout_is_weights(old, rollout, mask, level, threshold=1.5)
    torch.testing.assert_close(weights, _reference_weights(old, rollout, mask, level, 1.5))
    assert weights.max() <= 1.5


def test_unknown_level_is_named():
    with pytest.raises(ValueError, match=r"rollout_is='tok'"):
        compute_rollout_is_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), "tok", 2.0)


def test_identical_policies_have_zero_mismatch_and_full_ess():
    logp = -torch.rand(3, 5)
    metrics = mismatch_metrics(logp, logp.clone(), torch.ones(3, 5))
    assert metrics["rollout_corr/mismatch_kl_k1"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["rollout_corr/mismatch_kl_k3"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["rollout_corr/ess"] == pytest.approx(1.0)


def test_drifted_policies_lower_ess_and_raise_kl():
    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(8, 8, generator=gen)
    rollout = old + torch.randn(8, 8, generator=gen)
    metrics = mismatch_metrics(old, rollout, torch.ones(8, 8))
    assert metrics["rollout_corr/mismatch_kl_k3"] > 0.05
    assert metrics["rollout_corr/ess"] < 0.9


def test_apply_adds_weights_only_when_configured():
    old = -torch.rand(2, 3)
    batch = DataProto.from_dict(
        {"old_log_probs": old, "rollout_log_probs": old - 0.1, "response_mask": torch.ones(2, 3)}
    )
    metrics = apply_rollout_correction(batch, OmegaConf.create({"rollout_is": None}))
    assert "rollout_is_weights" not in batch.batch.keys() and "rollout_corr/ess" in metrics
    metrics = apply_rollout_correction(batch, OmegaConf.create({"rollout_is": "token", "rollout_is_threshold": 2.0}))
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.full((2, 3), math.exp(0.1)))
    assert metrics["rollout_corr/is_weight_mean"] == pytest.approx(math.exp(0.1), rel=1e-5)


def test_apply_without_rollout_log_probs_is_a_no_op():
    batch = DataProto.from_dict({"old_log_probs": torch.zeros(2, 3), "response_mask": torch.ones(2, 3)})
    assert apply_rollout_correction(batch, OmegaConf.create({"rollout_is": "token"})) == {}


def _drifted(rows: int = 6, cols: int = 5, seed: int = 2):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, cols, generator=gen, dtype=torch.float64)
    rollout = old + 0.5 * torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask = torch.ones(rows, cols)
    mask[1, 2:] = 0
    return old, rollout, mask


def _reference_keep(old, rollout, mask, level, upper, lower, veto):
    keep = torch.zeros_like(mask)
    for i in range(old.shape[0]):
        ratios = [math.exp(float(old[i, j] - rollout[i, j])) for j in range(old.shape[1]) if mask[i, j]]
        row_ok = not (veto is not None and any(r < veto for r in ratios))
        if level == "sequence":
            row_ok = row_ok and lower <= math.prod(ratios) <= upper
        if level == "geometric":
            row_ok = row_ok and lower <= math.prod(ratios) ** (1 / len(ratios)) <= upper
        for j in range(old.shape[1]):
            ratio = math.exp(float(old[i, j] - rollout[i, j]))
            token_ok = level != "token" or lower <= ratio <= upper
            keep[i, j] = float(bool(mask[i, j]) and row_ok and token_ok)
    return keep


@pytest.mark.parametrize(
    "level, veto", [("token", None), ("sequence", None), ("geometric", None), (None, 0.7), ("token", 0.5)]
)
def test_rejection_matches_loop_reference(level, veto):
    old, rollout, mask = _drifted()
    kept = rejection_mask(old, rollout, mask, level, 1.4, 0.7, veto)
    expected = _reference_keep(old, rollout, mask, level, 1.4, 0.7, veto)
    torch.testing.assert_close(kept, expected)
    assert 0 < kept.sum() < mask.sum(), "the case should reject some tokens and keep others"


def test_unknown_rejection_level_is_named():
    with pytest.raises(ValueError, match=r"rollout_rs='seq'"):
        rejection_mask(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), "seq", 2.0, 0.5)


def test_apply_rejects_from_the_response_mask_before_weighting():
    old, rollout, mask = _drifted()
    batch = DataProto.from_dict({"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask.clone()})
    config = OmegaConf.create(
        {
            "rollout_is": "token",
            "rollout_is_threshold": 2.0,
            "rollout_rs": "sequence",
            "rollout_rs_threshold": 1.4,
            "rollout_rs_threshold_lower": None,
        }
    )
    metrics = apply_rollout_correction(batch, config)
    expected = _reference_keep(old, rollout, mask, "sequence", 1.4, 1 / 1.4, None)
    torch.testing.assert_close(batch.batch["response_mask"], expected)
    assert (batch.batch["rollout_is_weights"][expected == 0] == 0).all()
    dropped_rows = int(((mask.sum(-1) > 0) & (expected.sum(-1) == 0)).sum())
    assert dropped_rows > 0
    assert metrics["rollout_corr/rs_rejected_seq_frac"] == pytest.approx(dropped_rows / 6)
    assert metrics["rollout_corr/rs_rejected_token_frac"] == pytest.approx(1 - float(expected.sum() / mask.sum()))


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_batch_normalized_weights_average_one(level):
    old, rollout, mask = _drifted()
    batch = DataProto.from_dict({"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask})
    apply_rollout_correction(
        batch, OmegaConf.create({"rollout_is": level, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True})
    )
    weights = batch.batch["rollout_is_weights"]
    raw = compute_rollout_is_weights(old, rollout, mask, level, 2.0)
    if level == "token":
        assert float((weights * mask).sum() / mask.sum()) == pytest.approx(1.0)
    else:
        assert float(weights.max(-1).values.mean()) == pytest.approx(1.0)
    torch.testing.assert_close(weights / weights.max(), raw / raw.max())  # a rescaling, nothing else
