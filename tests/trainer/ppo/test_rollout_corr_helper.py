"""verl's rollout_corr_helper API: IS weights (truncate / IcePop), rejection options (verl's k1/k2/k3 and ours), metric
names, the batch entry point, bypass mode, agreement with this package's apply_rollout_correction, and the typed
RolloutCorrectionConfig taking verl's spellings (string thresholds, option names, comma lists) with errors by key, and
verl's RolloutCorrectionConfig presets."""

import dataclasses
import inspect
import math

import pytest
import torch
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.protocol import DataProto
from verl.trainer.config.algo_config import RolloutCorrectionConfig
from verl.trainer.ppo import rollout_corr_helper as helper
from verl.trainer.ppo._util import as_rollout_correction_config
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.rollout_corr import apply_rollout_correction
from verl.workers.config.actor import PolicyLossConfig

# two responses; the second has one padded token. r = pi_train / pi_rollout:
#   row 0: [3, 1, 0.5]    row 1: [1, 1.5, pad]
ROLLOUT = torch.zeros(2, 3)
OLD = torch.log(torch.tensor([[3.0, 1.0, 0.5], [1.0, 1.5, 1.0]]))
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
LOG_RATIO = OLD - ROLLOUT

# what verl 0.9.1's module defines at top level (its imports aside), with its parameter names in order
UPSTREAM_PUBLIC = {
    "SAFETY_BOUND": None,
    "SUPPORTED_ROLLOUT_RS_OPTIONS": None,
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS": None,
    "compute_rollout_rejection_mask": ["log_ratio", "response_mask", "rollout_rs", "rollout_rs_threshold"],
    "compute_rs_metrics": [
        "option_name",
        "rs_statistic",
        "response_mask",
        "seq_valid_mask",
        "level",
        "per_sequence_values",
        "rollout_rs_threshold",
        "rollout_rs_threshold_lower",
        "apply_lower_threshold",
    ],
    "compute_rollout_correction_weights": [
        "log_ratio",
        "response_mask",
        "rollout_is",
        "rollout_is_threshold",
        "rollout_is_batch_normalize",
    ],
    "compute_is_metrics": [
        "rollout_is_weights",
        "raw_rollout_is_weights",
        "log_ratio_for_metrics",
        "response_mask",
        "rollout_is",
        "rollout_is_threshold",
        "rollout_is_threshold_lower",
    ],
    "compute_rollout_correction_and_rejection_mask": [
        "old_log_prob",
        "rollout_log_prob",
        "response_mask",
        "rollout_is",
        "rollout_is_threshold",
        "rollout_is_batch_normalize",
        "rollout_rs",
        "rollout_rs_threshold",
    ],
    "compute_offpolicy_metrics": ["old_log_prob", "rollout_log_prob", "response_mask"],
    "compute_rollout_correction_and_add_to_batch": ["batch", "rollout_corr_config"],
    "compute_rollout_corr_metrics_from_logprobs": ["log_prob", "rollout_log_prob", "response_mask"],
    "apply_bypass_mode": ["batch", "rollout_corr_config", "policy_loss_config"],
}
UPSTREAM_RS_OPTIONS = {
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
}


def test_upstream_public_names_and_parameters():
    for name, params in UPSTREAM_PUBLIC.items():
        obj = getattr(helper, name)
        if params is not None:
            ours = list(inspect.signature(obj).parameters)
            assert ours[: len(params)] == params, name
            extra = [inspect.signature(obj).parameters[p] for p in ours[len(params) :]]
            assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extra), name
    assert helper.SAFETY_BOUND == 20.0
    assert helper.SUPPORTED_ROLLOUT_RS_OPTIONS == UPSTREAM_RS_OPTIONS
    assert helper.TOKEN_LEVEL_ROLLOUT_RS_OPTIONS == {"token_k1", "token_k2", "token_k3"}


