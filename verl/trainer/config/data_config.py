"""DataConfig (group ``data``): the prompt data set, its batching and truncation.

Defined in :mod:`verl.utils.dataset.config`, where the data sets and samplers that read it can import it; this module
keeps the trainer's import path."""

from __future__ import annotations

from verl.utils.dataset.config import TRUNCATION_MODES, CustomClsConfig, DataConfig, SamplerConfig

__all__ = ["TRUNCATION_MODES", "CustomClsConfig", "DataConfig", "SamplerConfig"]
