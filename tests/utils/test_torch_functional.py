import math

import pytest
import torch
from tensordict import TensorDict

from verl.utils import torch_functional as vF
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device, is_cuda_available


def _ref_logprobs(logits, labels):
    return torch.log_softmax(logits.double(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------- logprobs_from_logits


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 64])
def test_logprobs_match_log_softmax_and_gradients(chunk_size):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (3, 5))
    out = vF.logprobs_from_logits(logits, labels, inplace_backward=True, chunk_size=chunk_size)
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = _ref_logprobs(ref_logits, labels)
    torch.testing.assert_close(out, ref)
    weights = torch.randn(3, 5, dtype=torch.float64)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


def test_logprobs_gradcheck():
    torch.manual_seed(1)
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 6, (4,))
    assert torch.autograd.gradcheck(lambda x: vF.logprobs_from_logits(x, labels, chunk_size=3), (logits,))


def test_logprobs_non_contiguous_slice_matches_reference():
    # logits[:, :-1] cannot be flattened as a view: the per-slice fallback path must agree too.
    torch.manual_seed(2)
    full = torch.randn(3, 8, 13, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 13, (3, 7))
    out = vF.logprobs_from_logits(full[:, :-1], labels, chunk_size=4)
    out.sum().backward()
    ref_full = full.detach().clone().requires_grad_(True)
    _ref_logprobs(ref_full[:, :-1], labels).sum().backward()
    torch.testing.assert_close(out, _ref_logprobs(full.detach()[:, :-1], labels))
    torch.testing.assert_close(full.grad, ref_full.grad)
    assert full.grad[:, -1].abs().sum() == 0


def test_logprobs_bf16_computed_in_float32():
    torch.manual_seed(3)
    logits = (torch.randn(16, 1000) * 8).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 1000, (16,))
    out = vF.logprobs_from_logits(logits, labels)
    assert out.dtype == torch.float32
    ref = torch.log_softmax(logits.detach().float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    # Same inputs, float32 math: agreement to float32 precision, far tighter than bf16 (~1e-2) would give.
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    ref_grad = torch.nn.functional.one_hot(labels, 1000).float() - torch.softmax(logits.detach().float(), -1)
    torch.testing.assert_close(logits.grad.float(), ref_grad, atol=1e-2, rtol=1e-2)


def test_logprobs_large_vocab_chunked_equals_unchunked():
    # Large vocab with tiny chunks (one row at a time) must give the same values and gradients
    # as a single chunk: the row-chunked kernel never needs the full [N, V] float32 copy.
    torch.manual_seed(4)
    vocab = 32_000
    logits = torch.randn(6, vocab, requires_grad=True)
    labels = torch.randint(0, vocab, (6,))
    one_row = vF.logprobs_from_logits(logits, labels, chunk_size=1)
    g1 = torch.autograd.grad(one_row.sum(), logits)[0]
    whole = vF.logprobs_from_logits(logits, labels, chunk_size=6)
    g2 = torch.autograd.grad(whole.sum(), logits)[0]
    torch.testing.assert_close(one_row, whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(one_row.double(), _ref_logprobs(logits.detach(), labels), atol=1e-5, rtol=1e-6)


def _saved_bytes_besides(logits, fn):
    """Bytes autograd keeps for backward, not counting ``logits`` itself (which the caller already holds)."""
    extra = []

    def pack(t):
        if t.untyped_storage().data_ptr() != logits.untyped_storage().data_ptr():
            extra.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(extra)


def test_backward_keeps_per_row_stats_not_full_vocab_copies():
    rows, vocab = 64, 4096
    logits = torch.randn(rows, vocab).bfloat16().requires_grad_(True)
    labels = torch.randint(0, vocab, (rows,))
    full_fp32_copy = rows * vocab * 4
    for fn in (lambda: vF.logprobs_from_logits(logits, labels), lambda: vF.entropy_from_logits(logits)):
        saved = _saved_bytes_besides(logits, fn)
        assert 0 < saved <= rows * 8 * 3  # a few numbers per row (labels, log-normaliser, ...)
    # The naive formulation keeps a float32 [rows, vocab] tensor alive until backward.
    naive = _saved_bytes_besides(logits, lambda: torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None]))
    assert naive >= full_fp32_copy


