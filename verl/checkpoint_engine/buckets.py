"""Stream a trainer model's weights as plain Hugging Face tensors, in buckets of bounded size.

Why buckets: a weight update must never hold the whole model twice (sharded trainer copy + a full gathered copy),
so full tensors are gathered one at a time and shipped in groups of at most ``bucket_bytes``; a single tensor
larger than the limit travels alone. Why plain names: the rollout engine loads by Hugging Face parameter name and
knows nothing of FSDP, ``torch.compile``, activation-checkpoint or peft wrappers.

Sharded (DTensor) parameters are gathered with collectives: every trainer rank must run the same iterator to the
end, in the same order, even the ranks that send nothing. Under FSDP2 a whole parameter group (one
``fully_shard``-ed module) is gathered with one ``unshard()``, one all-gather for all its tensors instead of one
``full_tensor()`` each (25 ms -> 5 ms for the tiny model on two gloo ranks); at most the current group and the root
group are unsharded at a time, and every group is resharded before the iterator ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from verl.checkpoint_engine.lora import LORA_PARAM_MARKERS, is_lora_layer, lora_delta
from verl.utils.tensor_serialization import decode_tensor, encode_tensor

__all__ = [
    "normalize_weight_name",
    "iter_named_weights",
    "iter_weight_buckets",
    "bucket_nbytes",
    "megabytes_to_bytes",
    "OutOfBandBucket",
    "BucketPacker",
]

_WRAPPER_COMPONENTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod", "base_layer")
_LEADING_PREFIXES = ("module.", "base_model.model.")
_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+(?=\.)")


def megabytes_to_bytes(megabytes: float) -> int:
    """``update_weights_bucket_megabytes`` in bytes (1 MB = 2**20 bytes)."""
    if not megabytes or megabytes <= 0:
        raise ValueError(f"update_weights_bucket_megabytes must be > 0, got {megabytes!r}")
    return int(megabytes * (1 << 20))


def normalize_weight_name(name: str) -> str:
    """The Hugging Face name of a trainer state-dict key: wrapper components and prefixes removed.

    ``module.`` (DDP) and ``base_model.model.`` (peft) are stripped as leading prefixes only; FSDP1,
    activation-checkpoint, ``torch.compile`` and peft ``base_layer`` components wherever they appear; a peft
    ``modules_to_save.<adapter>`` copy takes the place of the module it shadows.
    """
    for prefix in _LEADING_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = _MODULES_TO_SAVE.sub("", name)
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_COMPONENTS)


def _is_adapter_only(parts: list[str]) -> bool:
    return any(part in LORA_PARAM_MARKERS for part in parts) or "original_module" in parts


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else tensor


def _fsdp_groups(module: nn.Module) -> dict[str, nn.Module]:
    """FSDP2 modules by path ("" for the root); empty without FSDP2 or when nothing is sharded with it."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return {}
    return {path: sub for path, sub in module.named_modules() if isinstance(sub, FSDPModule)}


class _GroupGatherer:
    """Full tensors of FSDP2-sharded parameters, gathered a parameter group at a time with ``unshard()``."""

    def __init__(self, module: nn.Module, groups: dict[str, nn.Module]):
        self.module = module
        self.groups = groups
        self.by_depth = sorted(groups, key=lambda path: path.count(".") + bool(path), reverse=True)
        self.current: str | None = None
        self.unsharded: set[str] = set()

    def _owner(self, key: str) -> str:
        for path in self.by_depth:  # the deepest group whose module holds the key
            if path == "" or key.startswith(path + "."):
                return path
        raise KeyError(key)

    def full(self, key: str) -> torch.Tensor:
        """The gathered tensor of state-dict entry ``key``, as a copy that outlives the group's reshard."""
        owner = self._owner(key)
        if owner != self.current:
            if self.current not in (None, ""):  # keep the root's group: its entries come first and last
                self._reshard(self.current)
            self.current = owner
        if owner not in self.unsharded:
            self.groups[owner].unshard()
            self.unsharded.add(owner)
        holder, _, attr = key.rpartition(".")
        value = getattr(self.module.get_submodule(holder) if holder else self.module, attr)
        if callable(getattr(value, "full_tensor", None)):  # not managed by this group (e.g. a sharded buffer)
            return value.full_tensor()
        return value.detach().clone()  # the group's reshard frees the unsharded storage

    def _reshard(self, path: str) -> None:
        if path in self.unsharded:
            self.groups[path].reshard()
            self.unsharded.discard(path)

    def close(self) -> None:
        for path in list(self.unsharded):
            self._reshard(path)


