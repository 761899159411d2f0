"""TrainerConfig (group ``trainer``): resources, schedule, logging and checkpointing of the driver loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.workers.config.inert_blocks import inert_block

__all__ = ["DEVICES", "LOGGERS", "RESUME_MODES", "TrainerConfig"]

DEVICES = ("auto", "cpu", "cuda")
# Accelerators verl supports that this build does not, named in the error a user gets for them.
_OTHER_DEVICES = {"npu": "Ascend NPUs", "hpu": "Intel Gaudi HPUs", "xpu": "Intel XPUs"}
LOGGERS = ("console", "file", "tensorboard", "wandb", "mlflow")
RESUME_MODES = ("auto", "disable", "resume_path")


@dataclass
class TrainerConfig(BaseConfig):
    """Driver settings.

    ``device``: ``auto`` picks cuda when available; on CPU ``n_gpus_per_node`` means worker processes per node and
    the process-group backend is gloo. ``total_training_steps=None`` derives the step count from
    ``total_epochs`` and the data size. ``save_freq``/``test_freq`` of ``-1`` (or 0) disable saving/validation.
    ``resume_mode``: ``auto`` resumes from the newest checkpoint in ``default_local_dir`` if any, ``disable``
    starts fresh, ``resume_path`` loads ``resume_from_path``. ``del_local_ckpt_after_load`` deletes the
    ``global_step_<k>`` folder a run resumed from once it is loaded. ``ray_wait_register_center_timeout``: seconds
    each worker group may take to start (every process up, every constructor returned) before the run fails with an
    error naming the group and how many of its workers came up. ``max_restarts``: how many times a run whose worker
    process (or node) died rebuilds its worker groups on the resources still there and resumes from its last
    checkpoint (0: the run fails with the error naming node, role and rank). ``logger`` takes one backend name or a
    list.
    The fields after ``validation_data_dir`` are verl's keys without effect here (``inert_keys.py``).
    """

    project_name: str = "verl_examples"
    experiment_name: str = "demo"
    logger: str | list[str] = field(default_factory=lambda: ["console"])
    log_val_generations: int = 0
    nnodes: int = 1
    n_gpus_per_node: int = 1
    device: str = "auto"
    seed: int = 1
    total_epochs: int = 30
    total_training_steps: int | None = None
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = True
    val_only: bool = False
    critic_warmup: int = 0
    balance_batch: bool = True
    default_local_dir: str = "checkpoints/verl_examples/demo"
    default_hdfs_dir: str | None = None
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    del_local_ckpt_after_load: bool = False
    max_actor_ckpt_to_keep: int | None = None
    max_critic_ckpt_to_keep: int | None = None
    ray_wait_register_center_timeout: int = 300
    max_restarts: int = 0
    rollout_data_dir: str | None = None
    validation_data_dir: str | None = None
    esi_redundant_time: float = 0
    checkpoint_callback_class: str | None = None
    use_v1: bool = True
    use_legacy_worker_impl: str | bool = "auto"
    v1: dict[str, Any] = field(default_factory=lambda: inert_block("trainer_v1"))

    def __post_init__(self) -> None:
        if isinstance(self.logger, str):  # `trainer.logger=console`, as verl accepts
            object.__setattr__(self, "logger", [self.logger])
        bad = [name for name in self.logger if name not in LOGGERS]
        check(not bad, "logger", f"unknown logger(s) {bad}; allowed: {list(LOGGERS)}")
        check(self.nnodes >= 1, "nnodes", f"must be >= 1, got {self.nnodes}")
        check(self.n_gpus_per_node >= 1, "n_gpus_per_node", f"must be >= 1, got {self.n_gpus_per_node}")
        check(
            self.device not in _OTHER_DEVICES,
            "device",
            f"{self.device!r}: {_OTHER_DEVICES.get(self.device)} are not supported by this build; use cpu or cuda",
        )
        check(self.device in DEVICES, "device", f"must be one of {list(DEVICES)}, got {self.device!r}")
        check(self.total_epochs >= 1, "total_epochs", f"must be >= 1, got {self.total_epochs}")
        check(
            self.total_training_steps is None or self.total_training_steps >= 1,
            "total_training_steps",
            f"must be >= 1 or null, got {self.total_training_steps}",
        )
        check(self.critic_warmup >= 0, "critic_warmup", f"must be >= 0, got {self.critic_warmup}")
        check(
            self.resume_mode in RESUME_MODES,
            "resume_mode",
            f"must be one of {list(RESUME_MODES)}, got {self.resume_mode!r}",
        )
        check(
            self.resume_mode != "resume_path" or bool(self.resume_from_path),
            "resume_from_path",
            "must be set when resume_mode=resume_path",
        )
        for key in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep"):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(
            self.ray_wait_register_center_timeout > 0,
            "ray_wait_register_center_timeout",
            f"must be > 0 seconds, got {self.ray_wait_register_center_timeout}",
        )
        check(self.max_restarts >= 0, "max_restarts", f"must be >= 0, got {self.max_restarts}")
        check(self.log_val_generations >= 0, "log_val_generations", f"must be >= 0, got {self.log_val_generations}")

    @property
    def world_size(self) -> int:
        """Trainer processes in total: ``nnodes * n_gpus_per_node``."""
        return self.nnodes * self.n_gpus_per_node

    def resolved_device(self) -> str:
        """``cpu`` or ``cuda``: resolves ``auto`` by asking torch whether CUDA is available."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
