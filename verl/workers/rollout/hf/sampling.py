"""Per-request sampling parameters and batched next-token sampling for rows with mixed parameters.

Rows of the running batch belong to different requests, each with its own temperature, top-k,
top-p and seed, so sampling is vectorised over rows with per-row parameter tensors.

Every sampled row draws one uniform number and takes the token where it falls in the row's cumulative distribution
(inverse CDF). A seeded request's number is a counter-based hash of ``(seed, position)``, so its draws depend only
on its seed and on how many tokens it has sampled so far, never on what else is in the batch or how a generator was
advanced; unseeded rows take theirs from the engine's generator. One number per row keeps sampling cheap at real
vocabulary sizes, where noise over the whole vocabulary (``torch.multinomial``, Gumbel-max) costs more than the
decode step itself on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["SamplingParams", "RowSamplingState", "sample_next_tokens", "seeded_row_uniform", "categorical_from_uniform"]

_MASK32 = 0xFFFFFFFF
_CDF_BLOCK = 512  # tokens per block of the two-level inverse CDF

_KNOWN_KEYS = {
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "stop_token_ids",
    "logprobs",
    "seed",
    "ignore_eos",
    "do_sample",
    "n",
    "repetition_penalty",
    "min_p",
    "detokenize",
}


@dataclass(frozen=True)
class SamplingParams:
    """Validated sampling parameters of one request."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False
    seed: int | None = None
    ignore_eos: bool = False
    greedy: bool = False

    @classmethod
    def from_dict(cls, params: dict[str, Any] | None, *, defaults: dict[str, Any], request_id: str) -> SamplingParams:
        """Parse the ``sampling_params`` dict of ``generate``; unknown or unsupported keys are errors.

        ``defaults`` fills keys the caller left out (from the rollout config: max_tokens, logprobs, ...).
        """
        params = dict(params or {})
        unknown = sorted(set(params) - _KNOWN_KEYS)
        if unknown:
            raise ValueError(
                f"request {request_id}: unknown sampling_params key(s) {unknown}; known: {sorted(_KNOWN_KEYS)}"
            )
        merged = {**defaults, **{k: v for k, v in params.items() if v is not None}}

        def fail(key: str, why: str) -> ValueError:
            return ValueError(f"request {request_id}: sampling_params[{key!r}]={merged.get(key)!r} {why}")

        if int(merged.get("n", 1)) != 1:
            raise fail("n", "is not supported: send n separate requests")
        if float(merged.get("repetition_penalty", 1.0)) != 1.0:
            raise fail("repetition_penalty", "is not supported by the hf engine (only 1.0)")
        if float(merged.get("min_p", 0.0)) != 0.0:
            raise fail("min_p", "is not supported by the hf engine (only 0.0)")
        temperature = float(merged.get("temperature", 1.0))
        if temperature < 0:
            raise fail("temperature", "must be >= 0")
        top_p = float(merged.get("top_p", 1.0))
        if not 0.0 < top_p <= 1.0:
            raise fail("top_p", "must be in (0, 1]")
        top_k = merged.get("top_k", -1)
        if isinstance(top_k, bool) or int(top_k) != top_k or top_k < -1:
            raise fail("top_k", "must be an integer >= -1 (-1 or 0 turn it off)")
        max_tokens = merged.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise fail("max_tokens", "must be an integer >= 1")
        stop = merged.get("stop_token_ids") or ()
        if isinstance(stop, int) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop):
            raise fail("stop_token_ids", "must be a list of integer token ids")
        seed = merged.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise fail("seed", "must be an integer or None")
        greedy = temperature == 0.0 or merged.get("do_sample", True) is False
        return cls(
            temperature=1.0 if greedy else temperature,
            top_p=top_p,
            top_k=0 if int(top_k) <= 0 else int(top_k),
            max_tokens=max_tokens,
            stop_token_ids=tuple(stop),
            logprobs=bool(merged.get("logprobs", False)),
            seed=seed,
            ignore_eos=bool(merged.get("ignore_eos", False)),
            greedy=greedy,
        )


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (two multiply-xorshift rounds) on int64 tensors holding values below 2**32.

    Products may pass 2**63 and wrap; only their low 32 bits are kept, which wrapping does not change.
    """
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def _row_keys(seeds: torch.Tensor) -> torch.Tensor:
    """One 32-bit key per row from its (up to 64-bit) seed."""
    return _mix32(_mix32(seeds & _MASK32) ^ _mix32((seeds >> 32) & _MASK32) ^ 0x68E31DA4)


def seeded_row_uniform(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One uniform number in (0, 1) per row, float64 with 53 random bits, a pure function of (row key, position)."""
    base = _mix32(keys ^ _mix32(positions * 0x9E3779B9 + 0x2545F491))
    high = _mix32(base + 0x3C6EF372)
    low = _mix32(base ^ 0x1B873593) >> 11
    return (((high << 21) + low).double() + 0.5) / 9007199254740992.0