@torch.no_grad()
def iter_named_weights(
    module: nn.Module, dtype: torch.dtype | None = None, device: str | torch.device | None = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, full tensor)`` for every persistent weight of ``module``, one tensor gathered at a time.

    ``device=None`` leaves each gathered tensor where it is (the same-process engine on an accelerator).

    LoRA layers are yielded merged (``W + scaling * B @ A``) and their factors skipped. A parameter tied to an
    earlier one (shared embedding / lm_head) is sent once: loading it updates the tied copy too.

    Raises:
        ValueError: two keys normalise to the same name (both named).
    """
    state = module.state_dict(keep_vars=True)
    groups = _fsdp_groups(module)
    gatherer = _GroupGatherer(module, groups) if groups else None
    try:
        yield from _walk_state(module, state, gatherer, dtype, device)
    finally:
        if gatherer is not None:
            gatherer.close()


def _walk_state(
    module: nn.Module,
    state: dict[str, torch.Tensor],
    gatherer: _GroupGatherer | None,
    dtype: torch.dtype | None,
    device: str | torch.device | None,
) -> Iterator[tuple[str, torch.Tensor]]:
    seen_names: dict[str, str] = {}
    seen_tensors: set[int] = set()
    for key, value in state.items():
        parts = key.split(".")
        if _is_adapter_only(parts):
            continue
        name = normalize_weight_name(key)
        if name in seen_names:
            raise ValueError(
                f"checkpoint engine: state-dict keys {seen_names[name]!r} and {key!r} both map to {name!r}"
            )
        seen_names[name] = key
        if id(value) in seen_tensors:
            continue
        seen_tensors.add(id(value))
        sharded = callable(getattr(value, "full_tensor", None))
        tensor = (gatherer.full(key) if gatherer is not None and sharded else _full(value)).detach()
        if "base_layer" in parts and parts[-1] == "weight":
            layer_path = ".".join(parts[: parts.index("base_layer")])
            layer = module.get_submodule(layer_path)
            delta = lora_delta(layer, layer_path) if is_lora_layer(layer) else None
            if delta is not None:
                tensor = (tensor.float() + delta.to(tensor.device)).to(tensor.dtype)
        tensor = tensor.to(device=device or tensor.device, dtype=dtype or tensor.dtype)
        yield name, tensor


def bucket_nbytes(bucket: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Total payload bytes of a bucket."""
    return sum(t.numel() * t.element_size() for _, t in bucket)


