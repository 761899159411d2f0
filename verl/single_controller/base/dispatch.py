"""Split/merge functions behind each Dispatch mode.

A dispatch function maps the driver's call arguments to per-rank arguments; a collect function merges the
per-rank outputs. Values wrapped in ``PerRank`` go element i to rank i; anything else is sent to every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType
from typing import Any

from verl.utils.dataproto_config import PADDING_SIZE_KWARG

# kwargs key a dispatch function uses to tell the group how many padding rows to strip from the merged output
# (verl's ``verl.protocol._padding_size_key``, so dispatch functions written for verl work unchanged).
PAD_SIZE_KEY = PADDING_SIZE_KWARG


class PerRank(list):
    """A list whose element i is the argument for rank i."""


def _world_size(worker_group: Any) -> int:
    return worker_group.world_size


def dispatch_one_to_all(worker_group: Any, *args, **kwargs) -> tuple[tuple, dict]:
    """Every rank gets the same arguments."""
    n = _world_size(worker_group)
    return tuple(PerRank([a] * n) for a in args), {k: PerRank([v] * n) for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group: Any, *args, **kwargs) -> tuple[tuple, dict]:
    """Arguments pass through; lists of world_size length are split by rank when every argument is one."""
    return args, kwargs


def collect_all_to_all(worker_group: Any, output: Any) -> Any:
    return output


def dispatch_direct_rollout_method(worker_group: Any, *args, **kwargs):
    raise RuntimeError(
        "methods registered with Dispatch.DIRECT_ROLLOUT_METHOD are called on one worker's actor handle "
        "(worker_group.workers[i].<method>.remote(...)), not on the worker group"
    )


def _check_per_rank(name: str, value: Any, n: int) -> PerRank:
    if not isinstance(value, list | tuple) or len(value) != n:
        got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, list | tuple) else repr(value)
        raise ValueError(
            f"Dispatch.DP_COMPUTE: argument {name} must be a list with one entry per rank ({n}), got {got}"
        )
    return PerRank(value)


def dispatch_dp_compute(worker_group: Any, *args, **kwargs) -> tuple[tuple, dict]:
    """Each argument is already a list with one entry per rank."""
    n = _world_size(worker_group)
    new_args = tuple(_check_per_rank(f"#{i}", a, n) for i, a in enumerate(args))
    new_kwargs = {k: _check_per_rank(repr(k), v, n) for k, v in kwargs.items()}
    return new_args, new_kwargs


def collect_dp_compute(worker_group: Any, output: Any) -> list:
    n = _world_size(worker_group)
    if len(output) != n:
        raise ValueError(f"expected {n} outputs (one per rank), got {len(output)}")
    return list(output)


def _protocol():
    from verl import protocol

    return protocol


def _tensordict_utils():
    from verl.utils import tensordict_utils

    return tensordict_utils


def _is_tensordict(value: Any) -> bool:
    try:
        from tensordict import TensorDict
    except ImportError:  # tensordict missing: nothing can be one
        return False
    return isinstance(value, TensorDict)


def _split_data_protos(name: str, values: dict[str, Any], chunks: int) -> tuple[dict[str, PerRank], int]:
    """Chunk every DataProto / DataProtoFuture / TensorDict value into ``chunks`` parts, padding batches that don't
    divide (all padded batches must need the same padding, so one pad size strips the merged output)."""
    protocol = _protocol()
    split: dict[str, PerRank] = {}
    pad_sizes: dict[str, int] = {}
    for key, value in values.items():
        if isinstance(value, protocol.DataProto):
            pad = (-len(value)) % chunks
            if pad:
                value, pad = protocol.pad_dataproto_to_divisor(value, chunks)
            pad_sizes[key] = pad
            split[key] = PerRank(value.chunk(chunks=chunks))
        elif isinstance(value, protocol.DataProtoFuture):
            split[key] = PerRank(value.chunk(chunks=chunks))
        elif _is_tensordict(value):
            tu = _tensordict_utils()
            pad = 0
            if len(value) % chunks:
                value, pad = tu.pad_to_divisor(value, chunks)
            pad_sizes[key] = pad
            split[key] = PerRank(tu.chunk_tensordict(value, chunks))
        else:
            raise TypeError(
                f"{name}: argument {key} must be a DataProto, DataProtoFuture or TensorDict, got {type(value).__name__}"
            )
    distinct = set(pad_sizes.values())
    if len(distinct) > 1:
        raise ValueError(f"{name}: batch arguments need different padding ({pad_sizes}); give them equal lengths")
    return split, (distinct.pop() if distinct else 0)


def _dispatch_proto_chunks(name: str, chunks: int, args: tuple, kwargs: dict) -> tuple[tuple, dict, int]:
    values = {f"#{i}": a for i, a in enumerate(args)}
    values.update({repr(k): v for k, v in kwargs.items()})
    split, pad = _split_data_protos(name, values, chunks)
    new_args = tuple(split[f"#{i}"] for i in range(len(args)))
    new_kwargs = {k: split[repr(k)] for k in kwargs}
    return new_args, new_kwargs, pad


def dispatch_dp_compute_data_proto(worker_group: Any, *args, **kwargs) -> tuple[tuple, dict]:
    """Rank i gets chunk i of every DataProto; a batch that doesn't divide world_size is padded first."""
    n = _world_size(worker_group)
    new_args, new_kwargs, pad = _dispatch_proto_chunks("Dispatch.DP_COMPUTE_PROTO", n, args, kwargs)
    if pad:
        new_kwargs[PAD_SIZE_KEY] = pad
    return new_args, new_kwargs


