"""CriticWorker: one rank of the value model (FSDP2) used by GAE-style advantage estimators.

``init_model`` builds the value model through the overridable ``_build_critic_model_optimizer(config)`` (verl's
step: ``config`` is the ``critic`` group; it returns ``(module, optimizer, lr_scheduler)``), then the
``DataParallelPPOCritic`` and the checkpoint manager. A recipe's override is what runs; a result this worker cannot
use fails naming the recipe's class and the step.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer.config.trainer_config import TrainerConfig
from verl.workers.actor.hook_results import build_outputs
from verl.workers.config import CriticConfig, FSDPCriticConfig, FSDPEngineConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic, critic_config
from verl.workers.fsdp.actor_worker import compute_dtype
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager
from verl.workers.fsdp.distributed import build_fsdp_mesh, device_for_rank, init_distributed, resolve_device
from verl.workers.fsdp.fsdp_wrap import (
    apply_fsdp2,
    fsdp2_kwargs,
    is_sharded,
    load_model,
    load_optimizer,
    offload_model,
    offload_optimizer,
    remap_optimizer_params,
    shard_late_modules,
)
from verl.workers.fsdp.hf_export import export_hf_weights
from verl.workers.fsdp.model_loader import (
    export_config,
    load_critic_model,
    load_tokenizer,
    parse_dtype,
    resolve_model_path,
)
from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer, cover_new_param_groups
from verl.workers.fsdp.worker_config import has_group, optim_with_total_steps, read_group, with_rank_sizes

logger = logging.getLogger(__name__)

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
        self.ulysses_sequence_parallel_size = 1  # every rank holds whole sequences (no Ulysses here)
        self._is_offload_param, self._is_offload_optimizer = self._flags()
        self.device_mesh = None
        self.critic_module_fsdp = None
        self.critic_module = None  # verl's name for the same module
        self.critic_optimizer = None
        self.critic_lr_scheduler = None
        self.critic_model_config = None
        self.critic: DataParallelPPOCritic | None = None
        self.checkpoint_manager: FSDPCheckpointManager | None = None
        self.tokenizer = None
        self._fsdp_kwargs: dict[str, Any] | None = None
        self._own_critic: tuple[Any, Any] = (None, None)  # (the critic built here, its config)

    def _fsdp_config(self, config: CriticConfig) -> FSDPEngineConfig:
        """The ``fsdp_config`` block of a critic config (its defaults for a backend-neutral ``CriticConfig``)."""
        return config.fsdp_config if isinstance(config, FSDPCriticConfig) else FSDPEngineConfig()

    def _flags(self) -> tuple[bool, bool]:
        fsdp_cfg = self._fsdp_config(self.critic_config)
        return fsdp_cfg.param_offload, fsdp_cfg.optimizer_offload

    def _build_critic_model_optimizer(self, config: Any) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        """Load ``config.model`` (the ``critic`` group's) with a fresh value head, shard it, and build AdamW and its
        schedule from ``config.optim``; returns ``(module, optimizer, lr_scheduler)``. Recipes override this step
        to change the value model or its optimizer; modules they add after ``super()`` are sharded by the worker.
        ``config`` may be a typed config or a DictConfig (converted here)."""
        config = critic_config(config)
        fsdp_cfg = self._fsdp_config(config)
        model_config = config.model
        model_path = self.model_path if model_config is self.model_config else resolve_model_path(model_config)
        dtype = parse_dtype(fsdp_cfg.model_dtype, key="critic.fsdp_config.model_dtype")
        module = load_critic_model(model_config, model_path, dtype)
        self.critic_model_config = export_config(module)
        self.device_mesh = build_fsdp_mesh(
            self.device_type, self.world_size, fsdp_cfg.fsdp_size, key="critic.fsdp_config.fsdp_size"
        )
        module.to(self.device)
        options = {
            "param_dtype": compute_dtype(self.device),
            "reshard_after_forward": fsdp_cfg.reshard_after_forward,
            "cpu_offload": fsdp_cfg.offload_policy and self.device.type != "cpu",
        }
        self._fsdp_kwargs = fsdp2_kwargs(self.device_mesh, **options)
        module = apply_fsdp2(
            module,
            self.device_mesh,
            **options,
            wrap_policy=fsdp_cfg.wrap_policy,
            forward_prefetch=fsdp_cfg.forward_prefetch,
            key="critic.fsdp_config",
        )
        optim = optim_with_total_steps(config.optim, self.trainer_config)
        optimizer = build_optimizer(module.parameters(), optim, key="critic.optim")
        return module, optimizer, build_lr_scheduler(optimizer, optim, key="critic.optim")

    def _run_build_hook(self) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        """``self._build_critic_model_optimizer`` (a recipe's override included), its result checked and the modules
        it added after wrapping sharded like the rest."""
        where = f"{type(self).__name__}._build_critic_model_optimizer"
        result = self._build_critic_model_optimizer(self.critic_config)
        names = ("module", "optimizer", "lr_scheduler")
        module, optimizer, lr_scheduler = build_outputs(result, names, True, "critic", where)
        if is_sharded(module):
            kwargs = self._fsdp_kwargs or fsdp2_kwargs(self.device_mesh)
            remap_optimizer_params(optimizer, shard_late_modules(module, kwargs, who=where), who=where)
        elif self.world_size > 1:
            raise ValueError(
                f"{where} returned a module that is not sharded on a {self.world_size}-rank group: its gradients "
                "would not be reduced across ranks; wrap it with fully_shard / apply_fsdp2 before returning"
            )
        cover_new_param_groups(lr_scheduler, optimizer, where)
        return module, optimizer, lr_scheduler

    def _critic_config(self, config: Any) -> CriticConfig:
        """A copy of ``config`` (the ``critic`` group, or the whole config holding it) with per-rank update sizes, as
        verl's worker normalises the config its critic reads."""
        group = self.critic_config if has_group(config, "critic") else critic_config(config)
        return with_rank_sizes(group, "critic", self.rollout_n, self.world_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the value model through ``_build_critic_model_optimizer``, then the critic and checkpoint manager."""
        self.critic_module_fsdp, self.critic_optimizer, self.critic_lr_scheduler = self._run_build_hook()
        self.critic_module = self.critic_module_fsdp
        hf_config = self.critic_model_config
        if hf_config is None or not hasattr(hf_config, "to_dict"):
            hf_config = export_config(self.critic_module_fsdp)
        config = self._critic_config(self.critic_config)
        self.critic = DataParallelPPOCritic(config, self.critic_module_fsdp, self.critic_optimizer)
        self._own_critic = (self.critic, self.critic.config)
        self.tokenizer = load_tokenizer(self.model_config, self.model_path)
        self.checkpoint_manager = FSDPCheckpointManager(
            self.critic_module_fsdp,
            self.critic_optimizer,
            self.critic_lr_scheduler,
            processing_class=self.tokenizer,
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
        """``self.critic``; one a recipe built after ``init_model`` gets the per-rank copy of its config once (see
        ``ActorRolloutRefWorker._policy``)."""
        if self.critic is None:
            raise RuntimeError(f"CriticWorker.{method}: call init_model first")
        own, own_config = self._own_critic
        critic = self.critic
        if critic is not own and isinstance(critic, DataParallelPPOCritic):
            if critic.config is not own_config:
                critic.config = self._critic_config(critic.config)
                critic.use_remove_padding = bool(self.model_config.use_remove_padding)
            if self.checkpoint_manager is not None:
                self.checkpoint_manager.generators["critic_shuffle"] = critic._shuffle_generator
            self._own_critic = (critic, critic.config)
        return critic

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
        self._critic("save_checkpoint")
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
        self._critic("load_checkpoint")
        self._load(with_optimizer=True)
        try:
            return self.checkpoint_manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)
        finally:
            self._offload()
