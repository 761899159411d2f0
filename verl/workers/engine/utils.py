"""Micro-batching and output collection shared by the model engines.

``prepare_micro_batches`` cuts a no-padding batch into micro-batches, either ``micro_batch_size_per_gpu`` samples
each or, with ``use_dynamic_bsz``, packed under ``max_token_len_per_gpu`` tokens (``verl.utils.seqlen_balancing``),
with the same number of micro-batches on every data-parallel rank so their collectives line up.
``postprocess_batch_func`` joins the per-micro-batch outputs back into one batch in the original sample order.
``as_engine_config`` types an engine's ``engine_config`` as the engine's own config class.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.config_builder import as_config
from verl.utils.nested_tensors import nested_rows, nested_tensor_from_tensor_list
from verl.utils.py_functional import append_to_dict
from verl.utils.seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch
from verl.workers.config.engine_common import EngineConfig

__all__ = ["as_engine_config", "detach_tree", "postprocess_batch_func", "prepare_micro_batches", "sequence_lengths"]

T = TypeVar("T")


def as_engine_config(config: Any, cls: type[T], path: str = "engine_config") -> T:
    """``config`` as the engine's config class ``cls``, by :func:`~verl.utils.config_builder.as_config`; a bare
    :class:`~verl.workers.config.engine_common.EngineConfig` (what a ``TrainingWorker`` makes of a plain mapping: the
    common fields, the backend's own keys kept in ``_extra``) is rebuilt as ``cls`` from all of its keys."""
    if type(config) is EngineConfig:
        config = config.to_dict()
    return as_config(config, cls, path)


def sequence_lengths(data: TensorDict) -> torch.Tensor:
    """Real tokens per sample: from jagged ``input_ids``, else from ``attention_mask``."""
    input_ids = data.get("input_ids", None)
    if isinstance(input_ids, torch.Tensor) and input_ids.is_nested:
        return input_ids.offsets().diff()
    if "attention_mask" in data.keys():
        mask = data.get("attention_mask")
        return mask.reshape(mask.shape[0], -1).sum(dim=1)
    raise KeyError(
        f"cannot count tokens per sample: need nested 'input_ids' or 'attention_mask', the batch has "
        f"{sorted(data.keys())}"
    )


def _positive(value: Any, key: str) -> int:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if value is None or int(value) < 1:
        raise ValueError(f"prepare_micro_batches: {key} must be a positive int, got {value!r}")
    return int(value)


def prepare_micro_batches(
    data: TensorDict,
    dp_group: Any = None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
) -> tuple[list[TensorDict], list[list[int]] | None]:
    """``(micro_batches, indices)``; ``indices`` (the samples of each micro-batch, for
    :func:`~verl.utils.seqlen_balancing.restore_dynamic_batch`) is ``None`` when the order is kept.

    Reads the batch-wide ``use_dynamic_bsz`` (default true) with ``max_token_len_per_gpu`` (times ``sp_size``),
    else ``micro_batch_size_per_gpu``.
    """
    rows = len(data)
    if tu.get_non_tensor_data(data, "use_dynamic_bsz", True):
        budget = _positive(tu.get_non_tensor_data(data, "max_token_len_per_gpu", None), "max_token_len_per_gpu")
        budget *= int(tu.get_non_tensor_data(data, "sp_size", 1) or 1)
        lengths = sequence_lengths(data).to("cpu", torch.long)
        width = int(lengths.max().item()) if rows else 0
        mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int8)
        _, parts = rearrange_micro_batches(
            TensorDict({"attention_mask": mask}, batch_size=[rows]),
            budget,
            dp_group=dp_group,
            num_batches_divided_by=num_batches_divided_by,
            same_micro_num_in_dp=same_micro_num_in_dp,
            min_num_micro_batch=min_num_micro_batch,
        )
        return [tu.index_select_tensor_dict(data, part) for part in parts], parts
    size = _positive(tu.get_non_tensor_data(data, "micro_batch_size_per_gpu", None), "micro_batch_size_per_gpu")
    starts = range(0, rows, size)
    return [tu.index_select_tensor_dict(data, list(range(s, min(s + size, rows)))) for s in starts], None


def detach_tree(obj: Any) -> Any:
    """``obj`` with every tensor detached (dicts, lists and tuples walked), so kept outputs hold no graph."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, dict):
        return {key: detach_tree(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(detach_tree(value) for value in obj)
    return obj


def _join_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    if parts[0].is_nested:
        return nested_tensor_from_tensor_list([row for part in parts for row in nested_rows(part)])
    return torch.cat(parts, dim=0)


def _restore(tensor: torch.Tensor, indices: list[list[int]]) -> torch.Tensor:
    if not tensor.is_nested:
        return restore_dynamic_batch(tensor, indices)
    order = [i for part in indices for i in part]
    rows = nested_rows(tensor)
    restored: list[torch.Tensor | None] = [None] * len(rows)
    for position, sample in enumerate(order):
        restored[sample] = rows[position]
    return nested_tensor_from_tensor_list(restored)


def postprocess_batch_func(
    output_lst: list[dict[str, Any]], indices: list[list[int]] | None, data: TensorDict
) -> dict[str, Any]:
    """``{"model_output": {key: rows of every micro-batch, in sample order}, "loss": [per micro-batch],
    "metrics": {key: values per micro-batch}}`` from the per-micro-batch outputs."""
    collected: dict[str, list[torch.Tensor]] = {}
    losses: list[float] = []
    metrics: dict[str, Any] = {}
    for output in output_lst:
        for key, value in (output.get("model_output") or {}).items():
            collected.setdefault(key, []).append(value)
        if "loss" in output:
            losses.append(output["loss"])
        append_to_dict(metrics, output.get("metrics") or {})
    model_output = {}
    for key, parts in collected.items():
        joined = _join_rows(parts)
        model_output[key] = _restore(joined, indices) if indices is not None else joined
    return {"model_output": model_output, "loss": losses, "metrics": metrics}
