"""DataParallelPPOActor on the tiny Llama checkpoint: log-probs, micro-batching, padding removal, PPO updates."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, masked_mean
from verl.workers.actor.batching import length_order
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.actor.token_forward import shared_left_padding
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

PROMPT_LEN = 6
RESPONSE_LEN = 5


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny matmuls run ~15x slower when torch's threads fight other processes for 2 cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()


@pytest.fixture
def model(base_model):
    return copy.deepcopy(base_model)


def make_config(**overrides) -> ActorConfig:
    fields = {
        "ppo_mini_batch_size": 8,
        "ppo_micro_batch_size_per_gpu": 2,
        "ppo_epochs": 1,
        "grad_clip": 1.0,
        "log_prob_micro_batch_size_per_gpu": 4,
    }
    fields.update(overrides)
    return ActorConfig(**fields)


def make_batch(vocab_size: int, n: int = 8, seed: int = 0, pad_id: int = 0, temperature: float = 1.0) -> DataProto:
    """Left-padded prompts and right-padded responses of varied lengths (pads are ``pad_id``)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.full((n, PROMPT_LEN), pad_id)
    responses = torch.full((n, RESPONSE_LEN), pad_id)
    prompt_mask = torch.zeros(n, PROMPT_LEN, dtype=torch.long)
    response_mask = torch.zeros(n, RESPONSE_LEN, dtype=torch.long)
    for i in range(n):
        p = int(torch.randint(1, PROMPT_LEN + 1, (1,), generator=gen))
        r = RESPONSE_LEN if i == 0 else int(torch.randint(1, RESPONSE_LEN + 1, (1,), generator=gen))
        prompts[i, PROMPT_LEN - p :] = torch.randint(1, vocab_size, (p,), generator=gen)
        responses[i, :r] = torch.randint(1, vocab_size, (r,), generator=gen)
        prompt_mask[i, PROMPT_LEN - p :] = 1
        response_mask[i, :r] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        "advantages": torch.randn(n, RESPONSE_LEN, generator=gen) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": temperature, "micro_batch_size": 4})


def with_old_log_probs(actor: DataParallelPPOActor, data: DataProto) -> DataProto:
    log_probs, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = log_probs
    return data


