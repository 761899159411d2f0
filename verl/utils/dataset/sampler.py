"""Samplers for the prompt data loader: seeded random, sequential, or a user class (curricula).

The random sampler is torchdata's ``RandomSampler``: unlike ``torch.utils.data.RandomSampler`` its iterator saves the
generator state, so a checkpointed ``StatefulDataLoader`` resumes in any epoch (not only the first) with the same order
an uninterrupted run would have produced.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import RandomSampler

from verl.utils.config_builder import as_config
from verl.utils.dataset.config import DataConfig
from verl.utils.import_utils import load_extern_object

__all__ = ["DEFAULT_SEED", "FixedPermutationSampler", "create_rl_sampler", "create_val_sampler"]

DEFAULT_SEED = 1


def _resolve_seed(data: DataConfig, seed: int | None) -> int:
    if seed is None:
        seed = data.seed
    return DEFAULT_SEED if seed is None else int(seed)


class FixedPermutationSampler(Sampler[int]):
    """One seeded permutation of ``range(size)``, the same on every pass.

    Validation reads it: every validation sees the prompts in the same order, so its metrics stay comparable across
    steps, and a resumed run validates exactly like an uninterrupted one without any sampler state to checkpoint.
    """

    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator()
        generator.manual_seed(seed)
        self.order: list[int] = torch.randperm(size, generator=generator).tolist()

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def create_val_sampler(data_config: Any, data_source: Any, seed: int | None = None) -> Sampler | None:
    """Sampler of the validation loader: a seeded :class:`FixedPermutationSampler` when ``data.validation_shuffle``
    is true (seed as for :func:`create_rl_sampler`), else None (file order)."""
    data = as_config(data_config, DataConfig, "data")
    if not data.validation_shuffle:
        return None
    return FixedPermutationSampler(len(data_source), _resolve_seed(data, seed))


def create_rl_sampler(data_config: Any, data_source: Any, seed: int | None = None) -> Sampler:
    """Sampler for ``data_source`` as ``data_config`` asks.

    ``data.sampler.class_path``/``class_name`` names a user ``Sampler`` subclass, built as
    ``cls(data_source=..., data_config=...)``. Otherwise ``data.shuffle`` picks a random order seeded with ``seed``
    (the trainers pass ``data.seed``, or ``trainer.seed`` when it is unset), else ``data.seed``, else 1; without
    shuffle the order is sequential.
    """
    data = as_config(data_config, DataConfig, "data")
    class_path = data.sampler.class_path
    if class_path:
        class_name = data.sampler.class_name
        cls = load_extern_object(
            class_path, class_name or "", config_key="data.sampler.class_path", what="sampler class"
        )
        if not (isinstance(cls, type) and issubclass(cls, Sampler)):
            raise TypeError(
                f"data.sampler.class_name={class_name!r} in {class_path!r} must be a subclass of "
                f"torch.utils.data.Sampler, got {cls!r}"
            )
        return cls(data_source=data_source, data_config=data_config)

    if not data.shuffle:
        return SequentialSampler(data_source)
    generator = torch.Generator()
    generator.manual_seed(_resolve_seed(data, seed))
    return RandomSampler(data_source, generator=generator)