# ------------------------------------------------------------------------------------------- IS weights
def test_token_weights_truncate_at_the_threshold():
    weights, metrics = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", 2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 1.0, 0.5], [1.0, 1.5, 0.0]]))
    assert not weights.requires_grad
    assert metrics["rollout_is_mean"] == pytest.approx(6.0 / 5)
    assert metrics["rollout_is_max"] == pytest.approx(2.0) and metrics["rollout_is_min"] == pytest.approx(0.5)
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # the raw 3 is above 2
    assert metrics["rollout_is_ratio_fraction_low"] == 0.0
    assert metrics["rollout_is_seq_mean"] == pytest.approx((3.5 / 3 + 2.5 / 2) / 2)
    assert metrics["rollout_is_seq_max_deviation"] == pytest.approx(0.25)
    ess = (6 / 5) ** 2 / ((4 + 1 + 0.25 + 1 + 2.25) / 5)
    assert metrics["rollout_is_eff_sample_size"] == pytest.approx(ess, rel=1e-5)
    assert "rollout_is_oob_ratio" not in metrics and "rollout_is_batch_norm_factor" not in metrics


def test_string_threshold_spellings():
    as_float, _ = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", 2.0)
    as_text, _ = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", " 2.0 ")
    torch.testing.assert_close(as_float, as_text)
    # IcePop: a lower_upper band zeroes the weights outside it instead of clipping them
    weights, metrics = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", "0.6_2.0")
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.5, 0.0]]))
    assert metrics["rollout_is_oob_ratio"] == pytest.approx(2 / 5)
    assert metrics["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 5)


def test_sequence_weights_and_batch_normalisation():
    weights, metrics = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "sequence", 1.2)
    torch.testing.assert_close(weights, torch.tensor([[1.2] * 3, [1.2, 1.2, 0.0]]))
    assert metrics["rollout_is_max"] == pytest.approx(1.5)  # from the unclamped log ratio
    assert metrics["rollout_is_ratio_fraction_high"] == 1.0
    weights, metrics = helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", 2.0, True)
    assert float((weights * MASK).sum() / MASK.sum()) == pytest.approx(1.0)
    assert metrics["rollout_is_batch_norm_factor"] == pytest.approx(6.0 / 5)
    assert metrics["rollout_is_mean"] == pytest.approx(6.0 / 5)  # reported before normalising


def test_weight_argument_errors():
    with pytest.raises(ValueError, match="rollout_is='geometric'"):
        helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "geometric")
    with pytest.raises(TypeError, match="rollout_is_threshold"):
        helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", True)
    with pytest.raises(ValueError, match="lower bound above upper"):
        helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", "3_2")
    with pytest.raises(ValueError, match="must be positive"):
        helper.compute_rollout_correction_weights(LOG_RATIO, MASK, "token", -1.0)


# -------------------------------------------------------------------------------------------- rejection
def _reference_keep(log_ratio, mask, option, lower, upper):
    """Loop reference: one statistic per token or per response, kept when inside [log lower, log upper] (ratio
    bands) or at most ``upper`` (k2/k3)."""
    ours = option in ("token", "sequence", "geometric")
    two_sided = ours or option.endswith("k1")
    aggregate = {"sequence": "seq_sum", "geometric": "seq_mean"}.get(option, option.rsplit("_", 1)[0])
    keep = torch.zeros_like(mask)
    for i in range(mask.shape[0]):
        cols = [j for j in range(mask.shape[1]) if mask[i, j]]
        lr = {j: float(log_ratio[i, j]) for j in cols}
        if ours:
            stat = dict(lr)  # log r
        else:
            kind = option[-2:]
            stat = {j: {"k1": -x, "k2": 0.5 * x**2, "k3": math.exp(x) - 1 - x}[kind] for j, x in lr.items()}
        values = list(stat.values())
        seq = {"seq_sum": sum(values), "seq_mean": sum(values) / len(values), "seq_max": max(values)}.get(aggregate)
        for j in cols:
            value = stat[j] if seq is None else seq
            ok = math.log(lower) <= value <= math.log(upper) if two_sided else value <= upper
            keep[i, j] = float(ok)
    return keep


