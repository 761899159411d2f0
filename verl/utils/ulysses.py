"""verl's Ulysses sequence-parallel helpers at sequence-parallel world size 1, the only size this build runs.

Ulysses splits each packed sequence across the ranks of a sequence-parallel (SP) group and exchanges attention heads
with all-to-alls. This build does not implement that (``ulysses_sequence_parallel_size`` is inert, see
:mod:`verl.trainer.config.inert_keys`): every rank holds whole sequences. At SP size 1 each helper still has its exact
meaning, and this module implements that meaning: padding to a multiple of 1 adds nothing, slicing keeps the whole
sequence, gathers and all-to-alls return their input, and the pad size is 0. An SP group or size larger than 1 is
refused with :class:`SequenceParallelNotSupportedError` instead of silently computing on a fraction of a sequence.
The sharding managers (verl's ``BaseShardingManager`` / ``FSDPUlyssesShardingManager``) are defined here too.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch import Tensor

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = [
    "SequenceParallelNotSupportedError",
    "set_ulysses_sequence_parallel_group",
    "get_ulysses_sequence_parallel_group",
    "get_ulysses_sequence_parallel_world_size",
    "get_ulysses_sequence_parallel_rank",
    "gather_seq_scatter_heads",
    "gather_heads_scatter_seq",
    "slice_input_tensor",
    "all_to_all_tensor",
    "all_gather_tensor",
    "gather_outputs_and_unpad",
    "gather_outpus_and_unpad",
    "ulysses_pad",
    "ulysses_pad_and_slice_inputs",
    "validate_ulysses_config",
    "BaseShardingManager",
    "FSDPUlyssesShardingManager",
]

_SP_GROUP: dist.ProcessGroup | None = None


class SequenceParallelNotSupportedError(NotImplementedError):
    """A sequence-parallel size or group larger than 1 was asked for; this build keeps whole sequences per rank."""


def _refuse(what: str, size: int) -> None:
    raise SequenceParallelNotSupportedError(
        f"{what}: sequence-parallel size {size}; Ulysses sequence parallelism is not implemented in this build "
        "(set ulysses_sequence_parallel_size=1)"
    )


def _group_size(group: dist.ProcessGroup | None) -> int:
    return dist.get_world_size(group) if group is not None else 1


def _checked_group(group: dist.ProcessGroup | None, what: str) -> dist.ProcessGroup | None:
    """``group`` (or the registered SP group), after refusing one of more than one rank."""
    group = _SP_GROUP if group is None else group
    size = _group_size(group)
    if size > 1:
        _refuse(what, size)
    return group


def set_ulysses_sequence_parallel_group(group: dist.ProcessGroup | None) -> None:
    """Register the SP group the helpers use by default; None clears it. A group of more than one rank is refused."""
    global _SP_GROUP
    size = _group_size(group)
    if size > 1:
        _refuse("set_ulysses_sequence_parallel_group", size)
    _SP_GROUP = group


def get_ulysses_sequence_parallel_group() -> dist.ProcessGroup | None:
    """The registered SP group (None: no sequence parallelism)."""
    return _SP_GROUP


def get_ulysses_sequence_parallel_world_size(group: dist.ProcessGroup | None = None) -> int:
    """Ranks in ``group`` (default: the registered SP group); 1 without one."""
    return _group_size(_SP_GROUP if group is None else group)


def get_ulysses_sequence_parallel_rank(group: dist.ProcessGroup | None = None) -> int:
    """This rank's index in ``group`` (default: the registered SP group); 0 without one."""
    group = _SP_GROUP if group is None else group
    return dist.get_rank(group) if group is not None else 0


def gather_seq_scatter_heads(
    x: Tensor, seq_dim: int, head_dim: int, unpadded_dim_size: int = 0, group: dist.ProcessGroup | None = None
) -> Tensor:
    """Full sequence, this rank's heads: at SP size 1 every rank already has both, so ``x`` itself."""
    _checked_group(group, "gather_seq_scatter_heads")
    return x


def gather_heads_scatter_seq(x: Tensor, head_dim: int, seq_dim: int, group: dist.ProcessGroup | None = None) -> Tensor:
    """All heads, this rank's part of the sequence: at SP size 1 that is ``x`` itself."""
    _checked_group(group, "gather_heads_scatter_seq")
    return x


def slice_input_tensor(x: Tensor, dim: int, padding: bool = True, group: dist.ProcessGroup | None = None) -> Tensor:
    """This rank's slice of ``x`` along ``dim``: the whole tensor at SP size 1 (contiguous, as the slice would be)."""
    _checked_group(group, "slice_input_tensor")
    return x.contiguous()


def all_to_all_tensor(
    local_input: Tensor,
    scatter_dim: int,
    gather_dim: int,
    group: dist.ProcessGroup | None = None,
    async_op: bool = False,
) -> Any:
    """All-to-all within the SP group: the identity for one rank; with ``async_op`` a callable returning it."""
    _checked_group(group, "all_to_all_tensor")
    result = local_input.contiguous()
    return (lambda: result) if async_op else result


def all_gather_tensor(local_tensor: Tensor, group: dist.ProcessGroup | None = None, async_op: bool = False) -> Tensor:
    """All-gather along dim 0 within the SP group: a copy of the input for one rank."""
    _checked_group(group, "all_gather_tensor")
    return local_tensor.clone()


def _unpad(x: Tensor, dim: int, padding_size: int) -> Tensor:
    return x.narrow(dim, 0, x.size(dim) - padding_size)