def direct_log_probs(model, data: DataProto, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: one full padded forward, logits of positions P-1 .. P+R-2 scored against the responses."""
    b = data.batch
    with torch.no_grad():
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    logits = out.logits
    logits = logits[:, PROMPT_LEN - 1 : PROMPT_LEN + RESPONSE_LEN - 1].float() / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    log_probs = log_softmax.gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    return log_probs, entropy


def params_of(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def max_param_change(before: list[torch.Tensor], module) -> float:
    return max((a - b).abs().max().item() for a, b in zip(before, module.parameters()))


def masked_close(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor, atol: float = 1e-5) -> bool:
    return bool(((a - b).abs() * mask).max() <= atol)


# ---------------------------------------------------------------------------- compute_log_prob


def test_log_prob_matches_direct_forward(model):
    data = make_batch(model.config.vocab_size, temperature=0.7)
    actor = DataParallelPPOActor(make_config(), model)
    log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    expected_lp, expected_ent = direct_log_probs(model, data, temperature=0.7)
    assert log_probs.shape == entropy.shape == (8, RESPONSE_LEN)
    torch.testing.assert_close(log_probs, expected_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, expected_ent, atol=1e-5, rtol=0)
    # The temperature is applied: at T=1 the log-probs differ.
    data.meta_info["temperature"] = 1.0
    assert not torch.allclose(actor.compute_log_prob(data)[0], log_probs, atol=1e-3)


def test_shared_left_padding_is_cut_before_the_forward(model):
    """Prompts far shorter than the padded width: the model sees only the columns some row uses, same results."""
    data = make_batch(model.config.vocab_size, temperature=0.8)
    mask = data.batch["attention_mask"]
    mask[:, :4] = 0  # at most 2 real prompt tokens per row, so the first 4 columns are padding everywhere
    data.batch["position_ids"] = compute_position_id_with_mask(mask)
    data.batch["input_ids"][:, :4] = 0
    data.meta_info["micro_batch_size"] = 8
    widths: list[int] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        log_probs, entropy = DataParallelPPOActor(make_config(), model).compute_log_prob(data, calculate_entropy=True)
    finally:
        hook.remove()
    assert widths == [PROMPT_LEN + RESPONSE_LEN - 4]
    expected_lp, expected_ent = direct_log_probs(model, data, temperature=0.8)
    response_mask = data.batch["response_mask"]
    assert masked_close(log_probs, expected_lp, response_mask) and masked_close(entropy, expected_ent, response_mask)


def test_shared_left_padding_keeps_one_prompt_column():
    from verl.workers.actor.token_forward import shared_left_padding

    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]])
    assert shared_left_padding(mask, response_length=3) == 2
    # Responses never lose the column that scores their first token, even when the prompts are empty.
    assert shared_left_padding(torch.zeros(2, 6, dtype=torch.long), response_length=3) == 2
    assert shared_left_padding(torch.ones(2, 6, dtype=torch.long), response_length=3) == 0


def test_log_prob_without_entropy_returns_none(model):
    actor = DataParallelPPOActor(make_config(), model)
    _, entropy = actor.compute_log_prob(make_batch(model.config.vocab_size))
    assert entropy is None


@pytest.mark.parametrize(
    "meta",
    [
        {"micro_batch_size": 1},
        {"micro_batch_size": 3},
        {"use_dynamic_bsz": True, "max_token_len": PROMPT_LEN + RESPONSE_LEN},
        {"use_dynamic_bsz": True, "max_token_len": 40},
    ],
)
def test_micro_batching_does_not_change_log_probs(model, meta):
    data = make_batch(model.config.vocab_size)
    actor = DataParallelPPOActor(make_config(), model)
    reference, ref_entropy = actor.compute_log_prob(data, calculate_entropy=True)
    data.meta_info.update({"micro_batch_size": 8, **meta})
    log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    mask = data.batch["response_mask"].bool()  # padded slots are unspecified
    torch.testing.assert_close(log_probs[mask], reference[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy[mask], ref_entropy[mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_short_micro_batches_skip_the_response_padding_past_their_longest_answer(model, remove_padding):
    """A micro-batch whose answers all end early runs the model over its own longest answer, not the padded
    width, with the same log-probs on every real token and zeros on the padding it skipped."""
    data = make_batch(model.config.vocab_size)
    short = data.select_idxs([1, 4, 7])  # answers of 2, 4 and 4 tokens out of 5
    longest = int(short.batch["response_mask"].sum(-1).max())
    assert longest < RESPONSE_LEN
    actor = DataParallelPPOActor(make_config(use_remove_padding=remove_padding), model)
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    try:
        log_probs, entropy = actor.compute_log_prob(short, calculate_entropy=True)
    finally:
        hook.remove()
    padded = DataParallelPPOActor(make_config(use_remove_padding=False), model)
    full = padded._forward_unfused(short.batch, 1.0, calculate_entropy=True, entropy_grad=False)
    mask = short.batch["response_mask"].bool()
    torch.testing.assert_close(log_probs[mask], full[0][mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy[mask], full[1][mask], atol=1e-5, rtol=0)
    assert not log_probs[:, longest:].any() and not entropy[:, longest:].any()
    if remove_padding:
        assert widths == [int(short.batch["attention_mask"].sum())]
    else:
        prompt_width = PROMPT_LEN - shared_left_padding(short.batch["attention_mask"], RESPONSE_LEN)
        assert widths == [prompt_width + longest]


@pytest.mark.parametrize(
    "meta", [{"micro_batch_size": 8}, {"micro_batch_size": 3}, {"use_dynamic_bsz": True, "max_token_len": 24}]
)
def test_remove_padding_equals_padded(model, meta):
    data = make_batch(model.config.vocab_size, temperature=0.9)
    data.meta_info.update(meta)
    padded = DataParallelPPOActor(make_config(), model)
    packed = DataParallelPPOActor(make_config(), model)
    packed.use_remove_padding = True
    lp_pad, ent_pad = padded.compute_log_prob(data, calculate_entropy=True)
    lp_rm, ent_rm = packed.compute_log_prob(data, calculate_entropy=True)
    mask = data.batch["response_mask"]
    assert masked_close(lp_rm, lp_pad, mask) and masked_close(ent_rm, ent_pad, mask)
    # The packed forward really packs: response slots that are padding are never computed and read as 0.
    assert (lp_rm[mask == 0] == 0).sum() > 0


@pytest.mark.parametrize("remove_padding", [False, True])
def test_output_head_runs_on_response_slots_only(model, remove_padding):
    """The LM head sees one hidden state per response slot, never the prompt's, and the log-probs are unchanged."""
    data = make_batch(model.config.vocab_size, temperature=0.9)
    data.meta_info["micro_batch_size"] = 8
    head_inputs: list[tuple[int, ...]] = []
    hook = model.lm_head.register_forward_pre_hook(lambda _m, args: head_inputs.append(tuple(args[0].shape[:2])))
    actor = DataParallelPPOActor(make_config(), model)
    actor.use_remove_padding = remove_padding
    try:
        log_probs, _ = actor.compute_log_prob(data)
    finally:
        hook.remove()
    assert head_inputs == [(1, 8 * RESPONSE_LEN) if remove_padding else (8, RESPONSE_LEN)]
    expected, _ = direct_log_probs(model, data, temperature=0.9)
    assert masked_close(log_probs, expected, data.batch["response_mask"])


class _PlainForward(torch.nn.Module):
    """A module whose forward has no ``logits_to_keep``, like a user's own model: it outputs every position."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache
        )


class _IgnoresKeep(_PlainForward):
    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        return super().forward(input_ids, attention_mask, position_ids, use_cache)


@pytest.mark.parametrize("remove_padding", [False, True])
def test_modules_without_logits_to_keep_score_every_position(model, remove_padding):
    data = make_batch(model.config.vocab_size, temperature=0.9)
    actor = DataParallelPPOActor(make_config(), _PlainForward(model))
    actor.use_remove_padding = remove_padding
    log_probs, _ = actor.compute_log_prob(data)
    expected, _ = direct_log_probs(model, data, temperature=0.9)
    assert masked_close(log_probs, expected, data.batch["response_mask"])


def test_a_module_that_ignores_logits_to_keep_is_named(model):
    actor = DataParallelPPOActor(make_config(), _IgnoresKeep(model))
    with pytest.raises(ValueError, match="_IgnoresKeep takes logits_to_keep but returned"):
        actor.compute_log_prob(make_batch(model.config.vocab_size))


def test_remove_padding_reads_the_config_flag(model):
    assert DataParallelPPOActor(make_config(), model).use_remove_padding is False
    assert DataParallelPPOActor(make_config(use_remove_padding=True), model).use_remove_padding is True


def test_remove_padding_rejects_position_ids_that_do_not_restart(model):
    data = make_batch(model.config.vocab_size)
    mask = data.batch["attention_mask"]
    data.batch["position_ids"] = torch.cumsum(mask.flatten(), 0).view_as(mask) * mask
    actor = DataParallelPPOActor(make_config(), model)
    actor.use_remove_padding = True
    with pytest.raises(ValueError, match="use_remove_padding needs position_ids"):
        actor.compute_log_prob(data)


def test_compute_log_prob_errors_name_the_culprit(model):
    actor = DataParallelPPOActor(make_config(log_prob_micro_batch_size_per_gpu=None), model)
    data = make_batch(model.config.vocab_size)
    del data.meta_info["temperature"]
    with pytest.raises(KeyError, match=r"meta_info\['temperature'\]"):
        actor.compute_log_prob(data)
    data.meta_info["temperature"] = 0.0
    with pytest.raises(ValueError, match="temperature.*positive"):
        actor.compute_log_prob(data)
    data.meta_info["temperature"] = 1.0
    del data.meta_info["micro_batch_size"]
    with pytest.raises(ValueError, match=r"meta_info\['micro_batch_size'\] must be a positive integer"):
        actor.compute_log_prob(data)
    data.meta_info["micro_batch_size"] = 2
    data.batch = data.batch.exclude("position_ids")
    with pytest.raises(KeyError, match="position_ids"):
        actor.compute_log_prob(data)


# ---------------------------------------------------------------------------- update_policy


def test_update_changes_params_and_reduces_loss(model):
    """Positive advantages on every token: the PPO objective must improve epoch after epoch."""
    data = make_batch(model.config.vocab_size)
    data.batch["advantages"] = data.batch["response_mask"].float()
    config = make_config(ppo_epochs=4, clip_ratio=10.0)
    actor = DataParallelPPOActor(config, model, torch.optim.Adam(model.parameters(), lr=1e-3))
    with_old_log_probs(actor, data)
    before = params_of(model)
    metrics = actor.update_policy(data)
    assert max_param_change(before, model) > 0
    per_epoch = torch.tensor(metrics["actor/pg_loss"]).view(4, -1).mean(dim=1)  # 4 micro-batches per epoch
    assert all(later < earlier for earlier, later in zip(per_epoch, per_epoch[1:])), per_epoch
    new_log_probs, _ = actor.compute_log_prob(data)
    mask = data.batch["response_mask"]
    assert masked_mean(new_log_probs, mask) > masked_mean(data.batch["old_log_probs"], mask)
    assert len(metrics["actor/grad_norm"]) == 4 and metrics["actor/step_skipped"] == [0.0] * 4
    assert metrics["actor/lr"] == [pytest.approx(1e-3)]
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy"):
        assert len(metrics[key]) == 16, key


def test_on_policy_update_needs_no_old_log_probs(model):
    """One epoch over one mini-batch: the ratio is 1 by construction, so old_log_probs are not read."""
    data = make_batch(model.config.vocab_size)
    actor = DataParallelPPOActor(make_config(), model, torch.optim.SGD(model.parameters(), lr=0.1))
    metrics = actor.update_policy(data)
    assert metrics["actor/pg_clipfrac"] == [0.0] * 4 and metrics["actor/ppo_kl"] == [0.0] * 4
    actor.config.ppo_mini_batch_size = 4
    with pytest.raises(KeyError, match="old_log_probs"):
        actor.update_policy(data)


def test_clipping_fires_with_two_epochs_of_two_mini_batches(model):
    data = make_batch(model.config.vocab_size, seed=3)
    data.batch["advantages"] = data.batch["advantages"].sign() * data.batch["response_mask"]
    config = make_config(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, ppo_epochs=2, clip_ratio=0.05)
    actor = DataParallelPPOActor(config, model, torch.optim.Adam(model.parameters(), lr=3e-2))
    with_old_log_probs(actor, data)
    metrics = actor.update_policy(data)
    assert len(metrics["actor/grad_norm"]) == 4  # 2 epochs x 2 mini-batches
    assert len(metrics["actor/pg_loss"]) == 8  # x 2 micro-batches each
    assert metrics["actor/pg_clipfrac"][:2] == [0.0, 0.0]  # the first mini-batch still sees the old policy
    assert max(metrics["actor/pg_clipfrac"]) > 0
    assert max(metrics["actor/ppo_kl"]) != 0


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gradient_accumulation_equivalence(base_model, loss_agg_mode):
    """Micro-batches of 2, of 8 and by a token budget give the same update (SGD: the step is the gradient)."""
    data = make_batch(base_model.config.vocab_size, seed=5)
    data.batch["old_log_probs"] = torch.zeros(8, RESPONSE_LEN)  # unused on-policy; keeps the batch realistic
    results = []
    for overrides in (
        {"ppo_micro_batch_size_per_gpu": 2},
        {"ppo_micro_batch_size_per_gpu": 8},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24},
    ):
        model = copy.deepcopy(base_model)
        config = make_config(grad_clip=1e6, loss_agg_mode=loss_agg_mode, **overrides)
        actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=1.0))
        metrics = actor.update_policy(data)
        results.append((metrics["actor/grad_norm"][0], torch.cat([p.detach().flatten() for p in model.parameters()])))
    (norm_a, params_a), (norm_b, params_b), (norm_c, params_c) = results
    assert norm_a == pytest.approx(norm_b, rel=1e-5) and norm_a == pytest.approx(norm_c, rel=1e-5)
    torch.testing.assert_close(params_a, params_b, atol=1e-6, rtol=0)
    torch.testing.assert_close(params_a, params_c, atol=1e-6, rtol=0)


def test_padded_update_cuts_its_micro_batches_in_length_order(model):
    """Fixed-size micro-batches of a padded update are cut from the rows in length order, so short answers share
    micro-batches and each forward stops at its own longest answer: fewer padded token slots than in batch order."""
    data = make_batch(model.config.vocab_size, n=8, seed=3)
    slots: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: slots.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    actor = DataParallelPPOActor(
        make_config(ppo_micro_batch_size_per_gpu=2), model, torch.optim.SGD(model.parameters())
    )
    try:
        actor.update_policy(data)
    finally:
        hook.remove()

    def padded_slots(rows: list[int]) -> int:
        mask = data.batch["attention_mask"][rows]
        longest = int(data.batch["response_mask"][rows].sum(-1).max())
        return len(rows) * (PROMPT_LEN - shared_left_padding(mask, RESPONSE_LEN) + longest)

    by_length = length_order(data.batch).tolist()
    assert sum(slots) == sum(padded_slots(by_length[i : i + 2]) for i in range(0, 8, 2))
    assert sum(slots) < sum(padded_slots(list(range(i, i + 2))) for i in range(0, 8, 2))


def test_nan_advantage_skips_the_step_and_the_run_continues(model, caplog):
    data = make_batch(model.config.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    actor = DataParallelPPOActor(make_config(), model, optimizer)
    bad = make_batch(model.config.vocab_size)
    bad.batch["advantages"][0, 0] = float("nan")  # a real response token (every row has one)
    before = params_of(model)
    with caplog.at_level("WARNING"):
        metrics = actor.update_policy(bad)
    assert math.isnan(metrics["actor/grad_norm"][0])
    assert metrics["actor/step_skipped"] == [1.0]
    assert "optimizer step skipped" in caplog.text
    assert max_param_change(before, model) == 0.0
    assert not optimizer.state  # the optimizer never saw the poisoned gradient
    assert all(p.grad is None for p in model.parameters())

    metrics = actor.update_policy(data)
    assert metrics["actor/step_skipped"] == [0.0] and math.isfinite(metrics["actor/grad_norm"][0])
    assert max_param_change(before, model) > 0
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_grad_clip_bounds_the_update(base_model):
    data = make_batch(base_model.config.vocab_size)
    steps = []
    for clip in (1e6, 1e-3):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(make_config(grad_clip=clip), model, torch.optim.SGD(model.parameters(), lr=1.0))
        before = params_of(model)
        norm = actor.update_policy(data)["actor/grad_norm"][0]
        delta = torch.cat([(p - b).flatten() for p, b in zip(model.parameters(), before)])
        steps.append((norm, delta.norm().item()))
    (raw_norm, raw_step), (clipped_norm, clipped_step) = steps
    assert raw_norm == pytest.approx(clipped_norm)  # the reported norm is the one before clipping
    assert raw_step == pytest.approx(raw_norm, rel=1e-4)
    assert clipped_step == pytest.approx(1e-3, rel=1e-3)


def test_kl_loss_pulls_towards_the_reference(model):
    data = make_batch(model.config.vocab_size)
    data.batch["advantages"] = torch.zeros(8, RESPONSE_LEN)
    config = make_config(use_kl_loss=True, kl_loss_coef=1.0, kl_loss_type="low_var_kl")
    actor = DataParallelPPOActor(config, model, torch.optim.Adam(model.parameters(), lr=3e-3))
    with_old_log_probs(actor, data)
    data.batch["ref_log_prob"] = data.batch["old_log_probs"] - 0.5
    kl = []
    for _ in range(4):
        metrics = actor.update_policy(data)
        kl.append(sum(metrics["actor/kl_loss"]) / len(metrics["actor/kl_loss"]))
    assert kl[0] > 0 and metrics["actor/kl_coef"] == [1.0] * 4
    assert all(later < earlier for earlier, later in zip(kl, kl[1:])), kl
    del data.batch["ref_log_prob"]
    with pytest.raises(KeyError, match="ref_log_prob"):
        actor.update_policy(data)


def test_rollout_is_weights_scale_the_policy_gradient(base_model):
    data = make_batch(base_model.config.vocab_size)
    norms = {}
    for weight in (0.0, 1.0, 2.0):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(make_config(grad_clip=1e6), model, torch.optim.SGD(model.parameters(), lr=0.1))
        data.batch["rollout_is_weights"] = torch.full((8, RESPONSE_LEN), weight)
        norms[weight] = actor.update_policy(data)["actor/grad_norm"][0]
    assert norms[0.0] == 0.0
    assert norms[2.0] == pytest.approx(2 * norms[1.0], rel=1e-5)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_rollout_correction_inside_the_update_equals_a_separate_pass(base_model, level):
    """On-policy, the update's own log-probs give the same weights, step and metrics as the trainer's old
    log-prob pass followed by apply_rollout_correction."""
    from omegaconf import OmegaConf

    from verl.trainer.ppo.rollout_corr import IN_UPDATE_KEY, apply_rollout_correction, in_update_spec

    correction = OmegaConf.create({"rollout_is": level, "rollout_is_threshold": 1.5})
    data = make_batch(base_model.config.vocab_size, seed=7)
    gen = torch.Generator().manual_seed(1)
    reference_actor = DataParallelPPOActor(make_config(), copy.deepcopy(base_model), None)
    current, _ = reference_actor.compute_log_prob(data)
    noise = (
        0.3 * torch.randn(current.shape, generator=gen)
        if level == "token"
        else 0.05 * torch.randn(current.shape, generator=gen)
    )
    data.batch["rollout_log_probs"] = (current + noise) * data.batch["response_mask"]
    results = []
    for in_update in (False, True):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(make_config(grad_clip=1e6), model, torch.optim.SGD(model.parameters(), lr=0.5))
        batch = DataProto.from_dict(tensors=dict(data.batch.items()), meta_info=dict(data.meta_info))
        if in_update:
            batch.meta_info[IN_UPDATE_KEY] = in_update_spec(correction)
            trainer_metrics = {}
        else:
            with_old_log_probs(actor, batch)
            trainer_metrics = apply_rollout_correction(batch, correction)
            assert "rollout_is_weights" in batch.batch.keys()
        metrics = actor.update_policy(batch)
        metrics.update({k: [v] for k, v in trainer_metrics.items()})
        results.append((metrics, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (separate, params_separate), (inside, params_inside) = results
    assert separate["actor/grad_norm"][0] == pytest.approx(inside["actor/grad_norm"][0], rel=1e-5)
    torch.testing.assert_close(params_inside, params_separate, atol=1e-6, rtol=0)
    for key in (
        "rollout_corr/mismatch_kl_k1",
        "rollout_corr/mismatch_kl_k3",
        "rollout_corr/ess",
        "rollout_corr/is_weight_mean",
        "rollout_corr/is_truncated_frac",
    ):
        assert inside[key][0] == pytest.approx(separate[key][0], rel=1e-4, abs=1e-6), key
    assert inside["rollout_corr/is_weight_mean"][0] != pytest.approx(1.0, abs=1e-3)  # the weights did something


def test_entropy_bonus_enters_the_gradient(base_model):
    data = make_batch(base_model.config.vocab_size)
    data.batch["advantages"] = torch.zeros(8, RESPONSE_LEN)
    norms = []
    for coeff in (0.0, 0.1):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(make_config(entropy_coeff=coeff), model, torch.optim.SGD(model.parameters(), lr=1))
        metrics = actor.update_policy(data)
        norms.append(metrics["actor/grad_norm"][0])
        assert all(e > 0 for e in metrics["actor/entropy"])
    assert norms[0] == 0.0 and norms[1] > 0


def test_policy_loss_comes_from_the_registry(base_model):
    data = make_batch(base_model.config.vocab_size)
    norms = []
    for mode in ("vanilla", "gpg"):
        model = copy.deepcopy(base_model)
        config = make_config(grad_clip=1e6, policy_loss=PolicyLossConfig(loss_mode=mode))
        actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.1))
        norms.append(actor.update_policy(data)["actor/grad_norm"][0])
    # On-policy (ratio 1) vanilla PPO and GPG (-A * log p) have the same gradient.
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)
    config = make_config(policy_loss=PolicyLossConfig(loss_mode="no-such-loss"))
    actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="no-such-loss"):
        actor.update_policy(data)


def test_a_recipe_loss_reads_global_batch_info_from_its_config(base_model, monkeypatch):
    """Recipes copy verl's losses, which aggregate with ``agg_loss(..., **config.global_batch_info)``."""
    from verl.trainer.ppo import core_algos

    seen = []

    def recipe_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **_):
        seen.append(dict(config.global_batch_info))
        pg_losses = -advantages * torch.exp(log_prob - old_log_prob)
        return core_algos.agg_loss(pg_losses, response_mask, loss_agg_mode, **config.global_batch_info), {}

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "test_recipe_loss", recipe_loss)
    data = make_batch(base_model.config.vocab_size)
    norms = []
    for mode, scale in (("vanilla", None), ("test_recipe_loss", None), ("test_recipe_loss", 2.0)):
        model = copy.deepcopy(base_model)
        loss = PolicyLossConfig(loss_mode=mode)
        config = make_config(grad_clip=1e6, policy_loss=loss, loss_scale_factor=scale)
        actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.1))
        norms.append(actor.update_policy(data)["actor/grad_norm"][0])
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)  # on-policy: the same gradient as vanilla PPO
    assert seen[0] == {} and seen[-1] == {"loss_scale_factor": 2.0}