def _drifted(rows: int = 8, cols: int = 6, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, cols, generator=gen, dtype=torch.float64)
    rollout = old + 0.4 * torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask = torch.ones(rows, cols, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[5, 1:] = 0
    return old, rollout, mask


@pytest.mark.parametrize(
    "option, spec, lower, upper",
    [
        ("token_k1", "0.7_1.6", 0.7, 1.6),
        ("seq_sum_k1", 1.8, 1 / 1.8, 1.8),
        ("seq_mean_k1", "0.8_1.3", 0.8, 1.3),
        ("token_k2", 0.05, None, 0.05),
        ("token_k3", 0.05, None, 0.05),
        ("seq_sum_k2", 0.2, None, 0.2),
        ("seq_sum_k3", "0.2", None, 0.2),
        ("seq_mean_k2", 0.04, None, 0.04),
        ("seq_mean_k3", 0.04, None, 0.04),
        ("seq_max_k2", 0.1, None, 0.1),
        ("seq_max_k3", 0.1, None, 0.1),
        ("token", "0.7_1.6", 0.7, 1.6),
        ("sequence", 1.8, 1 / 1.8, 1.8),
        ("geometric", "0.8_1.3", 0.8, 1.3),
    ],
)
def test_every_rejection_option_matches_a_loop_reference(option, spec, lower, upper):
    old, rollout, mask = _drifted()
    kept, metrics = helper.compute_rollout_rejection_mask(old - rollout, mask, option, spec)
    expected = _reference_keep(old - rollout, mask, option, lower, upper)
    torch.testing.assert_close(kept, expected)
    assert 0 < kept.sum() < mask.sum(), "the case should reject some tokens and keep others"
    assert metrics[f"rollout_rs_{option}_masked_fraction"] == pytest.approx(1 - float(kept.sum() / mask.sum()))
    assert metrics["rollout_rs_masked_fraction"] == metrics[f"rollout_rs_{option}_masked_fraction"]
    for suffix in ("mean", "max", "min", "std", "fraction_high", "fraction_low", "seq_mean", "seq_masked_fraction"):
        assert f"rollout_rs_{option}_{suffix}" in metrics


def test_k1_bands_the_inverse_ratio_and_ours_the_ratio():
    # verl's token_k1 bands pi_rollout / pi_train = [1/3, 1, 2 | 1, 2/3]; ours bands r = [3, 1, 0.5 | 1, 1.5]
    kept, metrics = helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k1", "0.4_1.6")
    assert kept.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert metrics["rollout_rs_token_k1_mean"] == pytest.approx(-(math.log(3) + math.log(0.5) + math.log(1.5)) / 5)
    assert metrics["rollout_rs_token_k1_max"] == pytest.approx(math.log(2))
    assert metrics["rollout_rs_token_k1_fraction_high"] == pytest.approx(1 / 5)
    assert metrics["rollout_rs_token_k1_fraction_low"] == pytest.approx(1 / 5)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(0.5)
    kept, _ = helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token", "0.4_1.6")
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    # a symmetric band is the same either way
    for ours, theirs in (("token", "token_k1"), ("sequence", "seq_sum_k1"), ("geometric", "seq_mean_k1")):
        old, rollout, mask = _drifted()
        a, _ = helper.compute_rollout_rejection_mask(old - rollout, mask, ours, 1.3)
        b, _ = helper.compute_rollout_rejection_mask(old - rollout, mask, theirs, 1.3)
        torch.testing.assert_close(a, b)


def test_options_combine_and_the_veto_drops_responses():
    kept, metrics = helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k1,seq_mean_k2", "1.9,0.1")
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]  # token_k1 drops 1/3 and 2, seq_mean_k2 row 0
    assert metrics["rollout_rs_token_k1_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["rollout_rs_seq_mean_k2_masked_fraction"] == pytest.approx(3 / 5)
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(3 / 5)
    kept, metrics = helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, None, rollout_token_veto_threshold=0.6)
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]  # r = 0.5 < 0.6 vetoes row 0
    assert metrics["rollout_rs_token_veto_seq_masked_fraction"] == pytest.approx(0.5)


