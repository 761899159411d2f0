"""ActorRolloutRefWorker: one rank of the policy (FSDP2), its reference policy and its rollout engine.

Roles: ``actor`` (train), ``rollout`` (generate), ``ref`` (score with the frozen initial policy), and the colocated
``actor_rollout`` / ``actor_rollout_ref``, where the three take turns in the same process (the hybrid engine). The
reference in ``actor_rollout_ref`` is a second, frozen FSDP copy without optimizer; with LoRA it is the actor itself
with its adapters switched off, so no second copy is needed.

``init_model`` follows verl's steps, each an overridable method of the worker: the policy from
``_build_model_optimizer(model_path, fsdp_config, optim_config, override_model_config, ..., role="actor")``, which
returns ``(module, optimizer, lr_scheduler, model_config)``; the ``DataParallelPPOActor``; the engine from
``_build_rollout``; the reference from ``_build_model_optimizer(..., role="ref")[0]``; then the FLOPs counter and the
checkpoint manager. A recipe overriding a step (calling ``super()`` and changing the result, or building its own) is
what runs; a result this worker cannot use fails naming the recipe's class and the step.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from verl.checkpoint_engine import iter_named_weights, iter_weight_buckets, megabytes_to_bytes, normalize_weight_name
from verl.checkpoint_engine.lora import LORA_PARAM_MARKERS
from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer.config.trainer_config import TrainerConfig
from verl.utils.config_builder import as_config
from verl.utils.weight_checksum import weight_checksum
from verl.workers.actor.dp_actor import DataParallelPPOActor, actor_config
from verl.workers.actor.hook_results import build_outputs, describe
from verl.workers.config import (
    ActorConfig,
    FSDPActorConfig,
    FSDPEngineConfig,
    HFModelConfig,
    OptimizerConfig,
    RolloutConfig,
)
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
from verl.workers.fsdp.hybrid_rollout import HybridRollout
from verl.workers.fsdp.model_loader import (
    export_config,
    hf_weight_names,
    load_causal_lm,
    load_tokenizer,
    parse_dtype,
    resolve_model_path,
)
from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer, cover_new_param_groups
from verl.workers.fsdp.worker_config import has_group, optim_with_total_steps, read_group, with_rank_sizes

__all__ = ["ActorRolloutRefWorker", "ROLES", "compute_dtype"]

logger = logging.getLogger(__name__)

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


def compute_dtype(device: torch.device) -> torch.dtype | None:
    """Mixed-precision compute dtype for FSDP: bfloat16 on an accelerator; none on CPU (exact float32)."""
    return None if device.type == "cpu" else torch.bfloat16


def _to_cpu(data: DataProto) -> DataProto:
    return data.to("cpu") if data.batch is not None else data


def _export_config_of(model_config: Any, module: nn.Module, where: str) -> Any:
    """The Hugging Face config saved with exports: what the build step returned when it is one, else the
    module's own (a recipe's step may return another description of the model)."""
    from transformers import PretrainedConfig

    if isinstance(model_config, PretrainedConfig):
        return model_config
    base = module.get_base_model() if callable(getattr(module, "get_base_model", None)) else module
    if not isinstance(getattr(base, "config", None), PretrainedConfig):
        raise TypeError(
            f"{where} returned {describe(model_config)} as model_config and a module without a Hugging Face config; "
            "return the model's transformers config (the worker exports and counts FLOPs with it)"
        )
    return export_config(module)


def _warn_untrained(module: nn.Module, optimizer: torch.optim.Optimizer, where: str) -> None:
    """Log the trainable parameters ``optimizer`` does not update: a module a recipe added without handing its
    parameters to the optimizer would otherwise stay at its initial values without a word."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = [name for name, p in module.named_parameters() if p.requires_grad and id(p) not in held]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        logger.warning("%s: trainable parameters not in the optimizer stay as they are: %s", where, shown)


