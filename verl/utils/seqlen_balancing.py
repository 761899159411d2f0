"""Balance work by token count instead of sample count.

Two uses: (1) split a global batch across data-parallel ranks so every rank gets
about the same number of tokens (``get_seqlen_balanced_partitions``), and (2) cut
one rank's batch into micro-batches that each stay under a token budget
(``rearrange_micro_batches`` / ``prepare_dynamic_batch``), so memory is bounded by
tokens, not by the longest sample times the micro-batch size.

Partitioning uses the Karmarkar-Karp largest differencing method generalised to k
sets: every item starts as a k-tuple of partial partitions, and the two tuples with
the largest spread are merged by pairing the heaviest side of one with the lightest
side of the other, until one tuple remains.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import torch

__all__ = [
    "karmarkar_karp",
    "greedy_partition",
    "get_seqlen_balanced_partitions",
    "log_seqlen_unbalance",
    "ceildiv",
    "roundup_divisible",
    "calculate_workload",
    "rearrange_micro_batches",
    "take_rows",
    "get_reverse_idx",
    "prepare_dynamic_batch",
    "restore_dynamic_batch",
]


# Karmarkar-Karp costs O(n * k log k) in Python; past this n * k the O(n log k) greedy alone is used
# (with that many partitions per sample, greedy is already within one item of balanced).
_KK_MAX_WORK = 1 << 21

# How many counts above ceil(total / budget) to try with balanced partitions before settling for
# the first-fit-decreasing packing, which always fits.
_EXTRA_COUNTS_TRIED = 2


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def roundup_divisible(a: int, b: int) -> int:
    """The smallest multiple of ``b`` (> 0) that is >= ``a``."""
    if b <= 0:
        raise ValueError(f"roundup_divisible: the divisor must be positive, got {b}")
    return ceildiv(a, b) * b


def calculate_workload(seqlen_list: torch.Tensor) -> torch.Tensor:
    """Relative compute of sequences of the given lengths, for balancing by work instead of by tokens.

    A dense transformer layer costs about ``24 h^2 s`` FLOPs in its matrix multiplies and ``4 h s^2`` in
    attention; divided by ``4 h`` with ``h = 4096`` (a 7B model) that is ``24576 s + s^2``: linear for short
    sequences, quadratic once ``s`` approaches 24k. Works element-wise on tensors and on plain ints.
    """
    return 24576 * seqlen_list + seqlen_list**2


class _Tuple:
    """k partial partitions, kept heaviest first; ordered in the heap by spread (largest first).

    Partitions are ``(sum, count, items)`` with ``items`` an immutable tuple so merges copy at C speed.
    """

    __slots__ = ("parts", "key")

    def __init__(self, parts: list[tuple[int, int, tuple[int, ...]]], tie: int):
        self.parts = sorted(parts, reverse=True)
        # heapq is a min-heap: negate the spread; `tie` keeps the order deterministic.
        self.key = (self.parts[-1][0] - self.parts[0][0], tie)

    def __lt__(self, other: _Tuple) -> bool:
        return self.key < other.key


def karmarkar_karp(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Largest-differencing partition of indices of ``seqlen_list`` into ``k_partitions`` sets.

    With ``equal_size`` the items are first grouped k at a time (sorted by length) so every
    partition receives exactly one item per group, hence equal counts.
    """
    order = sorted(range(len(seqlen_list)), key=lambda i: (seqlen_list[i], i))
    if equal_size:
        groups = [order[start : start + k_partitions] for start in range(0, len(order), k_partitions)]
        heap = [_Tuple([(seqlen_list[i], 1, (i,)) for i in group], tie) for tie, group in enumerate(groups)]
    else:
        empty = [(0, 0, ())] * (k_partitions - 1)
        heap = [_Tuple([(seqlen_list[i], 1, (i,)), *empty], tie) for tie, i in enumerate(order)]
    tie = len(heap)
    heapq.heapify(heap)
    while len(heap) > 1:
        a = heapq.heappop(heap).parts
        b = heapq.heappop(heap).parts
        # a is heaviest first; pair it with b's lightest first.
        merged = [(sa + sb, na + nb, ia + ib) for (sa, na, ia), (sb, nb, ib) in zip(a, reversed(b))]
        heapq.heappush(heap, _Tuple(merged, tie))
        tie += 1
    if not heap:
        return [[] for _ in range(k_partitions)]
    return [list(items) for _, _, items in heap[0].parts]