def test_rejection_argument_errors():
    with pytest.raises(ValueError, match="token_k9"):
        helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k9", 2.0)
    with pytest.raises(ValueError, match="one upper bound"):
        helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k2", "0.1_0.3")
    with pytest.raises(ValueError, match="one per option"):
        helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k1,token_k2", "2,0.1,3")
    with pytest.raises(ValueError, match="rollout_rs_threshold must be set"):
        helper.compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k1", None)
    empty, metrics = helper.compute_rollout_rejection_mask(torch.zeros(0, 3), torch.zeros(0, 3), "token_k1", 2.0)
    assert empty.shape == (0, 3) and metrics == {}


# -------------------------------------------------------------------------------------------- pipeline
def test_offpolicy_metrics():
    metrics = helper.compute_offpolicy_metrics(OLD, ROLLOUT, MASK)
    assert metrics["kl"] == pytest.approx(-(math.log(3) + math.log(0.5) + math.log(1.5)) / 5)
    assert metrics["chi2_token"] == pytest.approx((9 + 1 + 0.25 + 1 + 2.25) / 5 - 1)
    assert metrics["chi2_seq"] == pytest.approx(1.5**2 - 1)
    assert metrics["rollout_ppl"] == pytest.approx(1.0)
    expected = {"training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "ppl_ratio"}
    assert expected | {"log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min"} <= set(metrics)
    assert set(helper.compute_offpolicy_metrics(OLD, None, MASK)) == {"training_ppl", "training_log_ppl"}
    prefixed = helper.compute_rollout_corr_metrics_from_logprobs(OLD, ROLLOUT, MASK)
    assert prefixed == {f"rollout_corr/{key}": value for key, value in metrics.items()}


def test_correction_and_rejection_mask_prefixes_everything():
    proto, kept, metrics = helper.compute_rollout_correction_and_rejection_mask(
        OLD,
        ROLLOUT,
        MASK,
        rollout_is="token",
        rollout_is_threshold=2.0,
        rollout_rs="token_k1",
        rollout_rs_threshold=2.5,
    )
    torch.testing.assert_close(proto.batch["rollout_is_weights"], torch.tensor([[2.0, 1.0, 0.5], [1.0, 1.5, 0.0]]))
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]  # pi_rollout / pi_train = 1/3 < 0.4
    assert all(key.startswith("rollout_corr/") for key in metrics)
    for key in ("rollout_is_mean", "rollout_rs_masked_fraction", "kl", "chi2_seq", "rollout_rs_token_k1_mean"):
        assert f"rollout_corr/{key}" in metrics
    proto, kept, metrics = helper.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK)
    assert proto is None and torch.equal(kept, MASK) and "rollout_corr/rollout_is_mean" not in metrics
    with pytest.raises(ValueError, match="same shape"):
        helper.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT[:, :2], MASK)


def _batch(old=OLD, rollout=ROLLOUT, mask=MASK):
    return DataProto.from_dict(
        {"old_log_probs": old.clone(), "rollout_log_probs": rollout.clone(), "response_mask": mask.clone()}
    )


def test_add_to_batch_writes_the_mask_and_the_weights():
    upstream_style = OmegaConf.create(
        {
            "rollout_is": "token",
            "rollout_is_threshold": "0.6_2.0",
            "rollout_rs": "token_k1",
            "rollout_rs_threshold": 2.5,
        }
    )
    batch, metrics = helper.compute_rollout_correction_and_add_to_batch(_batch(), upstream_style)
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.5, 0.0]]))
    assert batch.batch["response_mask"].tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert all(key.startswith("rollout_corr/") for key in metrics)
    batch, metrics = helper.compute_rollout_correction_and_add_to_batch(_batch(), RolloutCorrectionConfig())
    assert "rollout_is_weights" not in batch.batch.keys() and torch.equal(batch.batch["response_mask"], MASK)
    assert "rollout_corr/kl" in metrics
    no_rollout = DataProto.from_dict({"old_log_probs": OLD, "response_mask": MASK})
    with pytest.raises(KeyError, match="rollout_log_probs"):
        helper.compute_rollout_correction_and_add_to_batch(no_rollout, RolloutCorrectionConfig())


