"""CriticWorker: one rank of the value model (FSDP2) used by GAE-style advantage estimators."""

from __future__ import annotations

import time
from typing import Any

import torch
from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer.config.trainer_config import TrainerConfig
from verl.workers.config import CriticConfig, FSDPCriticConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.fsdp.actor_worker import compute_dtype
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager
from verl.workers.fsdp.distributed import build_fsdp_mesh, device_for_rank, init_distributed, resolve_device
from verl.workers.fsdp.fsdp_wrap import apply_fsdp2, load_model, load_optimizer, offload_model, offload_optimizer
from verl.workers.fsdp.hf_export import export_hf_weights
from verl.workers.fsdp.model_loader import (
    export_config,
    load_critic_model,
    load_tokenizer,
    parse_dtype,
    resolve_model_path,
)
from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer
from verl.workers.fsdp.worker_config import (
    ConfigView,
    has_group,
    optim_with_total_steps,
    per_rank_update_sizes,
    read_group,
)

__all__ = ["CriticWorker"]


class CriticWorker(Worker):
    """Value-model worker. ``config`` is the ``critic`` group (verl's convention) or the whole flattened trainer
    config (then ``critic`` and, when present, ``trainer`` and ``rollout`` are read from it)."""

    def __init__(self, config: DictConfig | Any, **kwargs: Any) -> None:
        super().__init__()
        full = has_group(config, "critic")
        self.config = config
        self.critic_config: CriticConfig = (
            read_group(config, "critic", FSDPCriticConfig)
            if full
            else read_group({"critic": config}, "critic", FSDPCriticConfig)
        )
        trainer = read_group(config, "trainer", TrainerConfig) if full else TrainerConfig()
        self.trainer_config = trainer
        self.rollout_n = int(self.critic_config.rollout_n)
        self.model_config = self.critic_config.model
        self.model_path = resolve_model_path(self.model_config, key="critic.model.path")
        self.device_type = resolve_device(kwargs.get("device") or trainer.device)
        init_distributed(self.device_type, self.rank, self.world_size)
        self.device = device_for_rank(self.device_type, self.local_rank)
        torch.manual_seed(int(trainer.seed))
        self.critic_module_fsdp = None
        self.critic_optimizer = None
        self.critic_lr_scheduler = None
        self.critic: DataParallelPPOCritic | None = None
        self.checkpoint_manager: FSDPCheckpointManager | None = None

    def _flags(self) -> tuple[bool, bool]:
        fsdp_cfg = getattr(self.critic_config, "fsdp_config", None)
        return bool(getattr(fsdp_cfg, "param_offload", False)), bool(getattr(fsdp_cfg, "optimizer_offload", False))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the checkpoint with a fresh value head, shard it, and build optimizer and schedule."""
        fsdp_cfg = getattr(self.critic_config, "fsdp_config", None)
        dtype = parse_dtype(getattr(fsdp_cfg, "model_dtype", "fp32"), key="critic.fsdp_config.model_dtype")
        module = load_critic_model(self.model_config, self.model_path, dtype)
        hf_config = export_config(module)
        mesh = build_fsdp_mesh(
            self.device_type, self.world_size, getattr(fsdp_cfg, "fsdp_size", -1), key="critic.fsdp_config.fsdp_size"
        )
        module.to(self.device)
        self.critic_module_fsdp = apply_fsdp2(
            module,
            mesh,
            param_dtype=compute_dtype(self.device),
            reshard_after_forward=bool(getattr(fsdp_cfg, "reshard_after_forward", True)),
            cpu_offload=bool(getattr(fsdp_cfg, "offload_policy", False)) and self.device.type != "cpu",
            wrap_policy=getattr(fsdp_cfg, "wrap_policy", None),
            forward_prefetch=bool(getattr(fsdp_cfg, "forward_prefetch", False)),
            key="critic.fsdp_config",
        )
        optim = optim_with_total_steps(self.critic_config.optim, self.trainer_config)
        self.critic_optimizer = build_optimizer(self.critic_module_fsdp.parameters(), optim, key="critic.optim")
        self.critic_lr_scheduler = build_lr_scheduler(self.critic_optimizer, optim, key="critic.optim")
        sizes = per_rank_update_sizes(self.critic_config, "critic", self.rollout_n, self.world_size)
        view = ConfigView(self.critic_config, use_remove_padding=bool(self.model_config.use_remove_padding), **sizes)
        self.critic = DataParallelPPOCritic(view, self.critic_module_fsdp, self.critic_optimizer)
        self.checkpoint_manager = FSDPCheckpointManager(
            self.critic_module_fsdp,
            self.critic_optimizer,
            self.critic_lr_scheduler,
            processing_class=load_tokenizer(self.model_config, self.model_path),
            checkpoint_config=self.critic_config.checkpoint,
            hf_config=hf_config,
            export_weights=lambda out_dir: export_hf_weights(self.critic_module_fsdp, out_dir),
            generators={"critic_shuffle": self.critic._shuffle_generator},
            role="critic",
        )
        self._offload()

    def _load(self, with_optimizer: bool = False) -> None:
        param_offload, optim_offload = self._flags()
        if param_offload:
            load_model(self.critic_module_fsdp, self.device)
        if with_optimizer and optim_offload:
            load_optimizer(self.critic_optimizer, self.device)

    def _offload(self) -> None:
        param_offload, optim_offload = self._flags()
        if param_offload:
            offload_model(self.critic_module_fsdp)
        if optim_offload:
            offload_optimizer(self.critic_optimizer, self.device)

    def _critic(self, method: str) -> DataParallelPPOCritic:
        if self.critic is None:
            raise RuntimeError(f"CriticWorker.{method}: call init_model first")
        return self.critic

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` ([N, R]) before each response token, zero outside response_mask."""
        critic = self._critic("compute_values")
        data = data.to(self.device) if self.device.type != "cpu" else data
        micro = self.critic_config.forward_micro_batch_size_per_gpu
        data.meta_info.setdefault("micro_batch_size", micro or max(len(data), 1))
        data.meta_info.setdefault("use_dynamic_bsz", bool(self.critic_config.use_dynamic_bsz))
        data.meta_info.setdefault("max_token_len", self.critic_config.forward_max_token_len_per_gpu)
        self._load()
        values = critic.compute_values(data)
        self._offload()
        return DataProto.from_dict(tensors={"values": values.cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-regression update over this rank's share; returns ``meta_info['metrics']`` (lists)."""
        critic = self._critic("update_critic")
        data = data.to(self.device) if self.device.type != "cpu" else data
        self._load(with_optimizer=True)
        start = time.perf_counter()
        metrics = critic.update_critic(data)
        self.critic_lr_scheduler.step()
        metrics["timing_s/update_critic"] = [time.perf_counter() - start]
        self._offload()
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        extra_state: dict[str, Any] | None = None,
    ) -> str:
        if self.checkpoint_manager is None:
            raise RuntimeError("CriticWorker.save_checkpoint: call init_model first")
        self._load(with_optimizer=True)
        try:
            return self.checkpoint_manager.save_checkpoint(
                local_path, hdfs_path, global_step, max_ckpt_to_keep, extra_state
            )
        finally:
            self._offload()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wait_for_checkpoint(self) -> bool:
        """Finish a save still being written in the background (``checkpoint.async_save``); True if there was one."""
        if self.checkpoint_manager is None:
            raise RuntimeError("CriticWorker.wait_for_checkpoint: call init_model first")
        return self.checkpoint_manager.wait_for_save()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> dict[str, Any]:
        if self.checkpoint_manager is None:
            raise RuntimeError("CriticWorker.load_checkpoint: call init_model first")
        self._load(with_optimizer=True)
        try:
            return self.checkpoint_manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)
        finally:
            self._offload()