def test_update_errors_name_the_culprit(model):
    data = make_batch(model.config.vocab_size)
    with pytest.raises(RuntimeError, match="no optimizer"):
        DataParallelPPOActor(make_config(), model).update_policy(data)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    actor = DataParallelPPOActor(make_config(ppo_micro_batch_size_per_gpu=None), model, optimizer)
    with pytest.raises(ValueError, match="actor.ppo_micro_batch_size_per_gpu must be a positive integer"):
        actor.update_policy(data)
    actor = DataParallelPPOActor(make_config(), model, optimizer)
    del data.batch["advantages"]
    with pytest.raises(KeyError, match="advantages"):
        actor.update_policy(data)


def test_update_with_remove_padding_equals_padded_update(base_model):
    data = make_batch(base_model.config.vocab_size, seed=7)
    flat = []
    for remove_padding in (False, True):
        model = copy.deepcopy(base_model)
        actor = DataParallelPPOActor(make_config(grad_clip=1e6), model, torch.optim.SGD(model.parameters(), lr=1.0))
        actor.use_remove_padding = remove_padding
        actor.update_policy(data)
        flat.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(flat[0], flat[1], atol=1e-5, rtol=0)


def test_shuffle_is_seeded_by_data_loader_seed(base_model):
    data = make_batch(base_model.config.vocab_size, seed=11)
    data.batch["old_log_probs"] = torch.zeros(8, RESPONSE_LEN)
    losses = {}
    for name, overrides in {
        "seed1": {"shuffle": True, "data_loader_seed": 1},
        "seed1_again": {"shuffle": True, "data_loader_seed": 1},
        "seed2": {"shuffle": True, "data_loader_seed": 2},
        "ordered": {"shuffle": False},
    }.items():
        model = copy.deepcopy(base_model)
        config = make_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=2, **overrides)
        actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.1))
        losses[name] = actor.update_policy(data)["actor/pg_loss"]
    assert losses["seed1"] == losses["seed1_again"]
    assert losses["seed1"] != losses["seed2"] and losses["seed1"] != losses["ordered"]


def test_responses_longer_than_the_sequence_are_rejected(model):
    data = make_batch(model.config.vocab_size)
    data.batch["responses"] = data.batch["input_ids"]
    with pytest.raises(ValueError, match="responses length"):
        DataParallelPPOActor(make_config(), model).compute_log_prob(data)