@pytest.mark.parametrize(
    "config",
    [
        RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1.3),
        RolloutCorrectionConfig(rollout_is="sequence", rollout_is_threshold=1.3),
        RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1.3, rollout_is_batch_normalize=True),
        RolloutCorrectionConfig(rollout_is="sequence", rollout_is_threshold=5.0, rollout_is_batch_normalize=True),
        RolloutCorrectionConfig(rollout_rs="token", rollout_rs_threshold=1.4, rollout_rs_threshold_lower=0.8),
        RolloutCorrectionConfig(rollout_rs="sequence", rollout_rs_threshold=1.6),
        RolloutCorrectionConfig(rollout_rs="geometric", rollout_rs_threshold=1.15),
        RolloutCorrectionConfig(rollout_token_veto_threshold=0.6),
        RolloutCorrectionConfig(rollout_rs="token", rollout_rs_threshold=1.4, rollout_token_veto_threshold=0.5),
    ],
)
def test_agrees_with_apply_rollout_correction(config):
    old, rollout, mask = _drifted()
    ours = _batch(old, rollout, mask)
    apply_rollout_correction(ours, config)
    theirs, _ = helper.compute_rollout_correction_and_add_to_batch(_batch(old, rollout, mask), config)
    torch.testing.assert_close(theirs.batch["response_mask"], ours.batch["response_mask"])
    assert 0 < ours.batch["response_mask"].sum() <= mask.sum()
    if config.rollout_is:
        torch.testing.assert_close(theirs.batch["rollout_is_weights"], ours.batch["rollout_is_weights"])
    else:
        assert "rollout_is_weights" not in theirs.batch.keys()


# --------------------------------------------------------------------------------------- the typed config
VERL_SPELLINGS = {
    "rollout_is": "token",
    "rollout_is_threshold": "0.6_2.0",
    "rollout_rs": "token_k1, seq_mean_k3",
    "rollout_rs_threshold": "0.4_1.6,0.5",
}


@pytest.mark.parametrize(
    "make",
    [
        lambda: OmegaConf.create(VERL_SPELLINGS),
        lambda: dict(VERL_SPELLINGS),
        lambda: RolloutCorrectionConfig(**VERL_SPELLINGS),
    ],
    ids=["DictConfig", "dict", "RolloutCorrectionConfig"],
)
def test_add_to_batch_reads_verl_spellings_from_every_form_of_the_config(make):
    batch, metrics = helper.compute_rollout_correction_and_add_to_batch(_batch(), make())
    # IcePop zeroes the weights outside [0.6, 2]; token_k1 drops r = 3 and 0.5, seq_mean_k3 keeps both rows
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.5, 0.0]]))
    assert batch.batch["response_mask"].tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert "rollout_corr/rollout_rs_token_k1_masked_fraction" in metrics
    assert "rollout_corr/rollout_rs_seq_mean_k3_masked_fraction" in metrics