def test_logprobs_default_chunk_bounds_rows():
    assert vF._rows_per_chunk(150_000, None) * 150_000 <= vF._CHUNK_ELEMENTS
    assert vF._rows_per_chunk(10, None) > 1
    with pytest.raises(ValueError, match="chunk_size"):
        vF._rows_per_chunk(10, 0)


def test_logprobs_extreme_logits_are_finite():
    logits = torch.tensor([[1e4, -1e4, 0.0], [-float("inf"), 0.0, 0.0]])
    out = vF.logprobs_from_logits(logits, torch.tensor([0, 1]))
    torch.testing.assert_close(out, torch.tensor([0.0, math.log(0.5)]))


def test_logprobs_bad_inputs_name_the_shapes():
    with pytest.raises(ValueError, match=r"labels shape \(2, 3\)"):
        vF.logprobs_from_logits(torch.randn(2, 4, 5), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="floating point"):
        vF.logprobs_from_logits(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    with pytest.raises(TypeError, match="integer token ids"):
        vF.logprobs_from_logits(torch.randn(2, 5), torch.zeros(2))


# ---------------------------------------------------------------- entropy


def test_entropy_matches_definition_and_is_stable():
    torch.manual_seed(5)
    logits = torch.randn(4, 9, dtype=torch.float64)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(vF.entropy_from_logits(logits), -(p * p.log()).sum(-1))
    # Uniform over 4 tokens -> log 4, even with huge offsets; a -inf (masked) token drops out.
    torch.testing.assert_close(vF.entropy_from_logits(torch.full((1, 4), 1e5)), torch.tensor([math.log(4)]))
    masked = torch.tensor([[0.0, 0.0, -float("inf")]])
    torch.testing.assert_close(vF.entropy_from_logits(masked), torch.tensor([math.log(2)]))
    assert vF.entropy_from_logits(torch.randn(2, 3).bfloat16()).dtype == torch.float32


@pytest.mark.parametrize("chunk_size", [None, 1, 2])
def test_entropy_gradcheck(chunk_size):
    torch.manual_seed(6)
    logits = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: vF.entropy_from_logits(x, chunk_size=chunk_size), (logits,))


def test_entropy_gradient_with_masked_token_and_non_contiguous_input():
    torch.manual_seed(7)
    full = torch.randn(2, 5, 6, dtype=torch.float64)
    full[0, 0, 3] = -float("inf")
    full.requires_grad_(True)
    ent = vF.entropy_from_logits(full[:, :-1], chunk_size=3)
    ent.sum().backward()
    # Reference: a finite but hopeless logit has probability exactly 0 in float64 and zero gradient.
    ref_full = full.detach().clone().nan_to_num(neginf=-1e4).requires_grad_(True)
    ref_logits = ref_full[:, :-1]
    ref = -(torch.softmax(ref_logits, -1) * torch.log_softmax(ref_logits, -1)).sum(-1)
    ref.sum().backward()
    torch.testing.assert_close(ent, ref.detach())
    torch.testing.assert_close(full.grad, ref_full.grad)
    assert torch.isfinite(full.grad).all()


def test_entropy_large_vocab_chunked_equals_unchunked_and_bf16():
    torch.manual_seed(8)
    logits = (torch.randn(6, 32_000) * 4).bfloat16().requires_grad_(True)
    one_row = vF.entropy_from_logits(logits, chunk_size=1)
    (g1,) = torch.autograd.grad(one_row.sum(), logits)
    whole = vF.entropy_from_logits(logits, chunk_size=6)
    (g2,) = torch.autograd.grad(whole.sum(), logits)
    assert one_row.dtype == torch.float32 and g1.dtype == torch.bfloat16
    # Same float32 math per row; only the vectorised reduction order may differ (last-ulp noise).
    torch.testing.assert_close(one_row, whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-6)
    p = torch.softmax(logits.detach().double(), -1)
    torch.testing.assert_close(one_row.double(), -(p * p.log()).sum(-1), atol=1e-4, rtol=1e-5)


