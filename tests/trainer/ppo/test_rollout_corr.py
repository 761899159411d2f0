import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.config.algo_config import RolloutCorrectionConfig
from verl.trainer.config.resolve import as_ppo_config
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.rollout_corr import (
    apply_rollout_correction,
    compute_rollout_is_weights,
    in_update_spec,
    mismatch_metrics,
    rejection_mask,
    uses_verl_options,
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


# ------------------------------------------------------------------------ verl's spellings in the trainer's own pass
# two responses, r = pi_train / pi_rollout per token:  row 0: [1.25, 0.5, 2.5, pad]   row 1: [1.0, 1.5, 0.8, 1.1]
RATIOS = [[1.25, 0.5, 2.5, 1.0], [1.0, 1.5, 0.8, 1.1]]
MASK = [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
ROLLOUT = torch.full((2, 4), -1.0, dtype=torch.float64)
OLD = ROLLOUT + torch.log(torch.tensor(RATIOS, dtype=torch.float64))


def _small_batch() -> DataProto:
    mask = torch.tensor(MASK)
    return DataProto.from_dict(
        {"old_log_probs": OLD.clone(), "rollout_log_probs": ROLLOUT.clone(), "response_mask": mask}
    )


def _hand_token_icepop(lower: float, upper: float) -> list[list[float]]:
    return [[r if m and lower <= r <= upper else 0.0 for r, m in zip(rs, ms)] for rs, ms in zip(RATIOS, MASK)]


def _hand_k3_row_means() -> list[float]:
    means = []
    for rs, ms in zip(RATIOS, MASK):
        k3 = [r - 1 - math.log(r) for r, m in zip(rs, ms) if m]
        means.append(sum(k3) / len(k3))
    return means


def test_trainer_pass_applies_a_lower_upper_is_threshold():
    # token IcePop: weights outside [0.6, 2.0] become 0 (0.5 and 2.5 in row 0); nothing leaves the mask
    batch = _small_batch()
    metrics = apply_rollout_correction(
        batch, RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="0.6_2.0")
    )
    torch.testing.assert_close(
        batch.batch["rollout_is_weights"], torch.tensor(_hand_token_icepop(0.6, 2.0), dtype=torch.float64)
    )
    assert batch.batch["response_mask"].tolist() == MASK
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(2 / 7)
    assert "rollout_corr/mismatch_kl_k1" in metrics  # the trainer's own diagnostics stay
    # sequence IcePop: row 0's product 1.25 * 0.5 * 2.5 = 1.5625 leaves [0.6, 1.5]; row 1's 1.32 stays
    batch = _small_batch()
    apply_rollout_correction(batch, OmegaConf.create({"rollout_is": "sequence", "rollout_is_threshold": "0.6_1.5"}))
    row1 = 1.0 * 1.5 * 0.8 * 1.1
    expected = torch.tensor([[0.0, 0.0, 0.0, 0.0], [row1] * 4], dtype=torch.float64)
    torch.testing.assert_close(batch.batch["rollout_is_weights"], expected)


def test_trainer_pass_applies_verl_rollout_rs_options():
    # token_k1 bands pi_rollout / pi_train = 1 / r within [0.6, 1.5]: row 0 keeps only r = 1.25 (1/r = 0.8)
    batch = _small_batch()
    metrics = apply_rollout_correction(
        batch, RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold="0.6_1.5")
    )
    hand = [[float(m and 0.6 <= 1 / r <= 1.5) for r, m in zip(rs, ms)] for rs, ms in zip(RATIOS, MASK)]
    assert hand == [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    assert batch.batch["response_mask"].tolist() == hand
    assert "rollout_is_weights" not in batch.batch.keys()
    assert metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"] == pytest.approx(2 / 7)
    # seq_mean_k3 at 0.1 drops row 0 (mean k3 0.268) and keeps row 1 (0.031); with token IS its weights are taken
    # over the incoming mask, truncated at 2, as verl's trainer does
    means = _hand_k3_row_means()
    assert means[0] > 0.1 > means[1]
    batch = _small_batch()
    config = RolloutCorrectionConfig(
        rollout_is="token",
        rollout_is_threshold=2.0,
        rollout_rs="token_k1,seq_mean_k3",
        rollout_rs_threshold="0.6_1.5,0.1",
    )
    metrics = apply_rollout_correction(batch, config)
    assert batch.batch["response_mask"].tolist() == [[0.0] * 4, [1.0] * 4]
    truncated = [[min(r, 2.0) * m for r, m in zip(rs, ms)] for rs, ms in zip(RATIOS, MASK)]
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor(truncated, dtype=torch.float64))
    assert metrics["rollout_corr/rollout_rs_seq_mean_k3_seq_masked_fraction"] == pytest.approx(0.5)