def test_the_config_keeps_verl_spellings_and_reads_one_band_of_ours_into_two_numbers():
    verl_style = as_rollout_correction_config(OmegaConf.create(VERL_SPELLINGS))
    assert (verl_style.rollout_is_threshold, verl_style.rollout_rs_threshold) == ("0.6_2.0", "0.4_1.6,0.5")
    assert verl_style.rollout_rs_threshold_lower is None and verl_style.enabled
    # one two-sided option: the band becomes the upper and lower numbers the trainer's correction reads
    band = RolloutCorrectionConfig(rollout_rs="token", rollout_rs_threshold="0.7_1.6")
    assert (band.rollout_rs_threshold, band.rollout_rs_threshold_lower) == (1.6, 0.7)
    text = RolloutCorrectionConfig(rollout_rs="geometric", rollout_rs_threshold="1.25")
    assert (text.rollout_rs_threshold, text.rollout_rs_threshold_lower) == (1.25, 0.8)
    # verl's k1 options keep the threshold as verl spells it (the helper reads it; a lone u means 1/u_u)
    k1 = RolloutCorrectionConfig(rollout_rs="seq_sum_k1", rollout_rs_threshold="0.7_1.6")
    assert (k1.rollout_rs_threshold, k1.rollout_rs_threshold_lower) == ("0.7_1.6", None)
    lone = RolloutCorrectionConfig(rollout_rs="seq_sum_k1", rollout_rs_threshold=2)
    assert (lone.rollout_rs_threshold, lone.rollout_rs_threshold_lower) == (2, None)
    # ... unless rollout_rs_threshold_lower gives the lower bound: then the two numbers, joined for the helper
    joined = RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold="1.6", rollout_rs_threshold_lower=0.7)
    assert (joined.rollout_rs_threshold, joined.rollout_rs_threshold_lower) == (1.6, 0.7)
    same, _ = helper.compute_rollout_correction_and_add_to_batch(_batch(), joined)
    as_band, _ = helper.compute_rollout_correction_and_add_to_batch(
        _batch(), RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold="0.7_1.6")
    )
    assert torch.equal(same.batch["response_mask"], as_band.batch["response_mask"])
    old, rollout, mask = _drifted()
    ours = _batch(old, rollout, mask)
    apply_rollout_correction(ours, band)
    theirs, _ = helper.compute_rollout_correction_and_add_to_batch(_batch(old, rollout, mask), band)
    torch.testing.assert_close(theirs.batch["response_mask"], ours.batch["response_mask"])


@pytest.mark.parametrize(
    "block, message",
    [
        ({"rollout_rs_treshold": 2.0}, r"rollout_rs_treshold: unknown key for RolloutCorrectionConfig \(did you mean"),
        ({"rollout_rs": "token_k9", "rollout_rs_threshold": 2.0}, r"rollout_rs: rollout_rs options \['token_k9'\]"),
        ({"rollout_rs": "token_k2", "rollout_rs_threshold": "0.1_0.3"}, r"rollout_rs_threshold: .*one upper bound"),
        ({"rollout_rs": "token_k1,token_k2", "rollout_rs_threshold": "2,0.1,3"}, r"rollout_rs_threshold: .*per option"),
        ({"rollout_rs": "token_k1"}, r"rollout_rs_threshold: must be set when rollout_rs='token_k1'"),
        ({"rollout_is_threshold": "3_2"}, r"rollout_is_threshold: .*lower bound above upper bound"),
        ({"rollout_is_threshold": True}, r"rollout_is_threshold: expected str \| float, got True"),
        (
            {"rollout_rs": "token", "rollout_rs_threshold": "0.5_2", "rollout_rs_threshold_lower": 0.4},
            r"rollout_rs_threshold_lower: is set twice",
        ),
        (
            {"rollout_rs": "token,sequence", "rollout_rs_threshold": 2.0, "rollout_rs_threshold_lower": 0.4},
            r"rollout_rs_threshold_lower: applies to one two-sided rollout_rs option",
        ),
    ],
)
def test_config_errors_name_the_key(block, message):
    with pytest.raises(ConfigError, match=r"^algorithm\.rollout_correction\." + message):
        helper.compute_rollout_correction_and_add_to_batch(_batch(), block)