def test_entropy_chunking_matches_and_validates():
    torch.manual_seed(9)
    logits = torch.randn(10, 6)
    torch.testing.assert_close(
        vF.entropy_from_logits_with_chunking(logits, chunk_size=3), vF.entropy_from_logits(logits)
    )
    with pytest.raises(ValueError, match=r"\[T, V\]"):
        vF.entropy_from_logits_with_chunking(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="chunk_size must be a positive number of rows, got 0"):
        vF.entropy_from_logits_with_chunking(logits, chunk_size=0)
    with pytest.raises(TypeError, match="floating-point"):
        vF.entropy_from_logits(torch.zeros(2, 3, dtype=torch.long))


# ---------------------------------------------------------------- masked statistics


def test_masked_sum_mean_ignore_nan_in_padding():
    values = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    assert vF.masked_sum(values, mask).item() == 13.0
    torch.testing.assert_close(vF.masked_mean(values, mask), torch.tensor(13.0 / 4))
    torch.testing.assert_close(vF.masked_mean(values, mask, axis=-1), torch.tensor([1.5, 5.0]))
    torch.testing.assert_close(vF.masked_sum(values, mask, axis=0), torch.tensor([5.0, 2.0, 6.0]))
    assert vF.masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_masked_sum_shape_mismatch():
    with pytest.raises(ValueError, match=r"values shape \(2, 3\) != mask shape \(2, 2\)"):
        vF.masked_sum(torch.zeros(2, 3), torch.ones(2, 2))


def test_masked_var_matches_torch_var():
    torch.manual_seed(8)
    values = torch.randn(5, 6, dtype=torch.float64)
    mask = (torch.rand(5, 6) > 0.4).long()
    mask[0, 0] = mask[0, 1] = 1
    kept = values[mask.bool()]
    torch.testing.assert_close(vF.masked_var(values, mask), kept.var(unbiased=True))
    torch.testing.assert_close(vF.masked_var(values, mask, unbiased=False), kept.var(unbiased=False))


@pytest.mark.parametrize("count", [0, 1])
def test_masked_var_unbiased_needs_two_elements(count):
    mask = torch.zeros(4)
    mask[:count] = 1
    with pytest.raises(ValueError, match=f"at least 2 unmasked elements, the mask has {count}"):
        vF.masked_var(torch.randn(4), mask)
    assert vF.masked_var(torch.randn(4), torch.tensor([1.0, 0, 0, 0]), unbiased=False).item() == 0.0


def test_masked_whiten():
    torch.manual_seed(9)
    values = torch.randn(4, 8, dtype=torch.float64) * 3 + 5
    mask = torch.ones(4, 8)
    mask[:, 6:] = 0
    white = vF.masked_whiten(values, mask)
    kept = white[mask.bool()]
    torch.testing.assert_close(kept.mean(), torch.tensor(0.0, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(kept.var(), torch.tensor(1.0, dtype=torch.float64), atol=1e-6, rtol=0)
    unshifted = vF.masked_whiten(values, mask, shift_mean=False)
    torch.testing.assert_close(unshifted[mask.bool()].mean(), values[mask.bool()].mean())


# ---------------------------------------------------------------- masks and positions


def test_get_response_mask_single_and_multiple_eos():
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0], [5, 3, 6, 2, 0]])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    assert torch.equal(vF.get_response_mask(ids, eos_token=[2, 3]), expected)
    expected_single = expected.clone()
    expected_single[3] = torch.tensor([1, 1, 1, 1, 0])
    mask = vF.get_response_mask(ids, eos_token=2, dtype=torch.float32)
    assert mask.dtype == torch.float32
    assert torch.equal(mask, expected_single.float())
    assert torch.equal(vF.get_eos_mask(ids, 2), expected_single)


def test_get_response_mask_bad_inputs():
    with pytest.raises(ValueError, match=r"\[batch, response_len\]"):
        vF.get_response_mask(torch.tensor([1, 2, 3]), 2)
    with pytest.raises(ValueError, match="empty list"):
        vF.get_response_mask(torch.tensor([[1, 2]]), [])


