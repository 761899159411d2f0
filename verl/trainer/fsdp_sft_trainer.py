"""verl's older SFT command line: ``torchrun --nproc_per_node N -m verl.trainer.fsdp_sft_trainer ...``.

Config: ``verl/trainer/config/sft_trainer_legacy.yaml`` with that trainer's keys (``model.partial_pretrain``,
``data.prompt_key``/``response_key`` and their ``*_dict_keys``, ``data.multiturn.*``, ``optim.lr_scheduler``,
``trainer.checkpoint.*``; docs/sft.md). It runs the same :class:`~verl.trainer.sft.trainer.SFTTrainer` as
``verl.trainer.sft_trainer`` and writes the same ``global_step_{k}/`` checkpoints.

The Python API of that module is here too: :class:`FSDPSFTTrainer` (the trainer a recipe builds from that config,
its device meshes, a tokenizer and data sets), :func:`create_sft_dataset` and :func:`collate_sft_batch`.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from verl.trainer.sft.cli import run_translated, train_or_exit
from verl.trainer.sft.config import SFTCustomClsConfig, SFTMultiturnConfig
from verl.trainer.sft.legacy_keys import legacy_tree_to_sft_config
from verl.utils.config_builder import as_config

__all__ = ["FSDPSFTTrainer", "collate_sft_batch", "create_sft_dataset", "extract_step", "main", "run_sft"]


def extract_step(path: str) -> int | None:
    """The ``k`` of the first ``global_step_{k}`` in ``path``, or None."""
    match = re.search(r"global_step_(\d+)", str(path))
    return int(match.group(1)) if match else None


def run_sft(config: DictConfig | dict[str, Any]) -> Path:
    """Train from a composed ``sft_trainer_legacy`` config; returns the last ``global_step_{k}`` folder."""
    return run_translated(config, legacy_tree_to_sft_config)


def create_sft_dataset(
    data_paths: str | Sequence[str], data_config: Mapping[str, Any], tokenizer: Any, max_samples: int = -1
) -> torch.utils.data.Dataset:
    """The SFT data set a ``data`` block describes: ``data.custom_cls`` (built as ``cls(parquet_files=, tokenizer=,
    config=, max_samples=)``), else :class:`~verl.utils.dataset.multiturn_sft_dataset.MultiTurnSFTDataset` with
    ``data.multiturn.enable``, else :class:`~verl.utils.dataset.sft_dataset.SFTDataset`."""
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.dataset.sft_dataset import SFTDataset

    custom = as_config(data_config.get("custom_cls"), SFTCustomClsConfig, "data.custom_cls")
    if custom.path:
        from verl.utils.import_utils import load_extern_object

        cls = load_extern_object(
            custom.path, custom.name or "", config_key="data.custom_cls.path", what="dataset class"
        )
    elif as_config(data_config.get("multiturn"), SFTMultiturnConfig, "data.multiturn").enable:
        cls = MultiTurnSFTDataset
    else:
        cls = SFTDataset
    kwargs: dict[str, Any] = {"parquet_files": data_paths, "tokenizer": tokenizer, "config": data_config}
    if "max_samples" in inspect.signature(cls).parameters:
        kwargs["max_samples"] = max_samples
    return cls(**kwargs)


def collate_sft_batch(batch: Sequence[dict[str, torch.Tensor]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Stack SFT items into a batch; items of different lengths (``pad_mode=no_padding``) are right-padded.

    Padding uses ``pad_token_id`` for ``input_ids`` and 0 elsewhere, and an ``attention_mask`` marking the real
    tokens is added when the items have none, so the batch is what :class:`FSDPSFTTrainer` trains on.
    """
    if not batch:
        raise ValueError("collate_sft_batch: empty batch")
    keys = list(batch[0])
    for index, item in enumerate(batch):
        if list(item) != keys:
            raise KeyError(f"collate_sft_batch: item {index} has keys {sorted(item)}, item 0 has {sorted(keys)}")
    out: dict[str, torch.Tensor] = {}
    lengths = [int(item[keys[0]].shape[-1]) for item in batch]
    for key in keys:
        values = [item[key] for item in batch]
        if len({tuple(v.shape) for v in values}) == 1:
            out[key] = torch.stack(values)
            continue
        width = max(int(v.shape[-1]) for v in values)
        fill = pad_token_id if key == "input_ids" else 0
        out[key] = torch.stack([torch.nn.functional.pad(v, (0, width - int(v.shape[-1])), value=fill) for v in values])
    if "attention_mask" not in out:
        width = out[keys[0]].shape[-1]
        out["attention_mask"] = (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()
    return out


class FSDPSFTTrainer:
    """verl's SFT trainer class, driving :class:`verl.trainer.sft.trainer.SFTTrainer`.

    Args:
        config: the ``sft_trainer_legacy`` config tree (what ``fsdp_sft_trainer`` composes), translated with the same
            key rules as the command line.
        device_mesh: verl's 1-D ``("fsdp",)`` mesh; its size must be the launcher's world size (this trainer shards
            over all processes). ``None`` is accepted.
        ulysses_device_mesh: verl's ``("dp", "sp")`` mesh; sequence parallelism is not implemented here, so its
            ``sp`` size must be 1 (or the mesh ``None``).
        tokenizer: the tokenizer the data sets were built with.
        train_dataset, val_dataset: SFT data sets (items of ``input_ids``, ``attention_mask``, ``position_ids``,
            ``loss_mask``, as :func:`create_sft_dataset` builds them); ``val_dataset`` may be ``None``.

    ``fit()`` trains and returns the last checkpoint folder; the trainer it drives is ``self.trainer``.
    """

    def __init__(
        self,
        config: Any,
        device_mesh: Any,
        ulysses_device_mesh: Any,
        tokenizer: Any,
        train_dataset: torch.utils.data.Dataset,
        val_dataset: torch.utils.data.Dataset | None,
    ) -> None:
        from verl.trainer.sft.trainer import SFTTrainer

        tree = (
            cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))
            if isinstance(config, DictConfig)
            else dict(config)
        )
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if device_mesh is not None and int(device_mesh.size()) != world_size:
            raise ValueError(
                f"FSDPSFTTrainer: device_mesh has {device_mesh.size()} devices but {world_size} "
                "process(es) run (WORLD_SIZE); this trainer shards the model over all of them"
            )
        sp_size = _sp_size(ulysses_device_mesh)
        if sp_size != 1:
            raise ValueError(
                f"FSDPSFTTrainer: ulysses_device_mesh has sp size {sp_size}; sequence parallelism is "
                "not implemented here (ulysses_sequence_parallel_size must be 1)"
            )
        self.config = config
        self.device_mesh = device_mesh
        self.ulysses_device_mesh = ulysses_device_mesh
        self.tokenizer = tokenizer
        self.sft_config = legacy_tree_to_sft_config(tree)
        self.trainer = SFTTrainer(
            self.sft_config, tokenizer=tokenizer, train_dataset=train_dataset, val_dataset=val_dataset
        )
        self.train_dataset, self.val_dataset = train_dataset, val_dataset

    @property
    def fsdp_model(self) -> torch.nn.Module:
        return self.trainer.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer

    @property
    def lr_scheduler(self) -> Any:
        return self.trainer.lr_scheduler

    @property
    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return self.trainer.train_loader

    @property
    def val_dataloader(self) -> torch.utils.data.DataLoader | None:
        return self.trainer.val_loader

    @property
    def total_steps(self) -> int:
        return self.trainer.total_steps

    def training_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One optimizer step on a global batch's share of this rank; the step's metrics."""
        return self.trainer.train_step(batch)

    def fit(self) -> Path:
        """Train as configured; returns the last checkpoint folder (``global_step_{k}``)."""
        return self.trainer.fit()


def _sp_size(mesh: Any) -> int:
    if mesh is None:
        return 1
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    return int(mesh.size(names.index("sp"))) if "sp" in names else 1


@hydra.main(config_path="config", config_name="sft_trainer_legacy", version_base=None)
def main(config: DictConfig) -> None:
    train_or_exit(config, legacy_tree_to_sft_config)


if __name__ == "__main__":
    main()