def test_weights_differ_from_apply_rollout_correction_only_on_rejected_tokens():
    # verl computes the weights over the incoming mask; apply_rollout_correction zeroes them where it rejected
    old, rollout, mask = _drifted()
    config = RolloutCorrectionConfig(rollout_is="token", rollout_rs="token", rollout_rs_threshold=1.4)
    ours = _batch(old, rollout, mask)
    apply_rollout_correction(ours, config)
    theirs, _ = helper.compute_rollout_correction_and_add_to_batch(_batch(old, rollout, mask), config)
    kept = ours.batch["response_mask"]
    torch.testing.assert_close(theirs.batch["rollout_is_weights"] * kept, ours.batch["rollout_is_weights"])


# ------------------------------------------------------------------------------------------------ presets
# verl 0.9.1's RolloutCorrectionConfig presets (verl/trainer/config/algorithm.py), with its defaults
GEO = "0.999_1.001"
PRESETS = {  # name: its parameters, in order, and their defaults
    "decoupled_token_is": {"threshold": 2.0},
    "decoupled_seq_is": {"threshold": 2.0},
    "decoupled_token_icepop": {"threshold": 5.0, "threshold_lower": 0.5},
    "decoupled_seq_is_rs": {"is_threshold": 2.0, "rs_threshold": "0.5_2.0"},
    "decoupled_geo_rs": {"rs_threshold": GEO},
    "bypass_ppo_clip": {},
    "bypass_ppo_clip_geo_rs": {"rs_threshold": GEO},
    "bypass_ppo_clip_k3_rs": {"rs_threshold": 0.01},
    "bypass_pg_is": {"threshold": 2.0},
    "bypass_pg_token_icepop": {"threshold": 5.0, "threshold_lower": 0.5},
    "bypass_pg_geo_rs": {"rs_threshold": GEO},
    "decoupled_geo_rs_seq_tis": {"is_threshold": 2.0, "rs_threshold": GEO},
    "decoupled_geo_rs_token_tis": {"is_threshold": 2.0, "rs_threshold": GEO},
    "bypass_pg_geo_rs_seq_tis": {"is_threshold": 2.0, "rs_threshold": GEO},
    "bypass_pg_geo_rs_token_tis": {"is_threshold": 2.0, "rs_threshold": GEO},
    "decoupled_k3_rs": {"rs_threshold": 0.01},
    "decoupled_k3_rs_seq_tis": {"is_threshold": 2.0, "rs_threshold": 0.01},
    "decoupled_k3_rs_token_tis": {"is_threshold": 2.0, "rs_threshold": 0.01},
    "disabled": {},
}
FIELDS = ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold", "bypass_mode", "loss_type")