def dispatch_dp_compute_data_proto_with_func(worker_group: Any, *args, **kwargs) -> tuple[tuple, dict]:
    """First argument is a function sent to every rank; the DataProto arguments after it are chunked."""
    if not args or not isinstance(args[0], FunctionType):
        got = type(args[0]).__name__ if args else "nothing"
        raise TypeError(f"Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: first argument must be a function, got {got}")
    n = _world_size(worker_group)
    new_args, new_kwargs = dispatch_dp_compute_data_proto(worker_group, *args[1:], **kwargs)
    return (PerRank([args[0]] * n), *new_args), new_kwargs


def concat_batches(outputs: list, ranks: list[int] | None = None) -> Any:
    """Merge per-rank outputs in order: all DataProto (``DataProto.concat``) or all TensorDict; ``ranks`` name
    the producers in errors."""
    protocol = _protocol()
    ranks = list(range(len(outputs))) if ranks is None else ranks
    if outputs and all(_is_tensordict(out) for out in outputs):
        return _tensordict_utils().concat_tensordict(list(outputs))
    for rank, out in zip(ranks, outputs):
        if not isinstance(out, protocol.DataProto):
            raise TypeError(
                f"rank {rank} returned {type(out).__name__}; this dispatch mode expects a DataProto (or a TensorDict "
                "from every rank)"
            )
    return protocol.DataProto.concat(list(outputs))


def unpad_batch(output: Any, pad_size: int) -> Any:
    """Strip the ``pad_size`` rows dispatch appended (DataProto or TensorDict; other outputs are returned as is)."""
    if not pad_size:
        return output
    protocol = _protocol()
    if isinstance(output, protocol.DataProto):
        return protocol.unpad_dataproto(output, pad_size=pad_size)
    if _is_tensordict(output):
        return _tensordict_utils().unpad(output, pad_size)
    return output


def collect_dp_compute_data_proto(worker_group: Any, output: list) -> Any:
    """Concatenate the per-rank DataProtos in rank order."""
    ranks = list(range(len(output)))
    return concat_batches(output, ranks)


def _all_ranks(worker_group: Any) -> list[int]:
    return list(range(_world_size(worker_group)))


# Ranks whose outputs make up the merged DataProto, in order; lets a non-blocking call build a future without
# collecting first.
setattr(collect_dp_compute_data_proto, "data_proto_output_ranks", _all_ranks)  # noqa: B010 - function attribute


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Callable]:
    """Dispatch/collect pair for workers with tensor/sequence parallel replicas of one data-parallel shard.

    Each worker declares ``self._register_dispatch_collect_info(mesh_name, dp_rank, is_collect)``; ranks with the
    same dp_rank get the same chunk, and only outputs from ranks with is_collect=True are kept (in dp_rank order).
    """

    def dispatch_fn(worker_group: Any, *args, **kwargs):
        dp_ranks = worker_group._query_dispatch_info(mesh_name)
        dp_size = max(dp_ranks) + 1
        missing = sorted(set(range(dp_size)) - set(dp_ranks))
        if missing:
            raise ValueError(f"mesh {mesh_name!r}: dp ranks {missing} have no worker (declared: {dp_ranks})")
        new_args, new_kwargs, pad = _dispatch_proto_chunks(f"mesh {mesh_name!r}", dp_size, args, kwargs)
        new_args = tuple(PerRank([a[d] for d in dp_ranks]) for a in new_args)
        new_kwargs = {k: PerRank([v[d] for d in dp_ranks]) for k, v in new_kwargs.items()}
        if pad:
            new_kwargs[PAD_SIZE_KEY] = pad
        return new_args, new_kwargs

    def output_ranks(worker_group: Any) -> list[int]:
        dp_ranks = worker_group._query_dispatch_info(mesh_name)
        collect = worker_group._query_collect_info(mesh_name)
        chosen = sorted((dp, rank) for rank, (dp, keep) in enumerate(zip(dp_ranks, collect)) if keep)
        seen = [dp for dp, _ in chosen]
        if seen != list(range(max(dp_ranks) + 1)):
            raise ValueError(
                f"mesh {mesh_name!r}: exactly one collecting worker per dp rank is required, got dp ranks {seen}"
            )
        return [rank for _, rank in chosen]

    def collect_fn(worker_group: Any, output: list) -> Any:
        ranks = output_ranks(worker_group)
        return concat_batches([output[r] for r in ranks], ranks)

    setattr(collect_fn, "data_proto_output_ranks", output_ranks)  # noqa: B010 - function attribute
    return {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
