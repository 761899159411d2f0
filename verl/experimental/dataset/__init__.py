"""verl's experimental data-set interfaces: base classes for user samplers (curricula)."""

from verl.experimental.dataset.sampler import AbstractCurriculumSampler, AbstractSampler

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]
