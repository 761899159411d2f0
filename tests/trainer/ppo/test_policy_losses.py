"""Policy losses: values, gradients and metrics against float64 per-token loop references."""

from __future__ import annotations

import math
import random

import pytest
import torch

from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss
from verl.workers.config.actor import ActorConfig

AGG_MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def make_inputs(seed: int, n: int = 6, r: int = 8, spread: float = 0.6):
    """Log-probs whose ratios straddle the clip bounds, with a few exploded ratios for the dual clip."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    old = -torch.rand(n, r, generator=gen, dtype=torch.float64) * 3
    new = old + torch.randn(n, r, generator=gen, dtype=torch.float64) * spread
    new[0, :3] += 2.0  # ratio ~ e^2 > clip_ratio_c
    adv = torch.randn(n, r, generator=gen, dtype=torch.float64)
    adv[0, :3] = -torch.rand(3, generator=gen, dtype=torch.float64) - 0.1  # negative: dual-clip territory
    mask = torch.zeros(n, r, dtype=torch.float64)
    for i in range(n):
        mask[i, : rng.randint(1, r)] = 1
    mask[0, :4] = 1
    mask[1, 1] = 0  # interior hole
    mask[-1] = 0  # a fully masked row must not dilute sequence means
    weights = torch.rand(n, r, generator=gen, dtype=torch.float64) * 1.5 + 0.25
    return old, new, adv, mask, weights


def ref_agg_weights(mask: list[list[float]], mode: str, scale: float | None = None) -> list[list[float]]:
    """d(aggregated loss) / d(token loss) for each position, from the definitions of the modes."""
    n_tokens = sum(sum(row) for row in mask)
    live_rows = [i for i, row in enumerate(mask) if sum(row) > 0]
    out = [[0.0] * len(row) for row in mask]
    for i, row in enumerate(mask):
        for t, m in enumerate(row):
            if not m:
                continue
            if mode == "token-mean":
                out[i][t] = 1.0 / n_tokens
            elif mode == "seq-mean-token-sum":
                out[i][t] = 1.0 / len(live_rows)
            elif mode == "seq-mean-token-mean":
                out[i][t] = 1.0 / (sum(row) * len(live_rows))
            else:
                out[i][t] = 1.0 / ((scale or len(row)) * len(live_rows))
    return out


def ref_loss_and_grad(per_token, mask, mode, is_weights=None):
    """Aggregate per-token (loss, dloss/dlogp) pairs with the mode weights (and IS weights)."""
    w = ref_agg_weights(mask, mode)
    loss, grad = 0.0, [[0.0] * len(row) for row in mask]
    for i, row in enumerate(per_token):
        for t, (value, dvalue) in enumerate(row):
            scale = w[i][t] * (is_weights[i][t] if is_weights is not None else 1.0)
            loss += scale * value
            grad[i][t] = scale * dvalue
    return loss, grad


def run_loss(name, old, new, adv, mask, mode, config, weights=None):
    logp = new.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=weights,
    )
    loss.backward()
    return loss.item(), logp.grad, metrics


def check(loss, grad, ref_loss, ref_grad):
    assert loss == pytest.approx(ref_loss, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(grad, torch.tensor(ref_grad, dtype=torch.float64), rtol=1e-9, atol=1e-12)


CFG_FIELDS = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
CFG = ActorConfig(**CFG_FIELDS)


# ----------------------------------------------------------------------------- vanilla


def ref_vanilla_token(old, new, a, low, high, c):
    r = math.exp(new - old)
    l1, l2 = -a * r, -a * min(max(r, 1 - low), 1 + high)
    worst = max(l1, l2)
    clipped = l2 > l1
    if a < 0 and worst > -a * c:
        return (-a * c, 0.0), clipped, True
    return (worst, 0.0 if clipped else -a * r), clipped, False


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("use_is", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_vanilla_ppo_matches_reference(mode, use_is, seed):
    old, new, adv, mask, weights = make_inputs(seed)
    loss, grad, metrics = run_loss("vanilla", old, new, adv, mask, mode, CFG, weights if use_is else None)
    o, nw, a, m, w = (x.tolist() for x in (old, new, adv, mask, weights))
    per_token, n_clip, n_lower, n_tok, kl = [], 0, 0, 0, 0.0
    for i in range(len(o)):
        row = []
        for t in range(len(o[i])):
            pair, clipped, lower = ref_vanilla_token(o[i][t], nw[i][t], a[i][t], 0.2, 0.28, 3.0)
            row.append(pair)
            if m[i][t]:
                n_tok += 1
                n_clip += clipped
                n_lower += lower
                kl += o[i][t] - nw[i][t]
        per_token.append(row)
    ref_loss, ref_grad = ref_loss_and_grad(per_token, m, mode, w if use_is else None)
    check(loss, grad, ref_loss, ref_grad)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(n_clip / n_tok)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(n_lower / n_tok)
    assert metrics["actor/ppo_kl"] == pytest.approx(kl / n_tok)
    assert n_clip > 0 and n_lower > 0  # the data exercises both clips


def test_vanilla_clip_higher_is_asymmetric():
    old = torch.zeros(1, 2, dtype=torch.float64)
    new = torch.log(torch.tensor([[1.25, 1.25]], dtype=torch.float64))  # ratio 1.25
    adv = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.float64)
    sym = ActorConfig(clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=3.0)
    _, grad_sym, m_sym = run_loss("vanilla", old, new, adv, mask, "token-mean", sym)
    _, grad_high, m_high = run_loss("vanilla", old, new, adv, mask, "token-mean", CFG)
    assert m_sym["actor/pg_clipfrac"] == 1.0 and torch.all(grad_sym == 0)  # 1.25 > 1.2: clipped
    assert m_high["actor/pg_clipfrac"] == 0.0 and torch.all(grad_high < 0)  # 1.25 < 1.28: still learns


def test_vanilla_on_policy_is_minus_mean_advantage():
    old, _, adv, mask, _ = make_inputs(3)
    loss, _, metrics = run_loss("vanilla", old, old.clone(), adv, mask, "token-mean", None)
    assert loss == pytest.approx(-(adv * mask).sum().item() / mask.sum().item())
    assert metrics == {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}


def test_config_may_be_a_mapping_and_defaults_apply():
    old, new, adv, mask, _ = make_inputs(4)
    as_obj, _, _ = run_loss("vanilla", old, new, adv, mask, "token-mean", CFG)
    as_dict, _, _ = run_loss("vanilla", old, new, adv, mask, "token-mean", dict(CFG_FIELDS))
    assert as_obj == as_dict
    default, _, _ = run_loss("vanilla", old, new, adv, mask, "token-mean", None)
    explicit, _, _ = run_loss("vanilla", old, new, adv, mask, "token-mean", {"clip_ratio": 0.2, "clip_ratio_c": 3.0})
    assert default == explicit


def test_bad_policy_loss_inputs_are_named():
    old, new, adv, mask, weights = make_inputs(0)
    with pytest.raises(ValueError, match=r"actor.clip_ratio_c: must be > 1"):
        run_loss("vanilla", old, new, adv, mask, "token-mean", {"clip_ratio_c": 0.5})
    with pytest.raises(ValueError, match=r"rollout_is_weights shape \(6, 7\)"):
        run_loss("vanilla", old, new, adv, mask, "token-mean", None, weights[:, :-1])
    with pytest.raises(ValueError, match="Unknown loss_agg_mode 'seq-sum'"):
        run_loss("vanilla", old, new, adv, mask, "seq-sum", None)
    with pytest.raises(ValueError, match="must have the same shape"):
        run_loss("vanilla", old[:, :-1], new, adv, mask, "token-mean", None)


# ----------------------------------------------------------------------------- gspo


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("bounds", [(0.2, 0.28), (3e-4, 4e-4)])
@pytest.mark.parametrize("use_is", [False, True])
def test_gspo_matches_reference(mode, bounds, use_is):
    old, new, adv, mask, weights = make_inputs(5, spread=0.15)
    cfg = {"clip_ratio_low": bounds[0], "clip_ratio_high": bounds[1]}
    loss, grad, metrics = run_loss("gspo", old, new, adv, mask, mode, cfg, weights if use_is else None)
    o, nw, a, m, w = (x.tolist() for x in (old, new, adv, mask, weights))
    per_token, n_clip, n_tok = [], 0, 0
    for i in range(len(o)):
        length = sum(m[i])
        mean_log_ratio = sum(nw[i][t] - o[i][t] for t in range(len(o[i])) if m[i][t]) / max(length, 1)
        s = math.exp(mean_log_ratio)
        row = []
        for t in range(len(o[i])):
            l1, l2 = -a[i][t] * s, -a[i][t] * min(max(s, 1 - bounds[0]), 1 + bounds[1])
            # the token's gradient flows through its own log-prob with the sequence ratio as scale
            row.append((max(l1, l2), 0.0 if l2 > l1 else -a[i][t] * s))
            if m[i][t]:
                n_tok += 1
                n_clip += l2 > l1
        per_token.append(row)
    ref_loss, ref_grad = ref_loss_and_grad(per_token, m, mode, w if use_is else None)
    check(loss, grad, ref_loss, ref_grad)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(n_clip / n_tok)


# ----------------------------------------------------------------------------- gpg, cispo


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("use_is", [False, True])
def test_gpg_matches_reference(mode, use_is):
    old, new, adv, mask, weights = make_inputs(6)
    loss, grad, metrics = run_loss("gpg", old, new, adv, mask, mode, None, weights if use_is else None)
    nw, a, m, w = (x.tolist() for x in (new, adv, mask, weights))
    per_token = [[(-a[i][t] * nw[i][t], -a[i][t]) for t in range(len(nw[i]))] for i in range(len(nw))]
    check(loss, grad, *ref_loss_and_grad(per_token, m, mode, w if use_is else None))
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/pg_clipfrac_lower"] == 0.0


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("use_is", [False, True])
def test_cispo_matches_reference(mode, use_is):
    old, new, adv, mask, weights = make_inputs(7)
    loss, grad, metrics = run_loss("cispo", old, new, adv, mask, mode, CFG, weights if use_is else None)
    o, nw, a, m, w = (x.tolist() for x in (old, new, adv, mask, weights))
    per_token, above, below, n_tok = [], 0, 0, 0
    for i in range(len(o)):
        row = []
        for t in range(len(o[i])):
            r = math.exp(nw[i][t] - o[i][t])
            clipped = min(max(r, 0.8), 1.28)
            row.append((-clipped * a[i][t] * nw[i][t], -clipped * a[i][t]))  # weight carries no gradient
            if m[i][t]:
                n_tok += 1
                above += r > 1.28
                below += r < 0.8
        per_token.append(row)
    check(loss, grad, *ref_loss_and_grad(per_token, m, mode, w if use_is else None))
    assert metrics["actor/pg_clipfrac"] == pytest.approx(above / n_tok)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(below / n_tok)
    assert above > 0 and below > 0
    assert torch.all(grad[mask.bool()] != 0)  # unlike PPO, no token's gradient is silenced


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_errors():
    assert {"vanilla", "gspo", "gpg", "cispo"} <= set(core_algos.POLICY_LOSS_REGISTRY)
    with pytest.raises(ValueError, match=r"Unknown policy loss 'nope'.*registered: \[.*'cispo'.*'vanilla'"):
        get_policy_loss_fn("nope")
    vanilla = get_policy_loss_fn("vanilla")
    assert register_policy_loss("vanilla")(vanilla) is vanilla

    def impostor(*args, **kwargs):
        raise AssertionError

    with pytest.raises(ValueError, match="'vanilla' is already registered"):
        register_policy_loss("vanilla")(impostor)
    assert get_policy_loss_fn("vanilla") is vanilla


def test_custom_policy_loss_can_register():
    @register_policy_loss("test_zero_loss")
    def zero(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        return (log_prob * 0).sum(), {}

    try:
        assert get_policy_loss_fn("test_zero_loss") is zero
    finally:
        core_algos.POLICY_LOSS_REGISTRY.pop("test_zero_loss")
