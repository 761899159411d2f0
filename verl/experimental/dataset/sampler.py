"""Base classes for user samplers of the prompt loader (``data.sampler.class_path`` / ``class_name``).

The trainer builds a user sampler as ``cls(data_source=<train dataset>, data_config=<the data config>)``
(:func:`verl.utils.dataset.sampler.create_rl_sampler`); subclassing :class:`AbstractSampler` makes that constructor
contract explicit. A curriculum (:class:`AbstractCurriculumSampler`) also adapts its order to training: after each
step the trainer hands it the step's batch through :meth:`AbstractCurriculumSampler.update` (e.g. per-prompt scores,
to sample the prompts the policy still fails more often). A curriculum sampler must run in the trainer's process, so
the prompt loader needs ``data.dataloader_num_workers=0`` (workers would iterate a copy that never sees updates).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Sized
from typing import Any

from torch.utils.data import Sampler

from verl.protocol import DataProto

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]


class AbstractSampler(Sampler[int], metaclass=ABCMeta):
    """A sampler of prompt indices built from the data set and the ``data`` config (abstract methods are enforced:
    a subclass missing one fails when built, not mid-training)."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any) -> None:
        """Keep what ``__iter__``/``__len__`` need; ``data_config`` is the trainer's ``data`` group."""


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler whose order depends on how training goes (see the module docstring)."""

    @abstractmethod
    def update(self, batch: DataProto) -> None:
        """Take the finished step's batch (prompts, rewards, advantages, ...) into account for what comes next."""