def test_compute_position_id_with_mask_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]])
    assert torch.equal(vF.compute_position_id_with_mask(mask), expected)


# ---------------------------------------------------------------- padding


def test_pad_sequence_to_length():
    x = torch.tensor([[1, 2], [3, 4]])
    assert torch.equal(vF.pad_sequence_to_length(x, 4, 0), torch.tensor([[1, 2, 0, 0], [3, 4, 0, 0]]))
    assert torch.equal(vF.pad_sequence_to_length(x, 3, 9, left_pad=True), torch.tensor([[9, 1, 2], [9, 3, 4]]))
    assert vF.pad_sequence_to_length(x, 2, 0) is x


def test_pad_2d_list_to_length():
    rows = [[1, 2, 3], [4], []]
    assert torch.equal(vF.pad_2d_list_to_length(rows, 0), torch.tensor([[1, 2, 3], [4, 0, 0], [0, 0, 0]]))
    out = vF.pad_2d_list_to_length(rows, 7, max_length=4, left_pad=True)
    assert torch.equal(out, torch.tensor([[7, 1, 2, 3], [7, 7, 7, 4], [7, 7, 7, 7]]))
    assert vF.pad_2d_list_to_length([], 0).shape == (0, 0)
    with pytest.raises(ValueError, match="row 0 has 3 tokens, more than max_length=2"):
        vF.pad_2d_list_to_length(rows, 0, max_length=2)


def test_postprocess_data_pads_and_truncates():
    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.ones_like(ids)
    out_ids, out_mask = vF.postprocess_data(ids, mask, 6, pad_token_id=0, left_pad=True)
    assert out_ids.tolist() == [[0, 0, 1, 2, 3, 4]] and out_mask.tolist() == [[0, 0, 1, 1, 1, 1]]
    assert vF.postprocess_data(ids, mask, 2, 0, truncation="left")[0].tolist() == [[3, 4]]
    assert vF.postprocess_data(ids, mask, 2, 0, truncation="right")[0].tolist() == [[1, 2]]
    assert vF.postprocess_data(ids, mask, 3, 0, truncation="middle")[0].tolist() == [[1, 3, 4]]
    with pytest.raises(ValueError, match="length 4 is longer than max_length=2"):
        vF.postprocess_data(ids, mask, 2, 0)
    with pytest.raises(ValueError, match="truncation must be one of"):
        vF.postprocess_data(ids, mask, 2, 0, truncation="bogus")


def test_tokenize_and_postprocess_data_with_a_stub_tokenizer():
    calls = []

    def tokenizer(text, return_tensors, add_special_tokens):
        calls.append((text, return_tensors, add_special_tokens))
        ids = torch.tensor([[ord(c) for c in text]])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    ids, mask = vF.tokenize_and_postprocess_data("abc", tokenizer, 5, pad_token_id=0)
    assert calls == [("abc", "pt", False)]
    assert ids.tolist() == [[0, 0, 97, 98, 99]] and mask.tolist() == [[0, 0, 1, 1, 1]]
    with pytest.raises(ValueError, match="length 3 is longer than max_length=2"):
        vF.tokenize_and_postprocess_data("abc", tokenizer, 2, pad_token_id=0)


def test_clip_by_value_tensor_and_scalar_bounds():
    x = torch.tensor([-3.0, 0.5, 3.0])
    assert torch.equal(vF.clip_by_value(x, -1.0, 1.0), torch.tensor([-1.0, 0.5, 1.0]))
    lo, hi = torch.tensor([-4.0, 1.0, 0.0]), torch.tensor([-2.0, 2.0, 2.5])
    assert torch.equal(vF.clip_by_value(x, lo, hi), torch.tensor([-3.0, 1.0, 2.5]))


def test_split_dict_tensor_into_batches():
    td = TensorDict({"a": torch.arange(5)}, batch_size=[5])
    parts = vF.split_dict_tensor_into_batches(td, 2)
    assert [p["a"].tolist() for p in parts] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="batch_size must be positive"):
        vF.split_dict_tensor_into_batches(td, 0)


# ---------------------------------------------------------------- schedules


