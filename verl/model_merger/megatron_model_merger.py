"""MegatronModelMerger: verl's name for merging Megatron-LM checkpoints, which this package cannot produce or read.

Importing works (scripts that import it by name keep loading); building one fails and says why.
"""

from __future__ import annotations

from typing import Any

from verl.model_merger.base_model_merger import BaseModelMerger, ModelMergerConfig

__all__ = ["MEGATRON_UNSUPPORTED", "MegatronModelMerger"]

MEGATRON_UNSUPPORTED = (
    "--backend megatron: Megatron-LM checkpoints are not supported by this package, which trains with FSDP2 only "
    "(pip install verl[megatron] installs megatron-core, but no Megatron engine or converter ships here); "
    "checkpoints of this package's trainers merge with --backend fsdp"
)


class MegatronModelMerger(BaseModelMerger):
    """Refuses to run: see :data:`MEGATRON_UNSUPPORTED`."""

    def __init__(self, config: ModelMergerConfig, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(MEGATRON_UNSUPPORTED)

    def merge_and_save(self) -> None:
        raise NotImplementedError(MEGATRON_UNSUPPORTED)

    def cleanup(self) -> None:
        pass
