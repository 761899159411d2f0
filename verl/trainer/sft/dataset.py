"""The SFT trainer's data set; implemented in :mod:`verl.utils.dataset.sft_parquet` (see there for the layout)."""

from verl.utils.dataset.sft_parquet import (
    MESSAGE_ROLES,
    SFTDataError,
    SFTDataset,
    read_prompt_response_columns,
    tokenize_conversation,
)

__all__ = ["MESSAGE_ROLES", "SFTDataError", "SFTDataset", "read_prompt_response_columns", "tokenize_conversation"]