def greedy_partition(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Longest-processing-time greedy: each item (longest first) goes to the lightest partition.

    With ``equal_size`` a partition stops receiving items once it holds ``len / k`` of them.
    """
    capacity = len(seqlen_list) // k_partitions if equal_size else len(seqlen_list)
    parts: list[list[int]] = [[] for _ in range(k_partitions)]
    heap = [(0, 0, p) for p in range(k_partitions)]  # (sum, count, partition) - already a valid heap
    for i in sorted(range(len(seqlen_list)), key=lambda i: (-seqlen_list[i], i)):
        total, count, p = heapq.heappop(heap)
        parts[p].append(i)
        if count + 1 < capacity:
            heapq.heappush(heap, (total + seqlen_list[i], count + 1, p))
    return parts


def _fill_empty(parts: list[list[int]], seqlen_list: Sequence[int]) -> list[list[int]]:
    """Move one item (the shortest) from the most crowded partition into each empty one."""
    for p in parts:
        if not p:
            donor = max(parts, key=len)
            p.append(donor.pop(min(range(len(donor)), key=lambda j: seqlen_list[donor[j]])))
    return parts


def get_seqlen_balanced_partitions(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Split sample indices into ``k_partitions`` non-empty groups with near-equal total length.

    Args:
        seqlen_list: length (token count / workload) of every sample.
        k_partitions: number of groups (e.g. data-parallel ranks or micro-batches).
        equal_size: every group gets ``len(seqlen_list) / k_partitions`` samples (must divide evenly).

    Returns:
        ``k_partitions`` lists of indices, each sorted ascending.
    """
    n = len(seqlen_list)
    if k_partitions <= 0:
        raise ValueError(f"k_partitions must be positive, got {k_partitions}")
    if n < k_partitions:
        raise ValueError(f"cannot split {n} samples into {k_partitions} non-empty partitions (seqlen_list too short)")
    if equal_size and n % k_partitions != 0:
        raise ValueError(
            f"equal_size=True needs len(seqlen_list)={n} divisible by k_partitions={k_partitions} "
            f"(remainder {n % k_partitions})"
        )
    if any(s < 0 for s in seqlen_list):
        bad = next(i for i, s in enumerate(seqlen_list) if s < 0)
        raise ValueError(f"seqlen_list[{bad}] is negative ({seqlen_list[bad]})")
    seqlen_list = [int(s) for s in seqlen_list]
    candidates = [greedy_partition(seqlen_list, k_partitions, equal_size)]
    if n * k_partitions <= _KK_MAX_WORK:
        candidates.append(karmarkar_karp(seqlen_list, k_partitions, equal_size))
    # Keep the candidate with the lighter heaviest partition (then the smaller spread).
    best = min(candidates, key=lambda parts: _imbalance_key(parts, seqlen_list))
    best = _fill_empty([list(p) for p in best], seqlen_list)
    return [sorted(p) for p in best]


def _imbalance_key(parts: list[list[int]], seqlen_list: Sequence[int]) -> tuple[int, int]:
    sums = [sum(seqlen_list[i] for i in p) for p in parts]
    return max(sums), max(sums) - min(sums)


def log_seqlen_unbalance(seqlen_list: Sequence[int], partitions: list[list[int]], prefix: str) -> dict[str, float]:
    """Metrics comparing the naive contiguous split with ``partitions``.

    Keys: ``{prefix}/min``, ``/max``, ``/minmax_diff`` for contiguous chunks of the same count, and
    ``{prefix}/balanced_min``, ``/balanced_max``, ``/balanced_minmax_diff``, ``/mean`` for ``partitions``.
    """
    k = len(partitions)
    if k == 0:
        raise ValueError("log_seqlen_unbalance: partitions is empty")
    n = len(seqlen_list)
    chunk = ceildiv(n, k)
    naive = [sum(seqlen_list[i : i + chunk]) for i in range(0, n, chunk)] or [0]
    balanced = [sum(seqlen_list[i] for i in p) for p in partitions]
    return {
        f"{prefix}/min": float(min(naive)),
        f"{prefix}/max": float(max(naive)),
        f"{prefix}/minmax_diff": float(max(naive) - min(naive)),
        f"{prefix}/balanced_min": float(min(balanced)),
        f"{prefix}/balanced_max": float(max(balanced)),
        f"{prefix}/balanced_minmax_diff": float(max(balanced) - min(balanced)),
        f"{prefix}/mean": float(sum(balanced) / k),
    }


def _first_fit_decreasing(seqlens: list[int], budget: int) -> list[list[int]]:
    """Bin packing that always fits each bin under ``budget`` (given every item does)."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(range(len(seqlens)), key=lambda i: (-seqlens[i], i)):
        for b, load in enumerate(loads):
            if load + seqlens[i] <= budget:
                bins[b].append(i)
                loads[b] += seqlens[i]
                break
        else:
            bins.append([i])
            loads.append(seqlens[i])
    return bins


def _fits(parts: list[list[int]], seqlens: list[int], budget: int) -> bool:
    return all(sum(seqlens[i] for i in p) <= budget for p in parts)


def _split_to(parts: list[list[int]], count: int, seqlens: list[int]) -> list[list[int]]:
    """Grow a fitting partition to ``count`` bins by halving the fullest bins (halves still fit)."""
    parts = [list(p) for p in parts]
    while len(parts) < count:
        widest = max(range(len(parts)), key=lambda b: (len(parts[b]), sum(seqlens[i] for i in parts[b])))
        bin_ = sorted(parts.pop(widest), key=lambda i: seqlens[i])
        parts.extend([bin_[0::2], bin_[1::2]])
    return parts


def _micro_batch_count(seqlens: list[int], max_token_len: int, floor: int) -> tuple[int, list[list[int]]]:
    """A small count >= ``floor`` whose partition fits the budget, with that partition.

    Tries balanced partitions at ``ceil(total / budget)`` and a few counts above it, then at the
    first-fit-decreasing count, whose packing is the guaranteed fallback.
    """
    n = len(seqlens)
    packed = _first_fit_decreasing(seqlens, max_token_len)
    start = min(max(floor, ceildiv(sum(seqlens), max_token_len), 1), n)
    tries = [c for c in range(start, start + _EXTRA_COUNTS_TRIED + 1) if c < len(packed)]
    for count in [*tries, max(start, len(packed))]:
        if count > n:
            break
        parts = get_seqlen_balanced_partitions(seqlens, count, equal_size=False)
        if _fits(parts, seqlens, max_token_len):
            return count, parts
    if len(packed) < start:
        return start, _split_to(packed, start, seqlens)
    return len(packed), packed


def rearrange_micro_batches(
    batch,
    max_token_len: int,
    dp_group=None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
) -> tuple[list, list[list[int]]]:
    """Cut a TensorDict into micro-batches whose summed ``attention_mask`` lengths stay under ``max_token_len``.

    The count is at least ``ceil(total_tokens / max_token_len)`` (and ``min_num_micro_batch``), raised until
    every micro-batch fits; with ``dp_group`` and ``same_micro_num_in_dp`` the count is the max over ranks so
    every rank runs the same number of forward/backward passes; ``num_batches_divided_by`` rounds it up to a
    multiple (e.g. pipeline stages).

    Returns:
        ``(micro_batches, indices)``: the TensorDict micro-batches and, for each, the sorted sample indices
        it holds (feed their concatenation to :func:`restore_dynamic_batch` to undo the reordering).
    """
    if max_token_len <= 0:
        raise ValueError(f"max_token_len must be positive, got {max_token_len}")
    if "attention_mask" not in batch.keys():
        raise KeyError(f"rearrange_micro_batches needs an 'attention_mask' tensor, batch has {sorted(batch.keys())}")
    mask = batch["attention_mask"]
    seqlens = [int(s) for s in mask.reshape(mask.shape[0], -1).sum(dim=1).tolist()]
    n = len(seqlens)
    if n == 0:
        raise ValueError("rearrange_micro_batches: the batch is empty")
    longest = max(range(n), key=lambda i: seqlens[i])
    if seqlens[longest] > max_token_len:
        raise ValueError(
            f"sample {longest} has {seqlens[longest]} tokens, more than max_token_len={max_token_len}; "
            "raise max_token_len (e.g. ppo_max_token_len_per_gpu) to at least the longest prompt+response"
        )

    count, parts = _micro_batch_count(seqlens, max_token_len, min_num_micro_batch or 1)
    target = count
    if dp_group is not None and same_micro_num_in_dp:
        target = _all_reduce_max(target, dp_group)
    if num_batches_divided_by:
        target = ceildiv(target, num_batches_divided_by) * num_batches_divided_by
    if target > n:
        raise ValueError(
            f"need {target} micro-batches (after syncing across data-parallel ranks / rounding to a multiple of "
            f"num_batches_divided_by={num_batches_divided_by}) but this rank has only {n} samples"
        )
    if target != count:
        balanced = get_seqlen_balanced_partitions(seqlens, target, equal_size=False)
        parts = balanced if _fits(balanced, seqlens, max_token_len) else _split_to(parts, target, seqlens)

    parts = sorted((sorted(p) for p in parts), key=lambda p: p[0])
    micro_batches = [take_rows(batch, torch.tensor(p, dtype=torch.long, device=mask.device)) for p in parts]
    return micro_batches, parts


def take_rows(batch, index: torch.Tensor):
    """``batch[index]`` via ``index_select``, which is orders of magnitude faster than advanced indexing on CPU."""
    try:
        return batch.apply(lambda t: t.index_select(0, index), batch_size=[index.shape[0]])
    except (TypeError, AttributeError, RuntimeError):  # non-tensor leaves: let TensorDict index them
        return batch[index]


def _all_reduce_max(value: int, group) -> int:
    import torch.distributed as dist

    from verl.utils.device import get_device_name

    device = get_device_name() if dist.get_backend(group) == "nccl" else "cpu"
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t.item())


def get_reverse_idx(idx_map: Sequence[int]) -> list[int]:
    """Inverse permutation: ``reverse[idx_map[i]] = i``, so ``x[idx_map][reverse] == x``."""
    idx_map = [int(i) for i in idx_map]
    n = len(idx_map)
    reverse = [-1] * n
    for pos, idx in enumerate(idx_map):
        if not 0 <= idx < n:
            raise ValueError(f"get_reverse_idx: index {idx} at position {pos} is out of range for {n} entries")
        if reverse[idx] != -1:
            raise ValueError(f"get_reverse_idx: index {idx} appears twice (positions {reverse[idx]} and {pos})")
        reverse[idx] = pos
    return reverse


def prepare_dynamic_batch(
    data,
    max_token_len: int,
    dp_group=None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
) -> tuple[list, list[list[int]]]:
    """:func:`rearrange_micro_batches` for a ``DataProto``: non-tensor fields and meta_info follow each sample."""
    _, parts = rearrange_micro_batches(
        data.batch,
        max_token_len,
        dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by,
        same_micro_num_in_dp=same_micro_num_in_dp,
        min_num_micro_batch=min_num_micro_batch,
    )
    return [data[p] for p in parts], parts


def restore_dynamic_batch(tensor_cat: torch.Tensor, batch_idx_list: list[list[int]]) -> torch.Tensor:
    """Put the concatenated per-micro-batch outputs back in the original sample order."""
    flat = [i for part in batch_idx_list for i in part]
    if len(flat) != tensor_cat.shape[0]:
        raise ValueError(
            f"restore_dynamic_batch: tensor has {tensor_cat.shape[0]} rows but batch_idx_list covers {len(flat)}"
        )
    reverse = torch.tensor(get_reverse_idx(flat), dtype=torch.long, device=tensor_cat.device)
    return tensor_cat[reverse]