def _lrs(make, steps):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_constant_schedule_with_warmup():
    lrs = _lrs(lambda o: vF.get_constant_schedule_with_warmup(o, 4), 7)
    assert lrs == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


def test_cosine_schedule_with_warmup_decays_to_min_ratio():
    lrs = _lrs(lambda o: vF.get_cosine_schedule_with_warmup(o, 2, 12, min_lr_ratio=0.1), 13)
    assert lrs[:3] == pytest.approx([0.0, 0.5, 1.0])
    assert all(a >= b for a, b in zip(lrs[2:], lrs[3:]))
    assert lrs[7] == pytest.approx(0.1 + 0.9 * 0.5)
    assert lrs[12] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="min_lr_ratio"):
        _lrs(lambda o: vF.get_cosine_schedule_with_warmup(o, 0, 10, min_lr_ratio=1.5), 1)


# ---------------------------------------------------------------- device helpers


def test_device_helpers_agree_with_torch():
    assert is_cuda_available == torch.cuda.is_available()
    assert get_device_name() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert get_nccl_backend() == ("nccl" if torch.cuda.is_available() else "gloo")
    assert get_torch_device() == getattr(torch, get_device_name())


@pytest.mark.gpu
def test_cuda_peak_memory_stays_below_a_full_vocab_float32_copy():
    device = torch.device("cuda")
    rows, vocab = 4096, 32_000
    logits = torch.randn(rows, vocab, device=device).bfloat16().requires_grad_(True)
    labels = torch.randint(0, vocab, (rows,), device=device)
    full_fp32_copy = rows * vocab * 4
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = vF.logprobs_from_logits(logits, labels, chunk_size=64)
    out.sum().backward()  # the bf16 gradient itself (half a float32 copy) is unavoidable
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak < 0.7 * full_fp32_copy, (peak, full_fp32_copy)
    ref = torch.log_softmax(logits.detach().float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_wsd_schedule_warms_up_holds_then_decays():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = vF.get_wsd_schedule_with_warmup(
        optimizer, num_warmup_steps=2, num_training_steps=12, min_lr_ratio=0.1, stable_ratio=0.5
    )
    factors = [schedule.lr_lambdas[0](step) for step in range(14)]
    assert factors[:2] == [0.0, 0.5]
    assert factors[2:7] == [1.0] * 5  # half of the 10 post-warm-up steps are stable
    assert factors[7] == pytest.approx(1.0) and all(a >= b for a, b in zip(factors[7:12], factors[8:12]))
    assert factors[12:] == [0.1, 0.1]


def test_response_log_probs_padded_and_packed_agree():
    torch.manual_seed(0)
    ids = torch.randint(0, 11, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    logits = torch.randn(2, 6, 11)
    padded = vF.log_probs_from_logits_response(ids, logits, response_length=3)
    reference = torch.log_softmax(logits[:, 2:5], -1).gather(-1, ids[:, 3:].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(padded, reference, atol=1e-6)
    assert torch.allclose(vF.logprobs_from_logits_naive(logits, ids), vF.logprobs_from_logits(logits, ids), atol=1e-6)
    assert torch.equal(vF.gather_from_labels(logits, ids), logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1))
    keep = mask.flatten().bool()
    packed_logits = logits.reshape(12, 11)[keep]
    packed = vF.log_probs_from_logits_response_rmpad(ids, mask, packed_logits, response_length=3)
    assert torch.allclose(packed, padded, atol=1e-6)
    indices = torch.nonzero(keep).flatten()
    packed_all = vF.log_probs_from_logits_all_rmpad(
        ids.flatten()[keep].unsqueeze(0), packed_logits, indices, batch_size=2, seqlen=6, response_length=3
    )
    assert torch.allclose(packed_all, padded, atol=1e-6)


def test_remove_pad_token_grad_norm_and_device_check():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 1]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert vF.remove_pad_token(ids, mask) == [[5, 6], [7, 8, 9, 1]]
    layer = torch.nn.Linear(2, 1)
    layer.weight.grad = torch.tensor([[3.0, 4.0]])
    assert vF.compute_grad_norm(layer) == pytest.approx(25.0)  # squared, as verl defines it
    with vF.check_device_is_available():
        pass