def test_verl_spellings_are_not_left_to_the_on_policy_update():
    # verl's trainer applies them in a separate pass over the batch; so does this one
    assert in_update_spec(RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="0.6_2.0")) is None
    assert in_update_spec(RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold=1.5)) is None
    assert in_update_spec(RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="1.5")) == {
        "rollout_is": "token",
        "rollout_is_threshold": 1.5,
    }
    # no rollout_is: the band is never read, so the update may still supply the old log-probs
    assert in_update_spec(RolloutCorrectionConfig(rollout_is_threshold="0.6_2.0")) == {
        "rollout_is": None,
        "rollout_is_threshold": 2.0,
    }
    assert not uses_verl_options(RolloutCorrectionConfig(rollout_rs="geometric", rollout_rs_threshold="0.9_1.1"))
    assert uses_verl_options(RolloutCorrectionConfig(rollout_rs="token,sequence", rollout_rs_threshold=2.0))


def _ppo_trainer(correction: dict) -> RayPPOTrainer:
    trainer = object.__new__(RayPPOTrainer)
    trainer.bypass_mode, trainer.global_steps, trainer.metrics = False, 1, {}
    trainer.config = OmegaConf.create(
        {
            "actor": {"ppo_epochs": 1, "ppo_mini_batch_size": 1, "skip_on_policy_log_prob": True},
            "rollout": {"n": 2},
            "trainer": {"critic_warmup": 0},
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False, "rollout_correction": correction},
        }
    )
    for group in ("actor", "ref", "critic"):  # what the composed config interpolates from rollout.n
        trainer.config[group] = {**trainer.config.get(group, {}), "rollout_n": 2}
    trainer.ppo_config = as_ppo_config(trainer.config)  # the config check accepts verl's spellings
    return trainer


def test_the_trainer_step_applies_verl_spellings():
    trainer = _ppo_trainer(
        {
            "rollout_is": "token",
            "rollout_is_threshold": "0.6_2.0",
            "rollout_rs": "token_k1",
            "rollout_rs_threshold": "0.6_1.5",
        }
    )
    batch = _small_batch()
    batch.batch["token_level_scores"] = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    batch.non_tensor_batch["uid"] = np.array(["a", "a"], dtype=object)
    assert not trainer._on_policy_update(batch)  # the old log-probs come from a separate pass first
    out = trainer._fit_compute_advantage(batch)
    torch.testing.assert_close(
        out.batch["rollout_is_weights"], torch.tensor(_hand_token_icepop(0.6, 2.0), dtype=torch.float64)
    )
    assert out.batch["response_mask"].tolist() == [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    rejected = out.batch["response_mask"] == 0
    assert (out.batch["advantages"][rejected] == 0).all() and out.batch["advantages"][0, 0] != 0
    assert "rollout_corr/rollout_rs_token_k1_masked_fraction" in trainer.metrics


def _bypass_loss(spec: dict, advantages: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The bypass-mode loss as the actor runs it: ``old_log_prob`` holds the rollout's log-probs."""
    config = {"clip_ratio": 0.2, "policy_loss": {"loss_mode": "bypass_mode", "rollout_correction": spec}}
    loss_fn = get_policy_loss_fn("bypass_mode")
    return loss_fn(ROLLOUT.clone(), OLD.clone(), advantages, torch.tensor(MASK), "token-mean", config)


def test_bypass_loss_applies_verl_spellings():
    advantages = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.5, 1.0, -1.0, 2.0]], dtype=torch.float64)
    # REINFORCE with token IcePop weights: -A * log pi * w, token-mean over the mask
    spec = {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": "0.6_2.0"}
    loss, metrics = _bypass_loss(spec, advantages)
    weights = _hand_token_icepop(0.6, 2.0)
    terms = [
        -float(advantages[i, j]) * float(OLD[i, j]) * weights[i][j] for i in range(2) for j in range(4) if MASK[i][j]
    ]
    assert loss.item() == pytest.approx(sum(terms) / 7)
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(2 / 7)
    # PPO-clip with token_k1 rejection: the clipped loss over the kept tokens only
    spec = {"loss_type": "ppo_clip", "rollout_rs": "token_k1", "rollout_rs_threshold": "0.6_1.5"}
    loss, metrics = _bypass_loss(spec, advantages)
    kept = [(0, 0), (1, 0), (1, 1), (1, 2), (1, 3)]
    clipped = [
        max(-float(advantages[i, j]) * RATIOS[i][j], -float(advantages[i, j]) * min(max(RATIOS[i][j], 0.8), 1.2))
        for i, j in kept
    ]
    assert loss.item() == pytest.approx(sum(clipped) / len(kept))
    assert metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"] == pytest.approx(2 / 7)