def iter_weight_buckets(
    source: nn.Module | Iterable[tuple[str, torch.Tensor]],
    bucket_bytes: int,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = "cpu",
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group named CPU tensors into buckets of at most ``bucket_bytes`` (an oversized tensor gets its own).

    Args:
        source: a trainer module (walked with ``iter_named_weights``) or ``(name, tensor)`` pairs.
        bucket_bytes: the bound on one bucket's payload (``megabytes_to_bytes(update_weights_bucket_megabytes)``).
        dtype: cast every tensor to this dtype (the rollout's) before it counts and ships.
        device: where the yielded tensors live (None: where they were gathered).

    Raises:
        ValueError: ``bucket_bytes`` is not positive.
    """
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
        raise ValueError(f"iter_weight_buckets: bucket_bytes must be a positive int, got {bucket_bytes!r}")
    if isinstance(source, nn.Module):
        named: Iterable[tuple[str, torch.Tensor]] = iter_named_weights(source, dtype, device)
    else:
        named = ((n, t.detach().to(device=device or t.device, dtype=dtype or t.dtype)) for n, t in source)
    packer = BucketPacker(bucket_bytes)
    for name, tensor in named:
        yield from packer.add(name, tensor)
    yield from packer.finish()


class BucketPacker:
    """Greedy bucket packing, fed one tensor at a time (so sync and async producers share it).

    A bucket is closed when the next entry would overflow it; an entry larger than the limit travels alone.
    ``fusion_groups`` name tensors that must arrive in one bucket: each group is a tuple of name suffixes (e.g.
    ``(".attn.wq_a.weight", ".attn.wkv.weight")``), and the tensors sharing a prefix with one suffix each are held
    back until the group is complete, then placed together (the bucket is cut before the group, never inside it).
    An engine that fuses such tensors into one parameter on load needs both halves in the same load call.
    """

    def __init__(self, bucket_bytes: int, fusion_groups: tuple[tuple[str, ...], ...] = ()) -> None:
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be a positive int, got {bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes
        self.fusion_groups = tuple(tuple(group) for group in fusion_groups)
        self._bucket: list[tuple[str, torch.Tensor]] = []
        self._size = 0
        self._staged: dict[tuple[str, int], list[tuple[str, torch.Tensor]]] = {}

    def _fusion_key(self, name: str) -> tuple[str, int, int] | None:
        """``(prefix, group index, group size)`` when ``name`` ends with a suffix of one fusion group."""
        matches = [
            (index, suffix, len(group))
            for index, group in enumerate(self.fusion_groups)
            for suffix in group
            if name.endswith(suffix)
        ]
        if len(matches) > 1:
            raise ValueError(f"{name!r} matches several fusion group suffixes: {[m[1] for m in matches]}")
        if not matches:
            return None
        index, suffix, size = matches[0]
        return name[: -len(suffix)], index, size

    def add(self, name: str, tensor: torch.Tensor) -> list[list[tuple[str, torch.Tensor]]]:
        """Take one tensor; returns the buckets this closed (zero or one)."""
        key = self._fusion_key(name) if self.fusion_groups else None
        if key is None:
            entries = [(name, tensor)]
        else:
            prefix, index, size = key
            staged = self._staged.setdefault((prefix, index), [])
            staged.append((name, tensor))
            if len(staged) < size:
                return []
            entries = self._staged.pop((prefix, index))
        closed = []
        nbytes = bucket_nbytes(entries)
        if self._bucket and self._size + nbytes > self.bucket_bytes:
            closed.append(self._bucket)
            self._bucket, self._size = [], 0
        self._bucket.extend(entries)
        self._size += nbytes
        return closed

    def finish(self) -> list[list[tuple[str, torch.Tensor]]]:
        """The last bucket; raises ValueError when a fusion group is still missing members."""
        if self._staged:
            incomplete = {f"{prefix}*": [n for n, _ in staged] for (prefix, _), staged in self._staged.items()}
            raise ValueError(f"fused parameter groups never completed in this weight sync: {incomplete}")
        last, self._bucket, self._size = self._bucket, [], 0
        return [last] if last else []


class OutOfBandBucket:
    """A bucket that pickles its tensors as out-of-band byte buffers and unpickles as a plain ``(name, tensor)`` list.

    Why: torch pickles a tensor's bytes in-band, so ``ray.put`` of a bucket copies them into the pickle and the
    receiver copies them out again (about 4x slower than the object store's own transfer for a 64 MiB bucket on
    CPU). Wrapped, the bytes are written straight into the object store, and the receiver's tensors are read-only
    views of it: the engine's load is the only copy on that side (:mod:`verl.utils.tensor_serialization`; 100M
    float32 parameters: about 0.3 s less per update than decoding into private copies). Engines copy a bucket into
    their own parameters and must not write into it. The receiver needs nothing of this class: it gets a list.
    """

    def __init__(self, named_tensors: Iterable[tuple[str, torch.Tensor]]):
        self.named_tensors = list(named_tensors)

    def __reduce__(self) -> tuple:
        return _decode_bucket, ([(name, encode_tensor(tensor)) for name, tensor in self.named_tensors],)


def _decode_bucket(encoded: list[tuple[str, tuple]]) -> list[tuple[str, torch.Tensor]]:
    return [(name, decode_tensor(state, copy_readonly=False)) for name, state in encoded]
