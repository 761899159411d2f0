"""Hugging Face export of an FSDP2 model; implemented in :mod:`verl.utils.checkpoint.hf_export`."""

from verl.utils.checkpoint.hf_export import export_hf_weights

__all__ = ["export_hf_weights"]