def gather_outputs_and_unpad(
    x: Tensor,
    gather_dim: int,
    unpad_dim: int | None = None,
    padding_size: int = 0,
    grad_scaler: bool = True,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """Gather outputs over the SP group along ``gather_dim`` and drop ``padding_size`` entries at the end of
    ``unpad_dim``. Without an SP group ``x`` is returned as is (verl's contract: nothing was padded); with a
    one-rank group the gather is the identity and only the unpadding applies."""
    group = _checked_group(group, "gather_outputs_and_unpad")
    if group is None or unpad_dim is None:
        return x
    if not isinstance(padding_size, int) or padding_size < 0:
        raise ValueError(f"gather_outputs_and_unpad: padding_size must be a non-negative int, got {padding_size!r}")
    return _unpad(x, unpad_dim, padding_size) if padding_size else x


def gather_outpus_and_unpad(*args: Any, **kwargs: Any) -> Tensor:
    """Misspelt old name of :func:`gather_outputs_and_unpad`."""
    warnings.warn(
        "verl.utils.ulysses.gather_outpus_and_unpad is deprecated; use gather_outputs_and_unpad",
        FutureWarning,
        stacklevel=2,
    )
    return gather_outputs_and_unpad(*args, **kwargs)


def _check_packed(input_ids_rmpad: Tensor, position_ids_rmpad: Tensor | None) -> None:
    if position_ids_rmpad is None:
        return
    if position_ids_rmpad.dim() < 2 or position_ids_rmpad.size(-2) != 1:
        raise ValueError(
            f"ulysses_pad: position_ids_rmpad must be packed as [..., 1, total_nnz], got shape "
            f"{tuple(position_ids_rmpad.shape)}"
        )
    if position_ids_rmpad.size(-1) != input_ids_rmpad.size(-1):
        raise ValueError(
            f"ulysses_pad: position_ids_rmpad has {position_ids_rmpad.size(-1)} tokens, "
            f"input_ids_rmpad has {input_ids_rmpad.size(-1)}"
        )


def ulysses_pad(
    input_ids_rmpad: Tensor, position_ids_rmpad: Tensor | None = None, sp_size: int = 1, pad_value: int = 0
) -> tuple[Tensor, Tensor | None, int]:
    """Pad packed ``[1, total_nnz]`` ids (and position ids) to a multiple of ``sp_size``: unchanged at size 1.

    Returns ``(input_ids, position_ids, pad_size)`` with ``pad_size`` 0.
    """
    _check_packed(input_ids_rmpad, position_ids_rmpad)
    if sp_size > 1:
        _refuse("ulysses_pad", sp_size)
    return input_ids_rmpad, position_ids_rmpad, 0


def ulysses_pad_and_slice_inputs(
    input_ids_rmpad: Tensor,
    position_ids_rmpad: Tensor | None = None,
    sp_size: int = 1,
    skip_position_ids_rmpad: bool = False,
    pad_value: int = 0,
) -> tuple[Tensor, Tensor | None, int]:
    """Pad to a multiple of ``sp_size`` and keep this rank's slice: at size 1 the whole (contiguous) inputs and a
    pad size of 0. ``skip_position_ids_rmpad`` leaves the position ids unsliced, as verl's VeOmni path does."""
    input_ids_rmpad, position_ids_rmpad, pad_size = ulysses_pad(
        input_ids_rmpad, position_ids_rmpad, sp_size, pad_value=pad_value
    )
    input_ids_rmpad = slice_input_tensor(input_ids_rmpad, dim=1, padding=False)
    if position_ids_rmpad is not None and not skip_position_ids_rmpad:
        position_ids_rmpad = slice_input_tensor(position_ids_rmpad, dim=1, padding=False)
    return input_ids_rmpad, position_ids_rmpad, pad_size


def validate_ulysses_config(num_heads: int, ulysses_sequence_size: int) -> None:
    """Accept SP size 1 (and 0, verl's "off"); refuse anything larger, which this build cannot run."""
    if ulysses_sequence_size > 1:
        _refuse(f"validate_ulysses_config(num_heads={num_heads})", ulysses_sequence_size)


class BaseShardingManager:
    """A context manager around one phase of a worker, plus the data conversions in and out.

    ``with manager: out = manager.postprocess_data(compute(manager.preprocess_data(data)))``. The base class changes
    nothing (the identity); subclasses reshard. ``timing`` collects the seconds a subclass spends resharding.
    """

    def __init__(self) -> None:
        self.timing: dict[str, float] = {}

    def __enter__(self) -> BaseShardingManager:
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        return None

    def preprocess_data(self, data: DataProto) -> DataProto:
        """Data as the inner phase needs it (e.g. gathered over a sequence-parallel group)."""
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        """The inner phase's output as the caller's dispatch expects it."""
        return data


def _mesh_sp_size(device_mesh: Any) -> int:
    names = getattr(device_mesh, "mesh_dim_names", None) or ()
    return int(device_mesh["sp"].size()) if "sp" in names else 1


class FSDPUlyssesShardingManager(BaseShardingManager):
    """Switch to a model's Ulysses sequence-parallel group: the identity for a worker without sequence parallelism
    (``device_mesh=None``, or an ``sp`` dimension of size 1); an ``sp`` group larger than 1 is refused."""

    def __init__(self, device_mesh: Any = None) -> None:
        super().__init__()
        if device_mesh is not None and _mesh_sp_size(device_mesh) > 1:
            raise SequenceParallelNotSupportedError(
                f"FSDPUlyssesShardingManager: a sequence-parallel mesh of size "
                f"{_mesh_sp_size(device_mesh)}; Ulysses sequence parallelism is not part of this "
                "build (set ulysses_sequence_parallel_size=1)"
            )
        self.device_mesh = device_mesh