def categorical_from_uniform(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: row ``i`` takes the first token whose cumulative probability exceeds ``uniform[i]`` times
    the row's total. ``probs`` [B, V] need not be normalised; a token of probability zero is never taken.

    Two levels keep the work one vectorised pass over the vocabulary (a float32 sum per block of tokens, which picks
    the block) plus a float64 cumulative sum inside the chosen block only, which picks the token; a cumulative sum
    over the whole vocabulary runs row by row on a CPU and costs as much as the decode step.
    """
    rows, vocab = probs.shape
    block = min(_CDF_BLOCK, vocab)
    whole = vocab // block * block
    masses = [probs[:, :whole].reshape(rows, -1, block).sum(-1)]
    if whole < vocab:
        masses.append(probs[:, whole:].sum(-1, keepdim=True))
    block_mass = torch.cat(masses, dim=1).double()
    block_cdf = block_mass.cumsum(-1)
    total = block_cdf[:, -1:]
    # strictly below the total, so the search always lands on a block (and then a token) of positive mass
    target = torch.minimum(uniform.to(total).unsqueeze(1) * total, _just_below(total))
    chosen = torch.searchsorted(block_cdf, target, right=True).clamp(max=block_cdf.shape[1] - 1)
    before = block_cdf.gather(1, chosen) - block_mass.gather(1, chosen)
    columns = chosen * block + torch.arange(block, device=probs.device)
    local = probs.gather(1, columns.clamp(max=vocab - 1)).double().masked_fill(columns >= vocab, 0.0)
    local_cdf = local.cumsum(-1)
    residual = torch.minimum((target - before).clamp(min=0.0), _just_below(local_cdf[:, -1:]))
    offset = torch.searchsorted(local_cdf, residual, right=True).clamp(max=block - 1)
    return columns.gather(1, offset).squeeze(1)


def _just_below(x: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(x, torch.zeros_like(x))


class RowSamplingState:
    """Per-row parameter tensors of the running batch, rebuilt whenever rows join or leave.

    ``positions`` are the tokens each row has sampled so far (the draw index of its next token); every call of
    :func:`sample_next_tokens` advances them by one.
    """

    def __init__(self, params: list[SamplingParams], device: torch.device, positions: list[int] | None = None):
        self.all_greedy = all(p.greedy for p in params)
        self.any_greedy = any(p.greedy for p in params)
        self.any_logprobs = any(p.logprobs for p in params)
        self.any_seeded = any(p.seed is not None and not p.greedy for p in params)
        self.all_seeded = all(p.seed is not None or p.greedy for p in params)
        self.any_top_k = any(p.top_k > 0 and not p.greedy for p in params)
        self.any_top_p = any(p.top_p < 1.0 and not p.greedy for p in params)
        # decided on the host: reading the temperature tensor back would wait for the GPU on every step
        self.unit_temperature = all(p.temperature == 1.0 for p in params)
        self.temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
        self.top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=device)
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        self.greedy = torch.tensor([p.greedy for p in params], dtype=torch.bool, device=device)
        if self.any_seeded:
            self.seeded = torch.tensor([p.seed is not None for p in params], dtype=torch.bool, device=device)
            seeds = torch.tensor([p.seed or 0 for p in params], dtype=torch.int64, device=device)
            self.keys = _row_keys(seeds)
            self.positions = torch.tensor(positions or [0] * len(params), dtype=torch.int64, device=device)


def _filter_top_k_top_p(scaled: torch.Tensor, state: RowSamplingState) -> torch.Tensor:
    """Mask logits outside each row's top-k / nucleus with -inf (one sort serves both filters)."""
    vocab = scaled.shape[-1]
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    remove = torch.zeros_like(sorted_logits, dtype=torch.bool)
    if state.any_top_k:
        k = torch.where(state.top_k > 0, state.top_k.clamp(max=vocab), torch.full_like(state.top_k, vocab))
        ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
        remove |= ranks >= k.unsqueeze(1)
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    if state.any_top_p:
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        remove |= mass_before >= state.top_p.unsqueeze(1)
    remove[:, 0] = False  # the most likely token always survives
    mask = torch.zeros_like(remove).scatter(1, sorted_idx, remove)
    return scaled.masked_fill(mask, float("-inf"))


def sample_next_tokens(
    logits: torch.Tensor, state: RowSamplingState, default_generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick one token per row; return ``(tokens [B], log_probs [B] or None)``.

    ``log_probs`` are those of the chosen tokens under ``log_softmax(logits / temperature)``
    (temperature 1 for greedy rows), computed only when some row asked for them.
    """
    logits = logits.float()
    greedy_tokens = torch.argmax(logits, dim=-1) if state.any_greedy else None
    if state.unit_temperature:
        scaled = logits
    else:
        scaled = logits / state.temperature.unsqueeze(1)
    if state.all_greedy:
        tokens = greedy_tokens
    else:
        filtered = _filter_top_k_top_p(scaled, state) if (state.any_top_k or state.any_top_p) else scaled
        if state.all_seeded:
            uniform = seeded_row_uniform(state.keys, state.positions)
        else:
            uniform = torch.rand(
                filtered.shape[0], generator=default_generator, dtype=torch.float64, device=filtered.device
            )
            if state.any_seeded:
                uniform = torch.where(state.seeded, seeded_row_uniform(state.keys, state.positions), uniform)
        if state.any_seeded:
            state.positions += 1
        tokens = categorical_from_uniform(torch.softmax(filtered, dim=-1), uniform)
        if greedy_tokens is not None:
            tokens = torch.where(state.greedy, greedy_tokens, tokens)
    log_probs = None
    if state.any_logprobs:
        log_probs = torch.log_softmax(scaled, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, log_probs
