"""Typed config of the SFT trainer (``verl/trainer/config/sft_trainer.yaml``).

Groups ``model`` and ``optim`` reuse the PPO trainer's :class:`HFModelConfig` and :class:`OptimizerConfig`, so a model
block or an optimizer block means the same thing in both entry points. ``data`` and ``trainer`` are SFT-specific;
the ``data`` classes are defined in :mod:`verl.utils.dataset.config` (the data sets read them) and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, ConfigError, check
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.dataset.config import SFT_TRUNCATION_MODES as TRUNCATION_MODES
from verl.utils.dataset.config import SFTCustomClsConfig, SFTDataConfig, SFTMultiturnConfig
from verl.workers.config.actor import CheckpointConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.config.optimizer import OptimizerConfig

__all__ = [
    "AFTER_EACH_EPOCH",
    "MIXED_PRECISION",
    "RESUME_MODES",
    "TRUNCATION_MODES",
    "SFTConfig",
    "SFTCustomClsConfig",
    "SFTDataConfig",
    "SFTMultiturnConfig",
    "SFTTrainerConfig",
    "build_sft_config",
]

MIXED_PRECISION = ("auto", "bf16", "none")
_DEVICES = ("auto", "cpu", "cuda")
_LOGGERS = ("console", "file", "tensorboard", "wandb", "mlflow")
RESUME_MODES = ("auto", "disable", "resume_path")
# verl's spelling of "once per epoch" for trainer.save_freq / trainer.test_freq
AFTER_EACH_EPOCH = "after_each_epoch"


@dataclass
class SFTTrainerConfig(BaseConfig):
    """Run length, logging, checkpointing and placement.

    ``total_training_steps`` (when set) fixes the number of optimizer steps, cycling through the data as often as
    needed; otherwise the run lasts ``total_epochs`` passes. ``save_freq``/``test_freq`` <= 0 disable periodic saving
    and validation (the final checkpoint and final validation always happen); ``"after_each_epoch"`` means once per
    pass over the data. ``nnodes``/``n_gpus_per_node`` default to what the launcher (torchrun) says; when given they
    must agree with it.

    Checkpoints: every ``save_freq`` steps the trainer writes ``global_step_{k}/`` holding what
    ``checkpoint.save_contents`` names (see :mod:`verl.trainer.sft.resume`). ``final_export`` writes the final model
    to ``{default_local_dir}/huggingface`` (``main_sft``); without it the last step is saved as ``global_step_{k}/``
    like any other (verl's CLIs). ``resume_mode``: ``auto`` continues from the newest checkpoint in
    ``default_local_dir`` (or ``resume_from_path`` when set), ``resume_path`` from ``resume_from_path``, ``disable``
    starts fresh. ``max_ckpt_to_keep`` prunes older ``global_step_*`` folders of this run; ``default_hdfs_dir``
    mirrors each complete checkpoint there.
    """

    default_local_dir: str = "checkpoints/verl_sft/sft"
    project_name: str = "verl_sft"
    experiment_name: str = "sft"
    total_epochs: int = 1
    total_training_steps: int | None = None
    logger: list[str] = field(default_factory=lambda: ["console"])
    seed: int = 1
    device: str = "auto"
    mixed_precision: str = "auto"
    save_freq: int | str = -1
    test_freq: int | str = -1
    nnodes: int | None = None
    n_gpus_per_node: int | None = None
    final_export: bool = True
    resume_mode: str = "disable"
    resume_from_path: str | None = None
    max_ckpt_to_keep: int | None = None
    default_hdfs_dir: str | None = None

    def __post_init__(self) -> None:
        check(bool(self.default_local_dir), "default_local_dir", "must name a folder for checkpoints")
        check(self.total_epochs >= 1, "total_epochs", f"must be >= 1, got {self.total_epochs}")
        check(
            self.total_training_steps is None or self.total_training_steps >= 1,
            "total_training_steps",
            f"must be >= 1 or null, got {self.total_training_steps}",
        )
        bad = [name for name in self.logger if name not in _LOGGERS]
        check(not bad, "logger", f"unknown logger(s) {bad}; allowed: {list(_LOGGERS)}")
        check(self.device in _DEVICES, "device", f"must be one of {list(_DEVICES)}, got {self.device!r}")
        check(
            self.mixed_precision in MIXED_PRECISION,
            "mixed_precision",
            f"must be one of {list(MIXED_PRECISION)}, got {self.mixed_precision!r}",
        )
        check(self.nnodes is None or self.nnodes >= 1, "nnodes", f"must be >= 1 or null, got {self.nnodes}")
        for key in ("save_freq", "test_freq"):
            value = getattr(self, key)
            check(
                isinstance(value, int) or value == AFTER_EACH_EPOCH,
                key,
                f"must be an integer or {AFTER_EACH_EPOCH!r}, got {value!r}",
            )
        check(
            self.resume_mode in RESUME_MODES,
            "resume_mode",
            f"must be one of {list(RESUME_MODES)}, got {self.resume_mode!r}",
        )
        check(
            self.resume_mode != "resume_path" or bool(self.resume_from_path),
            "resume_from_path",
            "must name a global_step_<k> folder when resume_mode=resume_path",
        )
        check(
            self.n_gpus_per_node is None or self.n_gpus_per_node >= 1,
            "n_gpus_per_node",
            f"must be >= 1 or null, got {self.n_gpus_per_node}",
        )


@dataclass
class SFTConfig(BaseConfig):
    """The whole SFT run: ``data``, ``model``, ``optim``, ``checkpoint`` and ``trainer`` groups.

    ``checkpoint.save_contents`` (PPO's :class:`CheckpointConfig`): ``hf_model`` alone (the default) exports a Hugging
    Face folder per save; ``model``/``optimizer``/``extra`` add the resumable sharded state, readable by
    ``python -m verl.model_merger``.
    """

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: HFModelConfig = field(default_factory=HFModelConfig)
    optim: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-5))
    checkpoint: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(save_contents=["hf_model"]))
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)


def build_sft_config(config: Any) -> SFTConfig:
    """Validate a composed OmegaConf tree (or a plain dict) into :class:`SFTConfig`; errors name the dotted key."""
    if isinstance(config, SFTConfig):
        return config
    data = config
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            data = OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a hard dependency
        pass
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping for the SFT config, got {type(config).__name__}")
    data = {key: value for key, value in data.items() if key != "hydra"}
    return omega_conf_to_dataclass(data, SFTConfig)