@pytest.mark.parametrize(
    "preset, args, expected",
    [
        ("decoupled_token_is", (), ("token", 2.0, None, None, False, "ppo_clip")),
        ("decoupled_seq_is", (3.0,), ("sequence", 3.0, None, None, False, "ppo_clip")),
        ("decoupled_token_icepop", (), ("token", "0.5_5.0", None, None, False, "ppo_clip")),
        ("decoupled_seq_is_rs", (), ("sequence", 2.0, "seq_sum_k1", "0.5_2.0", False, "ppo_clip")),
        ("decoupled_geo_rs", (), (None, 2.0, "seq_mean_k1", "0.999_1.001", False, "ppo_clip")),
        ("decoupled_k3_rs_token_tis", (), ("token", 2.0, "seq_mean_k3", 0.01, False, "ppo_clip")),
        ("bypass_ppo_clip", (), (None, 2.0, None, None, True, "ppo_clip")),
        ("bypass_ppo_clip_k3_rs", (), (None, 2.0, "seq_mean_k3", 0.01, True, "ppo_clip")),
        ("bypass_pg_is", (), ("sequence", 2.0, None, None, True, "reinforce")),
        ("bypass_pg_token_icepop", (4.0, 0.25), ("token", "0.25_4.0", None, None, True, "reinforce")),
        ("bypass_pg_geo_rs_seq_tis", (), ("sequence", 2.0, "seq_mean_k1", "0.999_1.001", True, "reinforce")),
        ("disabled", (), (None, 2.0, None, None, False, "ppo_clip")),
    ],
)
def test_presets_give_verls_field_values(preset, args, expected):
    config = getattr(RolloutCorrectionConfig, preset)(*args)
    assert type(config) is RolloutCorrectionConfig
    assert tuple(getattr(config, name) for name in FIELDS) == expected
    assert config.rollout_rs_threshold_lower is None and config.rollout_token_veto_threshold is None


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_has_verls_parameters_and_runs_in_the_trainer(preset):
    parameters = inspect.signature(getattr(RolloutCorrectionConfig, preset)).parameters.values()
    assert [(parameter.name, parameter.default) for parameter in parameters] == list(PRESETS[preset].items())
    config = getattr(RolloutCorrectionConfig, preset)()
    old, rollout, mask = _drifted()
    if config.bypass_mode:
        actor = {"clip_ratio": 0.2, "policy_loss": helper.bypass_policy_loss_settings(config)}
        loss, metrics = get_policy_loss_fn("bypass_mode")(rollout, old, torch.ones_like(old), mask, "token-mean", actor)
        assert torch.isfinite(loss) and "rollout_corr/mismatch_kl_k1" in metrics
    else:
        batch = _batch(old, rollout, mask)
        metrics = apply_rollout_correction(batch, config)
        assert ("rollout_is_weights" in batch.batch.keys()) == (config.rollout_is is not None)
        assert batch.batch["response_mask"].sum() <= mask.sum()
        if config.rollout_rs is not None:
            assert f"rollout_corr/rollout_rs_{config.rollout_rs}_masked_fraction" in metrics


# ------------------------------------------------------------------------------------------- bypass mode
def test_apply_bypass_mode_swaps_log_probs_and_routes_the_loss():
    corr = RolloutCorrectionConfig(
        bypass_mode=True, loss_type="reinforce", rollout_is="token", rollout_is_threshold=1.5
    )
    actor = OmegaConf.create({"clip_ratio": 0.2, "policy_loss": {"loss_mode": "vanilla"}})
    OmegaConf.set_struct(actor, True)
    batch = _batch(old=torch.zeros(2, 3), rollout=OLD)
    assert helper.apply_bypass_mode(batch, corr, actor.policy_loss) is None
    assert torch.equal(batch.batch["old_log_probs"], OLD)
    assert actor.policy_loss.loss_mode == "bypass_mode"
    # what RayPPOTrainer._route_bypass_loss stores: the correction as a plain dict
    assert OmegaConf.to_container(actor.policy_loss.rollout_correction) == corr.to_dict()
    # the routed loss runs on the swapped batch
    new = OLD + 0.1
    loss, metrics = get_policy_loss_fn(actor.policy_loss.loss_mode)(
        batch.batch["old_log_probs"], new, torch.ones(2, 3), MASK, "token-mean", actor
    )
    assert torch.isfinite(loss) and "rollout_corr/is_weight_mean" in metrics


def test_apply_bypass_mode_errors():
    with pytest.raises(ValueError, match="calculate_log_probs"):
        helper.apply_bypass_mode(DataProto.from_dict({"old_log_probs": OLD}), RolloutCorrectionConfig())
    frozen = PolicyLossConfig()
    with pytest.raises(TypeError, match="dataclasses.replace"):
        helper.apply_bypass_mode(_batch(), RolloutCorrectionConfig(), frozen)
    routed = dataclasses.replace(frozen, **helper.bypass_policy_loss_settings(RolloutCorrectionConfig()))
    assert routed.loss_mode == "bypass_mode" and routed.rollout_correction == RolloutCorrectionConfig().to_dict()
    with pytest.raises(ValueError, match="rollout correction config"):
        helper.apply_bypass_mode(_batch(), None, {"loss_mode": "vanilla"})
    batch = _batch()
    helper.apply_bypass_mode(batch)  # no loss config: only the log-prob swap
    assert torch.equal(batch.batch["old_log_probs"], ROLLOUT)
