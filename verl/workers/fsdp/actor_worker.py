"""ActorRolloutRefWorker: one rank of the policy (FSDP2), its reference policy and its rollout engine.

Roles: ``actor`` (train), ``rollout`` (generate), ``ref`` (score with the frozen initial policy), and the colocated
``actor_rollout`` / ``actor_rollout_ref``, where the three take turns in the same process (the hybrid engine). The
reference in ``actor_rollout_ref`` is a second, frozen FSDP copy without optimizer; with LoRA it is the actor itself
with its adapters switched off, so no second copy is needed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from typing import Any

import torch
from omegaconf import DictConfig

from verl.checkpoint_engine import iter_named_weights, iter_weight_buckets, megabytes_to_bytes
from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer.config.trainer_config import TrainerConfig
from verl.utils.weight_checksum import weight_checksum
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config import ActorConfig, FSDPActorConfig, HFModelConfig, RolloutConfig
from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager
from verl.workers.fsdp.distributed import build_fsdp_mesh, device_for_rank, init_distributed, resolve_device
from verl.workers.fsdp.fsdp_wrap import apply_fsdp2, load_model, load_optimizer, offload_model, offload_optimizer
from verl.workers.fsdp.hf_export import export_hf_weights
from verl.workers.fsdp.hybrid_rollout import HybridRollout
from verl.workers.fsdp.model_loader import (
    export_config,
    load_causal_lm,
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

__all__ = ["ActorRolloutRefWorker", "ROLES", "compute_dtype"]

logger = logging.getLogger(__name__)

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


def compute_dtype(device: torch.device) -> torch.dtype | None:
    """Mixed-precision compute dtype for FSDP: bfloat16 on an accelerator; none on CPU (exact float32)."""
    return None if device.type == "cpu" else torch.bfloat16


def _to_cpu(data: DataProto) -> DataProto:
    return data.to("cpu") if data.batch is not None else data


class ActorRolloutRefWorker(Worker):
    """Policy worker. ``config`` is the flattened trainer config (groups model, actor, ref, rollout, trainer);
    ``role`` one of :data:`ROLES`."""

    def __init__(self, config: DictConfig | Any, role: str, **kwargs: Any) -> None:
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"ActorRolloutRefWorker: role must be one of {list(ROLES)}, got {role!r}")
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self.config = config
        self.model_config: HFModelConfig = read_group(config, "model", HFModelConfig)
        self.actor_config: ActorConfig = read_group(config, "actor", FSDPActorConfig)
        self.ref_config: ActorConfig = (
            read_group(config, "ref", FSDPActorConfig) if has_group(config, "ref") else self.actor_config
        )
        self.rollout_config: RolloutConfig = read_group(config, "rollout", RolloutConfig)
        self.trainer_config: TrainerConfig = read_group(config, "trainer", TrainerConfig)
        self.rollout_n = self.rollout_config.n if has_group(config, "rollout") else self.actor_config.rollout_n
        # A bad model.path fails here, on every rank alike, before any rank blocks in the process-group rendezvous.
        self.model_path = resolve_model_path(self.model_config)
        self.device_type = resolve_device(kwargs.get("device") or self.trainer_config.device)
        init_distributed(self.device_type, self.rank, self.world_size)
        self.device = device_for_rank(self.device_type, self.local_rank)
        torch.manual_seed(int(self.trainer_config.seed))
        self._is_lora = int(self.model_config.lora_rank or 0) > 0
        self._register_dispatch_collect_info("actor", dp_rank=self.rank, is_collect=True)

        self.actor_module_fsdp = None
        self.actor_optimizer = None
        self.actor_lr_scheduler = None
        self.actor: DataParallelPPOActor | None = None
        self.ref_module_fsdp = None
        self.ref_policy: DataParallelPPOActor | None = None
        self.rollout: HybridRollout | None = None
        self.checkpoint_manager: FSDPCheckpointManager | None = None
        self.tokenizer = None
        self.hf_config = None

    # ------------------------------------------------------------------ building

    def _fsdp_config(self, group_config: Any) -> Any:
        return getattr(group_config, "fsdp_config", None)

    def _wrap(self, module: torch.nn.Module, group_config: Any, group: str) -> torch.nn.Module:
        fsdp_cfg = self._fsdp_config(group_config)
        fsdp_size = getattr(fsdp_cfg, "fsdp_size", -1) if fsdp_cfg is not None else -1
        mesh = build_fsdp_mesh(self.device_type, self.world_size, fsdp_size, key=f"{group}.fsdp_config.fsdp_size")
        module.to(self.device)
        return apply_fsdp2(
            module,
            mesh,
            param_dtype=compute_dtype(self.device),
            reshard_after_forward=bool(getattr(fsdp_cfg, "reshard_after_forward", True)),
            cpu_offload=bool(getattr(fsdp_cfg, "offload_policy", False)) and self.device.type != "cpu",
            wrap_policy=getattr(fsdp_cfg, "wrap_policy", None),
            forward_prefetch=bool(getattr(fsdp_cfg, "forward_prefetch", False)),
            key=f"{group}.fsdp_config",
        )

    def _optim_config(self, optim: Any) -> Any:
        """``optim`` with ``total_training_steps`` from ``trainer.total_training_steps`` when the trainer did not
        inject it (verl's trainer writes it into ``actor.optim`` before building workers)."""
        return optim_with_total_steps(optim, self.trainer_config)

    def _model_dtype(self, group_config: Any, group: str) -> torch.dtype:
        fsdp_cfg = self._fsdp_config(group_config)
        return parse_dtype(getattr(fsdp_cfg, "model_dtype", "fp32"), key=f"{group}.fsdp_config.model_dtype")

    def _offload_flags(self) -> tuple[bool, bool]:
        fsdp_cfg = self._fsdp_config(self.actor_config)
        return bool(getattr(fsdp_cfg, "param_offload", False)), bool(getattr(fsdp_cfg, "optimizer_offload", False))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load, shard and set up optimizer, reference policy and rollout engine as the role asks."""
        self.tokenizer = load_tokenizer(self.model_config, self.model_path)
        # model-level switches the actor and reference policy read as their own attributes
        forward_flags = {
            "use_remove_padding": bool(self.model_config.use_remove_padding),
            "use_fused_kernels": bool(self.model_config.use_fused_kernels),
        }
        if self._is_actor:
            module = load_causal_lm(self.model_config, self.model_path, self._model_dtype(self.actor_config, "actor"))
            self.hf_config = export_config(module)
            self.actor_module_fsdp = self._wrap(module, self.actor_config, "actor")
            optim = self._optim_config(self.actor_config.optim)
            self.actor_optimizer = build_optimizer(self.actor_module_fsdp.parameters(), optim)
            self.actor_lr_scheduler = build_lr_scheduler(self.actor_optimizer, optim)
            sizes = per_rank_update_sizes(self.actor_config, "actor", self.rollout_n, self.world_size)
            view = ConfigView(self.actor_config, **forward_flags, **sizes)
            self.actor = DataParallelPPOActor(view, self.actor_module_fsdp, self.actor_optimizer)
            self.checkpoint_manager = FSDPCheckpointManager(
                self.actor_module_fsdp,
                self.actor_optimizer,
                self.actor_lr_scheduler,
                processing_class=self.tokenizer,
                checkpoint_config=self.actor_config.checkpoint,
                hf_config=self.hf_config,
                export_weights=lambda out_dir: export_hf_weights(self.actor_module_fsdp, out_dir),
                generators={"actor_shuffle": self.actor._shuffle_generator},
                role="actor",
            )
        if self._is_ref:
            ref_view = ConfigView(self.ref_config, **forward_flags)
            if self._is_lora and self.actor_module_fsdp is not None:
                self.ref_policy = DataParallelPPOActor(ref_view, self.actor_module_fsdp)
            else:
                module = load_causal_lm(
                    self.model_config, self.model_path, self._model_dtype(self.ref_config, "ref"), trainable=False
                )
                self.ref_module_fsdp = self._wrap(module, self.ref_config, "ref")
                self.ref_policy = DataParallelPPOActor(ref_view, self.ref_module_fsdp)
        if self._is_rollout:
            pad = self.tokenizer.pad_token_id
            if pad is None:
                pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
            self.rollout = HybridRollout(self.rollout_config, self.model_path, self.device, pad)
        self._offload_actor()

    # ------------------------------------------------------------------ offload

    def _load_actor(self, with_optimizer: bool = False) -> None:
        param_offload, optim_offload = self._offload_flags()
        if self.actor_module_fsdp is not None and param_offload:
            load_model(self.actor_module_fsdp, self.device)
        if with_optimizer and optim_offload:
            load_optimizer(self.actor_optimizer, self.device)

    def _offload_actor(self) -> None:
        param_offload, optim_offload = self._offload_flags()
        if self.actor_module_fsdp is not None and param_offload:
            offload_model(self.actor_module_fsdp)
        if optim_offload:
            offload_optimizer(self.actor_optimizer, self.device)

    # ------------------------------------------------------------------ policy compute

    def _require(self, attr: str, method: str) -> Any:
        value = getattr(self, attr)
        if value is None:
            raise RuntimeError(
                f"ActorRolloutRefWorker.{method}: not available for role {self.role!r} (or init_model was not called)"
            )
        return value

    def _prepare(self, data: DataProto, micro_key: str, config: Any) -> DataProto:
        data = data.to(self.device) if self.device.type != "cpu" else data
        data.meta_info.setdefault("temperature", self.rollout_config.temperature)
        micro = getattr(config, micro_key, None)
        data.meta_info.setdefault("micro_batch_size", micro or max(len(data), 1))
        data.meta_info.setdefault("use_dynamic_bsz", bool(getattr(config, "log_prob_use_dynamic_bsz", False)))
        data.meta_info.setdefault("max_token_len", getattr(config, "log_prob_max_token_len_per_gpu", None))
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` ([N, R]) of the responses under the current policy."""
        actor = self._require("actor", "compute_log_prob")
        data = self._prepare(data, "log_prob_micro_batch_size_per_gpu", self.actor_config)
        self._load_actor()
        log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
        self._offload_actor()
        out = DataProto.from_dict(
            tensors={"old_log_probs": log_probs, "entropys": entropy},
            meta_info={"temperature": data.meta_info["temperature"]},
        )
        return _to_cpu(out)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` ([N, R]) under the reference policy (LoRA: the actor with adapters off)."""
        ref = self._require("ref_policy", "compute_ref_log_prob")
        data = self._prepare(data, "log_prob_micro_batch_size_per_gpu", self.ref_config)
        shares_actor = self.ref_module_fsdp is None
        if shares_actor:
            self._load_actor()
        context = self.actor_module_fsdp.disable_adapter() if shares_actor else contextlib.nullcontext()
        with context:
            log_probs, _ = ref.compute_log_prob(data, calculate_entropy=False)
        if shares_actor:
            self._offload_actor()
        out = DataProto.from_dict(
            tensors={"ref_log_prob": log_probs}, meta_info={"temperature": data.meta_info["temperature"]}
        )
        return _to_cpu(out)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update over this rank's share of the batch; returns ``meta_info['metrics']`` (lists)."""
        actor = self._require("actor", "update_actor")
        data = data.to(self.device) if self.device.type != "cpu" else data
        data.meta_info.setdefault("temperature", self.rollout_config.temperature)
        self._load_actor(with_optimizer=True)
        start = time.perf_counter()
        metrics = actor.update_policy(data)
        self.actor_lr_scheduler.step()
        metrics["timing_s/update_actor"] = [time.perf_counter() - start]
        self._offload_actor()
        return DataProto(meta_info={"metrics": metrics})

    # ------------------------------------------------------------------ rollout

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate responses for this rank's prompts with the local engine (see HybridRollout.generate_sequences)."""
        rollout = self._require("rollout", "generate_sequences")
        return rollout.generate_sequences(_to_cpu(prompts))

    def iter_rollout_weight_buckets(self, bucket_bytes: int | None = None):
        """Full actor weights (LoRA merged) under Hugging Face names, in buckets; collective over the group."""
        module = self._require("actor_module_fsdp", "iter_rollout_weight_buckets")
        if bucket_bytes is None:
            bucket_bytes = megabytes_to_bytes(self.rollout_config.update_weights_bucket_megabytes)
        return iter_weight_buckets(module, bucket_bytes)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_rollout_weights(self, version: int) -> dict[str, Any]:
        """Push the actor's current weights into this rank's engine; returns ``{version, checksum}``."""
        rollout = self._require("rollout", "update_rollout_weights")
        self._load_actor()
        try:
            return rollout.update_weights(self.iter_rollout_weight_buckets(), int(version))
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def send_weights(self, request: Any) -> dict[str, Any] | None:
        """Checkpoint-engine entry point (``CheckpointEngineManager``): ship the actor's weights as ``request`` says,
        into this rank's own engine for the ``naive`` backend. Collective over the group."""
        from verl.checkpoint_engine import send_weights

        module = self._require("actor_module_fsdp", "send_weights")
        local = [self.rollout.replica] if self.rollout is not None else None
        loop = self.rollout.loop.loop if self.rollout is not None else None
        self._load_actor()
        try:
            # This method may run on Ray's event loop (the worker is an async actor); send_weights blocks, so it runs
            # on a helper thread that has no running loop.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="send-weights") as pool:
                return pool.submit(
                    send_weights, module, request, rank=self.rank, local_replicas=local, loop=loop
                ).result()
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_rollout_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        """Load weights sent from elsewhere (a standalone trainer) into this rank's engine."""
        rollout = self._require("rollout", "load_rollout_weights")
        return rollout.update_weights([list(named_tensors)], int(version))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def actor_weights_checksum(self, dtype: str | None = None) -> str:
        """Checksum of the actor's full (LoRA-merged) weights, optionally cast to ``dtype`` (e.g. the rollout's)."""
        module = self._require("actor_module_fsdp", "actor_weights_checksum")
        self._load_actor()
        cast = parse_dtype(dtype, key="dtype") if dtype else None
        checksum = weight_checksum(list(iter_named_weights(module)), dtype=cast)
        self._offload_actor()
        return checksum

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sleep_rollout(self) -> None:
        """Free the engine's KV cache (and weights on an accelerator) while training runs."""
        self._require("rollout", "sleep_rollout").sleep()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wake_up_rollout(self) -> None:
        self._require("rollout", "wake_up_rollout").wake_up()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_rollout_version(self) -> int:
        return self._require("rollout", "get_rollout_version").get_version()

    # ------------------------------------------------------------------ token-level server contract
    # The rollout-replica contract of this rank, called on its actor handle by a WorkerRankReplica
    # (verl.workers.rollout.replica). Being ``async`` makes the worker an async Ray actor: these calls overlap with
    # each other (the engine batches them) while the synchronous training methods above still run one at a time on
    # the actor's event loop.

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def rollout_generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> Any:
        """One request on this rank's engine (the ``RolloutServer.generate`` contract)."""
        rollout = self._require("rollout", "rollout_generate")
        return await rollout.run_async(
            rollout.replica.generate(prompt_ids, sampling_params, request_id), f"generate({request_id})"
        )

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def rollout_generate_batch(
        self, requests: list[tuple[list[int], dict[str, Any], str]] | bytes, batch_group: Any = None
    ) -> list[Any] | bytes:
        """Many requests in one Ray call (``(prompt_ids, sampling_params, request_id)`` each): per request its
        ``TokenOutput`` or the exception it raised. Saves a Ray round trip per request on the hybrid path."""
        return await self._require("rollout", "rollout_generate_batch").serve_requests(requests, batch_group)

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def abort_all(self) -> None:
        rollout = self._require("rollout", "abort_all")
        await rollout.run_async(rollout.replica.abort_all(), "abort_all")

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def resume(self) -> None:
        rollout = self._require("rollout", "resume")
        await rollout.run_async(rollout.replica.resume(), "resume")

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        rollout = self._require("rollout", "update_weights")
        return await rollout.run_async(
            rollout.replica.update_weights(list(named_tensors), int(version)), "update_weights"
        )

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def sleep(self) -> None:
        await self._require("rollout", "sleep").sleep_async()

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def wake_up(self) -> None:
        await self._require("rollout", "wake_up").wake_up_async()

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def get_version(self) -> int:
        rollout = self._require("rollout", "get_version")
        return int(await rollout.run_async(rollout.replica.get_version(), "get_version"))

    # ------------------------------------------------------------------ checkpoints

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        extra_state: dict[str, Any] | None = None,
    ) -> str:
        """Save model, optimizer, LR schedule, RNG and ``extra_state`` (see FSDPCheckpointManager)."""
        manager = self._require("checkpoint_manager", "save_checkpoint")
        self._load_actor(with_optimizer=True)
        try:
            return manager.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep, extra_state)
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wait_for_checkpoint(self) -> bool:
        """Finish a save still being written in the background (``checkpoint.async_save``); True if there was one."""
        return self._require("checkpoint_manager", "wait_for_checkpoint").wait_for_save()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> dict[str, Any]:
        """Restore a checkpoint; returns ``{global_step, extra_state}`` as saved."""
        manager = self._require("checkpoint_manager", "load_checkpoint")
        self._load_actor(with_optimizer=True)
        try:
            return manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)
        finally:
            self._offload_actor()