def _is_adapter_weight(key: str) -> bool:
    parts = key.split(".")
    return any(part in LORA_PARAM_MARKERS for part in parts) or "original_module" in parts


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
        logger.debug(  # what the driver built reaches the worker typed (tests/trainer/test_config_built_once.py)
            "%s rank %d: config %s, actor %s, rollout %s",
            role,
            self.rank,
            type(config).__name__,
            type(self.actor_config).__name__,
            type(self.rollout_config).__name__,
        )
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

        # verl's worker attributes, which recipes read in their overrides
        self.ulysses_sequence_parallel_size = 1  # every rank holds whole sequences (no Ulysses here)
        self.ulysses_device_mesh = None
        self._is_offload_param, self._is_offload_optimizer = self._offload_flags()
        self.device_mesh = None  # the actor's FSDP mesh, built by init_model before the models
        self._meshes: dict[int, Any] = {}
        self.actor_module_fsdp = None
        self.actor_module = None
        self.actor_optimizer = None
        self.actor_lr_scheduler = None
        self.actor_model_config = None
        self.actor: DataParallelPPOActor | None = None
        self.ref_module_fsdp = None
        self.ref_policy: DataParallelPPOActor | None = None
        self.rollout: HybridRollout | None = None
        self.flops_counter = None
        self.checkpoint_manager: FSDPCheckpointManager | None = None
        self.tokenizer = None
        self.processor = None
        self.generation_config = None
        self.hf_config = None
        self._fsdp_kwargs: dict[str, dict[str, Any]] = {}  # per role: how its module was sharded
        self._own_policies: dict[str, Any] = {}  # "actor" / "ref_policy": (the policy built here, its config)
        self._rollout_extra: tuple[int, frozenset[str]] | None = None  # (id of the module, its non-HF weight names)

    # ------------------------------------------------------------------ building

    def _fsdp_config(self, group_config: FSDPActorConfig) -> FSDPEngineConfig:
        return group_config.fsdp_config

    def _mesh(self, fsdp_size: int, group: str) -> Any:
        """The FSDP mesh for ``fsdp_size`` (one per size: each mesh is a collective to build)."""
        fsdp_size = int(fsdp_size)
        if fsdp_size not in self._meshes:
            key = f"{group}.fsdp_config.fsdp_size"
            self._meshes[fsdp_size] = build_fsdp_mesh(self.device_type, self.world_size, fsdp_size, key=key)
        return self._meshes[fsdp_size]

    def _wrap(self, module: torch.nn.Module, fsdp_cfg: FSDPEngineConfig, group: str) -> torch.nn.Module:
        """Shard ``module`` as ``fsdp_cfg`` (a ``fsdp_config`` group) says; ``group`` names it in errors."""
        mesh = self._mesh(fsdp_cfg.fsdp_size, group)
        module.to(self.device)
        options = {
            "param_dtype": compute_dtype(self.device),
            "reshard_after_forward": fsdp_cfg.reshard_after_forward,
            "cpu_offload": fsdp_cfg.offload_policy and self.device.type != "cpu",
        }
        self._fsdp_kwargs[group] = fsdp2_kwargs(mesh, **options)
        return apply_fsdp2(
            module,
            mesh,
            **options,
            wrap_policy=fsdp_cfg.wrap_policy,
            forward_prefetch=fsdp_cfg.forward_prefetch,
            key=f"{group}.fsdp_config",
        )

    def _optim_config(self, optim: OptimizerConfig) -> OptimizerConfig:
        """``optim`` with ``total_training_steps`` from ``trainer.total_training_steps`` when the trainer did not
        inject it (verl's trainer writes it into ``actor.optim`` before building workers)."""
        return optim_with_total_steps(optim, self.trainer_config)

    def _offload_flags(self) -> tuple[bool, bool]:
        fsdp_cfg = self._fsdp_config(self.actor_config)
        return fsdp_cfg.param_offload, fsdp_cfg.optimizer_offload

    def _build_model_optimizer(
        self,
        model_path: str,
        fsdp_config: Any,
        optim_config: Any,
        override_model_config: dict[str, Any] | None,
        use_remove_padding: bool = False,
        use_fused_kernels: bool = False,
        enable_gradient_checkpointing: bool = False,
        trust_remote_code: bool = False,
        use_liger: bool = False,
        role: str = "actor",
        enable_activation_offload: bool = False,
        use_prefix_grouper: bool = False,
        use_tiled_mlp: bool = False,
        tiled_mlp_shards: int = 4,
    ) -> tuple[nn.Module, torch.optim.Optimizer | None, Any, Any]:
        """Load the policy (``role="actor"``, trainable) or the reference (``role="ref"``, frozen), shard it, and for
        the actor with an ``optim_config`` build AdamW and its schedule.

        Returns ``(module, optimizer, lr_scheduler, model_config)``: the sharded module, ``None, None`` for the
        reference, and the Hugging Face config saved with exports. Recipes override this step to add modules to
        the model (before wrapping: build your own; after ``super()``: this worker shards what was added) or to
        change the optimizer. Padding removal and the fused head are the actor's (``use_remove_padding``,
        ``use_fused_kernels``); prefix grouping and tiled MLPs are not part of this build and are refused.
        ``fsdp_config`` and ``optim_config`` may be typed configs or DictConfigs (converted here).
        """
        from verl.models.transformers.monkey_patch import apply_monkey_patch

        if role not in ("actor", "ref"):
            raise ValueError(
                f"{type(self).__name__}._build_model_optimizer: role must be 'actor' or 'ref', got {role!r}"
            )
        group = "actor" if role == "actor" else "ref"
        fsdp_config = FSDPEngineConfig() if fsdp_config is None else fsdp_config
        fsdp_config = as_config(fsdp_config, FSDPEngineConfig, f"{group}.fsdp_config")
        if optim_config is not None:
            optim_config = as_config(optim_config, OptimizerConfig, f"{group}.optim")
        model_config = dataclasses.replace(
            self.model_config,
            override_config=dict(override_model_config or {}),
            enable_gradient_checkpointing=bool(enable_gradient_checkpointing),
            enable_activation_offload=bool(enable_activation_offload),
            trust_remote_code=bool(trust_remote_code),
            use_liger=bool(use_liger),
        )
        dtype = parse_dtype(fsdp_config.model_dtype, key=f"{group}.fsdp_config.model_dtype")
        module = load_causal_lm(model_config, model_path, dtype, trainable=role == "actor")
        apply_monkey_patch(
            module,
            ulysses_sp_size=self.ulysses_sequence_parallel_size,
            use_remove_padding=False,  # the actor packs sequences itself; nothing to patch
            use_prefix_grouper=use_prefix_grouper,
            use_tiled_mlp=use_tiled_mlp,
            tiled_mlp_shards=tiled_mlp_shards,
        )
        hf_config = export_config(module)
        module = self._wrap(module, fsdp_config, group)
        optimizer = lr_scheduler = None
        if role == "actor" and optim_config is not None:
            optimizer = build_optimizer(module.parameters(), optim_config)
            lr_scheduler = build_lr_scheduler(optimizer, optim_config)
        return module, optimizer, lr_scheduler, hf_config

    def _build_rollout(self, trust_remote_code: bool = False) -> None:
        """The rollout engine of this rank (``self.rollout``), loaded from ``model.path``."""
        del trust_remote_code  # the engine reads model.trust_remote_code itself
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        self.rollout = HybridRollout(self.rollout_config, self.model_path, self.device, pad)

    def _build_arguments(self, role: str) -> dict[str, Any]:
        """The keyword arguments verl's ``init_model`` passes ``_build_model_optimizer`` for ``role``."""
        model = self.model_config
        group_config = self.actor_config if role == "actor" else self.ref_config
        tiled = dict(model.tiled_mlp or {})
        arguments = {
            "model_path": self.model_path,
            "fsdp_config": self._fsdp_config(group_config),
            "optim_config": self._optim_config(self.actor_config.optim) if role == "actor" else None,
            "override_model_config": dict(model.override_config or {}),
            "use_remove_padding": bool(model.use_remove_padding),
            "use_fused_kernels": bool(model.use_fused_kernels),
            "trust_remote_code": bool(model.trust_remote_code),
            "use_liger": bool(model.use_liger),
            "role": role,
            "use_prefix_grouper": self.actor_config.use_prefix_grouper,
            "use_tiled_mlp": bool(tiled.get("enabled", False)),
            "tiled_mlp_shards": int(tiled.get("num_shards", 4)),
        }
        if role == "actor":
            arguments["enable_gradient_checkpointing"] = bool(model.enable_gradient_checkpointing)
            arguments["enable_activation_offload"] = bool(model.enable_activation_offload)
        return arguments

    def _run_build_hook(self, role: str) -> tuple[nn.Module, Any, Any, Any]:
        """``self._build_model_optimizer`` (a recipe's override included) for ``role``, its result checked and the
        modules it added after wrapping sharded like the rest."""
        where = f"{type(self).__name__}._build_model_optimizer(role={role!r})"
        result = self._build_model_optimizer(**self._build_arguments(role))
        names = ("module", "optimizer", "lr_scheduler", "model_config")
        module, optimizer, lr_scheduler, model_config = build_outputs(result, names, role == "actor", role, where)
        self._shard_added_modules(module, optimizer, role, where)
        if optimizer is not None:
            _warn_untrained(module, optimizer, where)
            if lr_scheduler is not None:
                cover_new_param_groups(lr_scheduler, optimizer, where)
        return module, optimizer, lr_scheduler, model_config

    def _shard_added_modules(self, module: nn.Module, optimizer: Any, role: str, where: str) -> None:
        """Shard what a recipe's build step left unsharded in a sharded model, and repoint its optimizer."""
        if not is_sharded(module):
            if self.world_size > 1 and any(p.requires_grad for p in module.parameters()):
                raise ValueError(
                    f"{where} returned a module that is not sharded on a {self.world_size}-rank group: its gradients "
                    "would not be reduced across ranks; wrap it with fully_shard / apply_fsdp2 before returning"
                )
            return
        kwargs = self._fsdp_kwargs.get(role) or fsdp2_kwargs(self._mesh(-1, role))
        remap_optimizer_params(optimizer, shard_late_modules(module, kwargs, who=where), who=where)

    def _policy_config(self, config: Any, role: str) -> FSDPActorConfig:
        """A copy of ``config`` as the actor (``role="actor"``) or the reference reads it: the model-level forward
        switches, and for the actor the per-rank update sizes (prompt counts x rollout.n / ranks), as verl's worker
        normalises them."""
        flags = {
            "use_remove_padding": self.model_config.use_remove_padding,
            "use_fused_kernels": self.model_config.use_fused_kernels,
        }
        config = actor_config(config)
        if role != "actor":
            return dataclasses.replace(config, **flags)
        return with_rank_sizes(config, "actor", self.rollout_n, self.world_size, **flags)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the policy, its actor, the rollout engine and the reference as the role asks, in verl's order (see
        the module docstring), then the FLOPs counter and the checkpoint manager."""
        from verl.utils.flops_counter import FlopsCounter

        self.tokenizer = load_tokenizer(self.model_config, self.model_path)
        if self._is_actor or self._is_ref:
            self.device_mesh = self._mesh(self._fsdp_config(self.actor_config).fsdp_size, "actor")
        if self._is_actor:
            built = self._run_build_hook("actor")
            self.actor_module_fsdp, self.actor_optimizer, self.actor_lr_scheduler, self.actor_model_config = built
            self.actor_module = self.actor_module_fsdp
            where = f"{type(self).__name__}._build_model_optimizer(role='actor')"
            self.hf_config = _export_config_of(self.actor_model_config, self.actor_module_fsdp, where)
            policy_config = self._policy_config(self.actor_config, "actor")
            self.actor = DataParallelPPOActor(policy_config, self.actor_module_fsdp, self.actor_optimizer)
            self._own_policies["actor"] = (self.actor, self.actor.config)
        if self._is_rollout:
            self._build_rollout(trust_remote_code=bool(self.model_config.trust_remote_code))
        if self._is_ref:
            ref_config = self._policy_config(self.ref_config, "ref")
            if self._is_lora and self.actor_module_fsdp is not None:
                self.ref_policy = DataParallelPPOActor(ref_config, self.actor_module_fsdp)
            else:
                self.ref_module_fsdp = self._run_build_hook("ref")[0]
                self.ref_policy = DataParallelPPOActor(ref_config, self.ref_module_fsdp)
            self._own_policies["ref_policy"] = (self.ref_policy, self.ref_policy.config)
        if self._is_actor:
            self.flops_counter = FlopsCounter(self.hf_config)
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
        self._offload_actor()

    def _policy(self, attr: str, method: str) -> Any:
        """``self.actor`` / ``self.ref_policy``. A recipe that replaced it after ``init_model`` (verl's pattern:
        ``self.actor = MyActor(config=..., actor_module=self.actor_module_fsdp, ...)``) built it with the config
        as given, while verl's worker has already normalised that config to per-rank sizes: its actor gets the
        per-rank copy of its own config here, once, and its shuffle generator is checkpointed."""
        policy = self._require(attr, method)
        own, own_config = self._own_policies.get(attr, (None, None))
        if policy is own or not isinstance(policy, DataParallelPPOActor):
            return policy
        if policy.config is not own_config:
            policy.config = self._policy_config(policy.config, "actor" if attr == "actor" else "ref")
            policy._apply_config()
        if attr == "actor" and self.checkpoint_manager is not None:
            self.checkpoint_manager.generators["actor_shuffle"] = policy._shuffle_generator
        self._own_policies[attr] = (policy, policy.config)
        return policy

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

    def _prepare(self, data: DataProto, config: ActorConfig) -> DataProto:
        data = data.to(self.device) if self.device.type != "cpu" else data
        data.meta_info.setdefault("temperature", self.rollout_config.temperature)
        micro = config.log_prob_micro_batch_size_per_gpu
        data.meta_info.setdefault("micro_batch_size", micro or max(len(data), 1))
        data.meta_info.setdefault("use_dynamic_bsz", config.log_prob_use_dynamic_bsz)
        data.meta_info.setdefault("max_token_len", config.log_prob_max_token_len_per_gpu)
        return data

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` ([N, R]) of the responses under the current policy."""
        actor = self._policy("actor", "compute_log_prob")
        data = self._prepare(data, self.actor_config)
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
        ref = self._policy("ref_policy", "compute_ref_log_prob")
        data = self._prepare(data, self.ref_config)
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
        actor = self._policy("actor", "update_actor")
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

    def _rollout_weights(self, method: str):
        """The actor's full weights (LoRA merged) under Hugging Face names, without the weights of modules a recipe
        added to the policy (a head the rollout model does not have); collective over the group."""
        module = self._require("actor_module_fsdp", method)
        extra = self._recipe_weight_names(module)
        weights = iter_named_weights(module)
        return weights if not extra else ((name, tensor) for name, tensor in weights if name not in extra)

    def _recipe_weight_names(self, module: nn.Module) -> frozenset[str]:
        """Names of the policy's weights that its Hugging Face architecture lacks (found once per module)."""
        if self._rollout_extra is not None and self._rollout_extra[0] == id(module):
            return self._rollout_extra[1]
        names = {normalize_weight_name(key) for key in module.state_dict() if not _is_adapter_weight(key)}
        known = hf_weight_names(self.hf_config, bool(self.model_config.trust_remote_code))
        extra = frozenset() if known is None else frozenset(names - known)
        if extra:
            logger.info("weights kept out of rollout weight updates (not in the HF model): %s", sorted(extra))
        self._rollout_extra = (id(module), extra)
        return extra

    def iter_rollout_weight_buckets(self, bucket_bytes: int | None = None):
        """Full actor weights (LoRA merged) under Hugging Face names, in buckets, without the weights of modules a
        recipe added to the policy; collective over the group."""
        if bucket_bytes is None:
            bucket_bytes = megabytes_to_bytes(self.rollout_config.update_weights_bucket_megabytes)
        return iter_weight_buckets(self._rollout_weights("iter_rollout_weight_buckets"), bucket_bytes)

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
        self._require("actor_module_fsdp", "actor_weights_checksum")
        self._load_actor()
        cast = parse_dtype(dtype, key="dtype") if dtype else None
        checksum = weight_checksum(list(self._rollout_weights("actor_weights_checksum")), dtype=cast)
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
        self._policy("actor", "save_checkpoint")
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
        self._policy("actor", "load_checkpoint")
        self._load_actor(with_optimizer=True)
        try:
            return manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)
        finally:
            self._offload_actor()
