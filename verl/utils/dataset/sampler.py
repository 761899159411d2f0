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

from verl.utils.import_utils import load_extern_object

__all__ = ["DEFAULT_SEED", "create_rl_sampler"]

DEFAULT_SEED = 1


def _sub(config: Any, key: str) -> Any:
    value = config.get(key) if config is not None else None
    return value if value is not None else {}


def create_rl_sampler(data_config: Any, data_source: Any, seed: int | None = None) -> Sampler:
    """Sampler for ``data_source`` as ``data_config`` asks.

    ``data.sampler.class_path``/``class_name`` names a user ``Sampler`` subclass, built as
    ``cls(data_source=..., data_config=...)``. Otherwise ``data.shuffle`` picks a random order seeded with ``seed``
    (the resolved trainer seed), else ``data.seed``, else 1; without shuffle the order is sequential.
    """
    sampler_cfg = _sub(data_config, "sampler")
    class_path = sampler_cfg.get("class_path")
    if class_path:
        class_name = sampler_cfg.get("class_name")
        cls = load_extern_object(class_path, class_name, config_key="data.sampler.class_path", what="sampler class")
        if not (isinstance(cls, type) and issubclass(cls, Sampler)):
            raise TypeError(
                f"data.sampler.class_name={class_name!r} in {class_path!r} must be a subclass of "
                f"torch.utils.data.Sampler, got {cls!r}"
            )
        return cls(data_source=data_source, data_config=data_config)

    shuffle = data_config.get("shuffle", True) if data_config is not None else True
    if not shuffle:
        return SequentialSampler(data_source)
    if seed is None:
        seed = data_config.get("seed") if data_config is not None else None
    generator = torch.Generator()
    generator.manual_seed(DEFAULT_SEED if seed is None else int(seed))
    return RandomSampler(data_source, generator=generator)
