"""FSDPModelMerger: full weights from a checkpoint written by this package's FSDP2 trainers.

PPO actors/critics (``global_step_{k}/actor``, ``.../critic``) and verl-CLI SFT runs (``global_step_{k}``) save their
model shards with ``torch.distributed.checkpoint`` under ``<local_dir>/dcp``; the shards of any number of ranks are
read back here in one process, without starting a process group, and renamed to Hugging Face parameter names.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from verl.model_merger.base_model_merger import BaseModelMerger, split_lora

__all__ = ["FSDPModelMerger", "load_dcp_model_state"]

_MODEL_PREFIX = "model."


def _describe_contents(local_dir: Path) -> str:
    meta = local_dir / "checkpoint_meta.json"
    if meta.is_file():
        try:
            return f" (it was saved with save_contents={json.loads(meta.read_text()).get('contents')})"
        except (OSError, json.JSONDecodeError):
            pass
    return ""


def load_dcp_model_state(local_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every model tensor of the checkpoint in ``local_dir`` (full, on CPU), under its training-time names."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    local_dir = Path(local_dir)
    shard_dir = local_dir / "dcp"
    if not shard_dir.is_dir():
        if any(local_dir.glob("model_world_size_*_rank_*.pt")):
            raise ValueError(
                f"--local_dir {local_dir} holds upstream verl's per-rank model_world_size_*.pt files; "
                "this merger reads checkpoints written by this package (a dcp/ folder)"
            )
        if any((local_dir / "huggingface").glob("*.safetensors")):
            raise FileNotFoundError(
                f"--local_dir {local_dir}: no dcp/ folder of model shards, but "
                f"{local_dir / 'huggingface'} already is a full Hugging Face model: use it as is"
            )
        raise FileNotFoundError(
            f"--local_dir {local_dir}: no dcp/ folder of model shards; expected a checkpoint "
            "folder such as .../global_step_10/actor (PPO) or .../global_step_10 (SFT)"
        )
    reader = FileSystemReader(str(shard_dir))
    metadata = reader.read_metadata()
    state = {
        key[len(_MODEL_PREFIX) :]: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.state_dict_metadata.items()
        if key.startswith(_MODEL_PREFIX) and isinstance(meta, TensorStorageMetadata)
    }
    if not state:
        contents = _describe_contents(local_dir)
        raise ValueError(
            f"--local_dir {local_dir}: the checkpoint holds no model weights{contents}; save with "
            "'model' in checkpoint.save_contents"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.distributed is disabled.*")
        dcp.load({"model": state}, storage_reader=reader)
    return state


class FSDPModelMerger(BaseModelMerger):
    """``merge``: write ``target_dir``; ``test``: compare with ``test_hf_dir`` (names, shapes, dtypes, values)."""

    def merge_and_save(self) -> None:
        state = load_dcp_model_state(self.config.local_dir)
        print(f"Loaded {len(state)} tensors from {self.config.local_dir}/dcp")
        if self.config.operation == "merge":
            self.save_hf_model_and_tokenizer(state)
            if self.config.hf_upload:
                self.upload_to_huggingface()
        elif self.config.operation == "test":
            if not self.config.test_hf_dir:
                raise ValueError("test needs --test_hf_dir, the reference Hugging Face model folder")
            self._validate_state_dict(state)
        else:
            raise ValueError(f"unknown operation {self.config.operation!r}; use merge or test")

    def _validate_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Raise ValueError naming the first difference between the merged weights and the reference model's."""
        base, _ = split_lora(state)
        auto_class = self.get_transformers_auto_model_class()
        reference = auto_class.from_pretrained(
            self.config.test_hf_dir, dtype="auto", trust_remote_code=self.config.trust_remote_code
        ).state_dict()
        missing, extra = sorted(set(reference) - set(base)), sorted(set(base) - set(reference))
        if missing or extra:
            raise ValueError(
                f"merged weights differ in names from {self.config.test_hf_dir}: missing {missing[:5]}, "
                f"extra {extra[:5]}"
            )
        for key, want in reference.items():
            got = base[key].to(want.dtype)
            if got.shape != want.shape:
                raise ValueError(f"{key}: shape {tuple(got.shape)} != reference {tuple(want.shape)}")
            if not torch.allclose(got.float(), want.float(), rtol=1e-6, atol=1e-6):
                diff = float((got.float() - want.float()).abs().max())
                raise ValueError(f"{key}: values differ from {self.config.test_hf_dir} (max abs diff {diff:.3g})")
        print(f"test passed: {len(reference)} tensors match {self.config.test_hf_dir}")

    def cleanup(self) -> None:
        """Nothing to release: no process group or temporary files are created."""
