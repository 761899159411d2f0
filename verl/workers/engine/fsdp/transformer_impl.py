"""The FSDP engine (verl's ``FSDPEngine``, ``FSDPEngineWithLMHead``, ``FSDPEngineWithValueHead``).

Built from this package's FSDP2 worker pieces: the model is loaded as the workers load it
(:mod:`verl.workers.fsdp.model_loader`: overrides, LoRA, gradient checkpointing, Liger), sharded with
:func:`~verl.workers.fsdp.fsdp_wrap.apply_fsdp2` over :func:`create_device_mesh`, trained with AdamW and the LR
schedule of :mod:`verl.workers.fsdp.optimizer`, checkpointed by
:class:`~verl.workers.fsdp.checkpoint_manager.FSDPCheckpointManager`.

Batches come in the no-padding layout (:func:`verl.workers.utils.padding.left_right_2_no_padding`): jagged
``input_ids`` / ``position_ids``, ``loss_mask``, and batch-wide settings (``use_dynamic_bsz`` with
``max_token_len_per_gpu`` or ``micro_batch_size_per_gpu``, ``temperature``, ``calculate_entropy``,
``use_remove_padding``, ``use_fused_kernels``, ``pad_token_id``). Model outputs are jagged per-token tensors over
each whole sequence: ``log_probs`` (and ``entropy``) of the next token for the LM head, ``values`` for the value
head. With padding removal a micro-batch is one packed row whose ``position_ids`` restart at every sequence
(transformers builds the block-diagonal mask from them on any device); without it the micro-batch is right padded.

Not in this build: Ulysses sequence parallelism (``ulysses_sequence_parallel_size > 1``), multimodal inputs and
3-D (mRoPE) position ids, distillation outputs (top-k teacher losses), the sharded/delta weight exports
(``get_per_tensor_param_shard``, ``get_per_tensor_param_delta_shard``); each raises ``NotImplementedError`` naming
itself.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn

from verl.checkpoint_engine.buckets import iter_named_weights
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.config import CheckpointConfig
from verl.utils.config_builder import as_config
from verl.utils.device import get_device_name
from verl.utils.torch_functional import entropy_from_logits, entropy_from_logits_with_chunking, logprobs_from_logits
from verl.workers.actor.optim_step import resolve_grad_clip
from verl.workers.config.engine import FSDPEngineConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.config.optimizer import OptimizerConfig
from verl.workers.engine.base import BaseEngine, BaseEngineCtx, EngineRegistry
from verl.workers.engine.fsdp.utils import create_device_mesh
from verl.workers.engine.utils import as_engine_config, detach_tree, postprocess_batch_func, prepare_micro_batches
from verl.workers.fsdp.distributed import device_for_rank, init_distributed
from verl.workers.fsdp.fsdp_wrap import apply_fsdp2, load_model, load_optimizer, offload_model, offload_optimizer
from verl.workers.fsdp.hf_export import export_hf_weights
from verl.workers.fsdp.model_loader import (
    export_config,
    load_causal_lm,
    load_critic_model,
    load_tokenizer,
    parse_dtype,
    resolve_model_path,
)
from verl.workers.fsdp.optimizer import build_lr_scheduler, build_optimizer
from verl.workers.fsdp.weights import adapter_state, has_lora

__all__ = ["FSDPEngine", "FSDPEngineWithLMHead", "FSDPEngineWithValueHead"]

logger = logging.getLogger(__name__)

_DEVICES = ["cuda", "cpu"]


def _compute_dtype(device: torch.device) -> torch.dtype | None:
    """bfloat16 compute on an accelerator, exact float32 (no casting) on CPU, as the FSDP workers do."""
    return None if device.type == "cpu" else torch.bfloat16


class FSDPEngine(BaseEngine):
    """FSDP2 training engine for one Hugging Face model on this rank (see the module docstring).

    Each config is typed here, once (an instance as is, None as the class's defaults, a DictConfig / dict /
    ``SimpleNamespace`` built, a bare ``EngineConfig`` rebuilt as ``FSDPEngineConfig``):

    Args:
        model_config: ``HFModelConfig`` (``path``, ``use_remove_padding``, ``lora_rank``, ...).
        engine_config: ``FSDPEngineConfig`` (``fsdp_size``, ``param_offload``, ``optimizer_offload``,
            ``model_dtype``, ``wrap_policy``, ``forward_only``, ...).
        optimizer_config: ``OptimizerConfig`` (AdamW, schedule, ``clip_grad``); required unless ``forward_only``
            (None stays None).
        checkpoint_config: ``CheckpointConfig`` (``save_contents`` / ``load_contents`` / ``async_save``).
    """

    model_role = "model"

    def __init__(
        self,
        model_config: Any,
        engine_config: Any,
        optimizer_config: Any = None,
        checkpoint_config: Any = None,
        **kwargs: Any,
    ) -> None:
        self.model_config = model_config = as_config(model_config, HFModelConfig, "model_config")
        self.engine_config = engine_config = as_engine_config(engine_config, FSDPEngineConfig, "engine_config")
        self.optimizer_config = (
            None if optimizer_config is None else as_config(optimizer_config, OptimizerConfig, "optimizer_config")
        )
        self.checkpoint_config = as_config(checkpoint_config, CheckpointConfig, "checkpoint_config")
        self.mode: str | None = None
        sp_size = engine_config.ulysses_sequence_parallel_size
        if sp_size > 1:
            raise NotImplementedError(
                f"ulysses_sequence_parallel_size={sp_size}: Ulysses sequence parallelism is "
                "not part of this build; set it to 1"
            )
        self.ulysses_sequence_parallel_size = 1
        self.use_ulysses_sp = False
        self.ulysses_device_mesh = None
        self.ulysses_parallel_group = None
        self.device_type = get_device_name()
        if not dist.is_initialized():
            init_distributed(self.device_type, int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
        self.rank = dist.get_rank()
        self.device = device_for_rank(self.device_type, int(os.environ.get("LOCAL_RANK", "0")))
        self.device_mesh = create_device_mesh(dist.get_world_size(), engine_config.fsdp_size)
        self.forward_only = engine_config.forward_only
        self._is_offload_param = engine_config.param_offload
        self._is_offload_optimizer = engine_config.optimizer_offload
        self._is_lora = model_config.lora_rank > 0
        self.use_remove_padding = model_config.use_remove_padding
        # torch.compile'd kernels on an accelerator only: on CPU the compile costs more than it saves
        self._compiled = engine_config.use_torch_compile and self.device.type != "cpu"
        if engine_config.entropy_from_logits_with_chunking:
            self.compute_entropy_from_logits = functools.partial(
                entropy_from_logits_with_chunking,
                chunk_size=engine_config.entropy_from_logits_chunk_size,
                compiled=self._compiled,
            )
        else:
            self.compute_entropy_from_logits = functools.partial(entropy_from_logits, compiled=self._compiled)
        self.module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: Any = None
        self.checkpoint_manager: Any = None
        self.tokenizer: Any = None
        self.hf_config: Any = None
        self._fused_head: nn.Linear | None = None

    # ------------------------------------------------------------------ building

    @property
    def is_param_offload_enabled(self) -> bool:
        return self._is_offload_param

    @property
    def is_optimizer_offload_enabled(self) -> bool:
        return self._is_offload_optimizer

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True  # no model parallelism: every rank holds its own outputs

    def _key(self, name: str) -> str:
        return f"{self.model_role}.{name}"

    def _model_dtype(self) -> torch.dtype:
        return parse_dtype(self.engine_config.model_dtype, key=self._key("fsdp_config.model_dtype"))

    def _build_module(self, model_path: str) -> nn.Module:
        raise NotImplementedError(
            f"{type(self).__name__} builds no model; use FSDPEngineWithLMHead or FSDPEngineWithValueHead"
        )

    def initialize(self) -> None:
        """Load and shard the model; build optimizer and LR schedule unless ``forward_only``; set up checkpoints;
        offload what the config offloads."""
        model_path = resolve_model_path(self.model_config, key=self._key("model.path"))
        module = self._build_module(model_path)
        self.hf_config = export_config(module)
        module.to(self.device)
        fsdp = self.engine_config
        self.module = apply_fsdp2(
            module,
            self.device_mesh,
            param_dtype=_compute_dtype(self.device),
            reshard_after_forward=fsdp.reshard_after_forward,
            cpu_offload=fsdp.offload_policy and self.device.type != "cpu",
            wrap_policy=fsdp.wrap_policy,
            forward_prefetch=fsdp.forward_prefetch,
            key=self._key("fsdp_config"),
        )
        if not self.forward_only:
            if self.optimizer_config is None:
                raise ValueError(f"{type(self).__name__}: an optimizer_config is required unless forward_only")
            self.optimizer = build_optimizer(self.module.parameters(), self.optimizer_config, key=self._key("optim"))
            self.lr_scheduler = build_lr_scheduler(self.optimizer, self.optimizer_config, key=self._key("optim"))
        self.tokenizer = load_tokenizer(self.model_config, model_path)
        from verl.workers.fsdp.checkpoint_manager import FSDPCheckpointManager

        self.checkpoint_manager = FSDPCheckpointManager(
            self.module,
            self.optimizer,
            self.lr_scheduler,
            processing_class=self.tokenizer,
            checkpoint_config=self.checkpoint_config,
            hf_config=self.hf_config,
            export_weights=lambda out_dir: export_hf_weights(self.module, out_dir),
            role=self.model_role,
        )
        self.to("cpu", model=self._is_offload_param, optimizer=self._is_offload_optimizer, grad=self._is_offload_param)

    def _require_module(self, what: str) -> nn.Module:
        if self.module is None:
            raise RuntimeError(f"{type(self).__name__}.{what}: call initialize() first")
        return self.module

    # ------------------------------------------------------------------ modes and placement

    def train_mode(self, **kwargs: Any) -> _TrainModeCtx:
        return _TrainModeCtx(self, **kwargs)

    def eval_mode(self, **kwargs: Any) -> _EvalModeCtx:
        return _EvalModeCtx(self, **kwargs)

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Move the model and/or optimizer state between host memory and this rank's device (no-op on CPU)."""
        super().to(device, model=model, optimizer=optimizer, grad=grad)
        module = self._require_module("to")
        if device not in ("cpu", self.device_type):
            raise ValueError(f"{type(self).__name__}.to: device must be 'cpu' or {self.device_type!r}, got {device!r}")
        if device == "cpu":
            if model:
                offload_model(module)
            if optimizer:
                offload_optimizer(self.optimizer, self.device)
        else:
            if model:
                load_model(module, self.device)
            if optimizer:
                load_optimizer(self.optimizer, self.device)

    def get_data_parallel_rank(self) -> int:
        return dist.get_rank()

    def get_data_parallel_size(self) -> int:
        return dist.get_world_size()

    def get_data_parallel_group(self) -> Any:
        return dist.group.WORLD

    # ------------------------------------------------------------------ optimizer

    def optimizer_zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        """Clip to ``optimizer_config.clip_grad`` (None: no clipping) and step; a non-finite norm skips the step
        and drops the gradients. Returns the norm before clipping."""
        module = self._require_module("optimizer_step")
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__}.optimizer_step: no optimizer (forward_only engine)")
        max_norm = resolve_grad_clip(self.optimizer_config.clip_grad, self._key("optim.clip_grad"))
        total = torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm=max_norm)
        if hasattr(total, "full_tensor"):
            total = total.full_tensor()
        grad_norm = float(total)
        if torch.isfinite(torch.tensor(grad_norm)):
            self.optimizer.step()
        else:
            logger.warning("%s: gradient norm is %s; optimizer step skipped", self._key("optim"), grad_norm)
            self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def lr_scheduler_step(self) -> float:
        if self.lr_scheduler is None:
            raise RuntimeError(f"{type(self).__name__}.lr_scheduler_step: no LR scheduler (forward_only engine)")
        self.lr_scheduler.step()
        return float(self.lr_scheduler.get_last_lr()[0])

    # ------------------------------------------------------------------ batches

    @contextmanager
    def _gradient_sync(self, last_micro_batch: bool) -> Iterator[None]:
        """With ``use_no_sync_for_gradient_accumulation``, reduce gradients after the last micro-batch only."""
        module = self.module
        defer = self.engine_config.use_no_sync_for_gradient_accumulation
        if last_micro_batch or not defer or not hasattr(module, "set_requires_gradient_sync"):
            yield
            return
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)

    def _count_loss_tokens(self, data: TensorDict) -> int:
        if "loss_mask" not in data.keys():
            raise KeyError(
                f"{type(self).__name__}.forward_backward_batch needs a 'loss_mask' (see "
                f"left_right_2_no_padding); the batch has {sorted(data.keys())}"
            )
        mask = data.get("loss_mask")
        count = (mask.values() if mask.is_nested else mask).sum().to(self.device, torch.float64)
        if dist.get_world_size() > 1:
            dist.all_reduce(count, op=dist.ReduceOp.SUM, group=self.get_data_parallel_group())
        return int(count.item())

    def forward_backward_batch(
        self, data: TensorDict, loss_function: Callable | None, forward_only: bool = False
    ) -> dict[str, Any]:
        """Run every micro-batch (backward too unless ``forward_only``); returns ``{"model_output", "loss",
        "metrics"}`` with the model outputs in the batch's sample order (dropped after a training pass unless the
        batch sets ``return_model_output``)."""
        self._require_module("forward_backward_batch")
        keep_output = bool(tu.get_non_tensor_data(data, "return_model_output", False))
        tu.assign_non_tensor(
            data, sp_size=1, batch_num_tokens=self._count_loss_tokens(data), dp_size=self.get_data_parallel_size()
        )
        group = self.get_data_parallel_group() if dist.get_world_size() > 1 else None
        micro_batches, indices = prepare_micro_batches(data, dp_group=group, same_micro_num_in_dp=True)
        outputs = []
        for i, micro in enumerate(micro_batches):
            grad_ctx = torch.no_grad() if forward_only else nullcontext()
            sync_ctx = nullcontext() if forward_only else self._gradient_sync(i == len(micro_batches) - 1)
            with grad_ctx, sync_ctx:
                loss, output = self.forward_step(micro, loss_function, forward_only)
                if not forward_only:
                    loss.backward()
                    if not keep_output:
                        output.pop("model_output", None)
            outputs.append(output)
        return postprocess_batch_func(outputs, indices, data)

    def forward_step(
        self, micro_batch: TensorDict, loss_function: Callable | None, forward_only: bool
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """One micro-batch: model forward, outputs, loss. ``(loss, {"model_output", "loss", "metrics"})``."""
        micro_batch = micro_batch.to(self.device)
        model_inputs, output_args = self.prepare_model_inputs(micro_batch, forward_only)
        with self._head_context(micro_batch, output_args, forward_only):
            raw = self.module(**model_inputs, use_cache=False)
        model_output = self.prepare_model_outputs(raw, output_args, micro_batch, loss_function)
        if loss_function is not None:
            loss, metrics = loss_function(
                model_output=model_output, data=micro_batch, dp_group=self.get_data_parallel_group()
            )
        else:
            if not forward_only:
                raise ValueError(f"{type(self).__name__}: a training pass needs a loss_function")
            loss, metrics = torch.zeros((), device=self.device), {}
        return loss, {
            "model_output": detach_tree(model_output),
            "loss": float(loss.detach().item()),
            "metrics": metrics,
        }

    def _head_context(self, micro_batch: TensorDict, output_args: dict[str, Any], forward_only: bool) -> Any:
        return nullcontext()

    def prepare_model_inputs(self, micro_batch: TensorDict, forward_only: bool = True) -> tuple[dict, dict]:
        """Model kwargs for the micro-batch (packed row, or right-padded rows) and what reading the output needs."""
        pad_mode = tu.get_non_tensor_data(micro_batch, "pad_mode", "no_padding")
        if str(getattr(pad_mode, "value", pad_mode)) != "no_padding":
            raise NotImplementedError(
                f"{type(self).__name__}: pad_mode={pad_mode!r}; only no_padding batches "
                "(left_right_2_no_padding) are supported"
            )
        if micro_batch.get("multi_modal_inputs", None) is not None:
            raise NotImplementedError(f"{type(self).__name__}: multimodal inputs are not supported here")
        input_ids, position_ids = micro_batch.get("input_ids"), micro_batch.get("position_ids")
        if not (input_ids.is_nested and position_ids.is_nested):
            raise ValueError(
                f"{type(self).__name__}: input_ids and position_ids must be nested (no-padding "
                "layout); convert the batch with left_right_2_no_padding"
            )
        if position_ids.dim() == 3:
            raise NotImplementedError(f"{type(self).__name__}: 3-D (mRoPE) position_ids are not supported here")
        lengths = input_ids.offsets().diff()
        flat_ids = input_ids.values()
        labels = torch.roll(flat_ids, shifts=-1, dims=0)
        remove_padding = bool(tu.get_non_tensor_data(micro_batch, "use_remove_padding", self.use_remove_padding))
        output_args: dict[str, Any] = {
            "lengths": lengths,
            "labels": labels,
            "remove_padding": remove_padding,
            "temperature": self._token_temperature(micro_batch, lengths),
        }
        if remove_padding:
            inputs = {
                "input_ids": flat_ids.unsqueeze(0),
                "position_ids": position_ids.values().unsqueeze(0),
                "attention_mask": None,
            }
            return inputs, output_args
        pad = int(tu.get_non_tensor_data(micro_batch, "pad_token_id", 0) or 0)
        width = int(lengths.max().item())
        rows = len(lengths)
        real = torch.arange(width, device=flat_ids.device).unsqueeze(0) < lengths.unsqueeze(1)
        output_args["real"] = real
        inputs = {
            "input_ids": torch.nested.to_padded_tensor(input_ids, pad, output_size=(rows, width)),
            "position_ids": torch.nested.to_padded_tensor(position_ids, 0, output_size=(rows, width)),
            "attention_mask": real.to(torch.long),
        }
        return inputs, output_args

    def _token_temperature(self, micro_batch: TensorDict, lengths: torch.Tensor) -> float | torch.Tensor:
        """The batch's ``temperature``: a float, or a ``[T, 1]`` per-token tensor from per-sample values."""
        value = tu.get_non_tensor_data(micro_batch, "temperature", None)
        if value is None:
            return 1.0
        if isinstance(value, torch.Tensor) and value.numel() > 1:
            per_token = value.to(self.device, torch.float32).reshape(-1).repeat_interleave(lengths.to(self.device))
            return per_token.unsqueeze(-1)
        value = float(value.item() if isinstance(value, torch.Tensor) else value)
        if not value > 0:
            raise ValueError(f"{type(self).__name__}: temperature must be positive, got {value}")
        return value

    def _flat_output(self, output: torch.Tensor, output_args: dict[str, Any]) -> torch.Tensor:
        """``[T, ...]`` per-token rows of a model output (packed ``[1, T, ...]`` or padded ``[B, S, ...]``)."""
        if output_args["remove_padding"]:
            return output.squeeze(0)
        return output[output_args["real"]]

    @staticmethod
    def _jagged(flat: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        offsets = torch.zeros(len(lengths) + 1, dtype=torch.long, device=flat.device)
        torch.cumsum(lengths.to(flat.device, torch.long), dim=0, out=offsets[1:])
        return torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)

    def prepare_model_outputs(
        self, output: Any, output_args: dict[str, Any], micro_batch: TensorDict, logits_processor_func: Callable | None
    ) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__}.prepare_model_outputs")

    # ------------------------------------------------------------------ weights and checkpoints

    def get_per_tensor_param(self, **kwargs: Any) -> tuple[Iterator[tuple[str, torch.Tensor]], dict | None]:
        """Full weights under Hugging Face names, gathered one tensor at a time (LoRA merged into the base weights);
        the PEFT config is ``None`` because the weights are already merged. Collective over the group."""
        module = self._require_module("get_per_tensor_param")
        return iter_named_weights(module, device=None), None

    def get_per_tensor_param_shard(self, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__}.get_per_tensor_param_shard: sharded weight export (delta "
            "checkpoint engines) is not part of this build"
        )

    def get_per_tensor_param_delta_shard(self, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__}.get_per_tensor_param_delta_shard: delta weight export is not part of this build"
        )

    def lora_adapter_state(self) -> dict[str, torch.Tensor]:
        """The LoRA adapter tensors (full, collective); empty without LoRA."""
        module = self._require_module("lora_adapter_state")
        return adapter_state(module) if has_lora(module) else {}

    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Save model, optimizer, schedule and RNG (what ``checkpoint_config.save_contents`` names)."""
        self._require_module("save_checkpoint")
        with self._loaded(optimizer=True):
            return self.checkpoint_manager.save_checkpoint(
                local_path, hdfs_path, global_step, max_ckpt_to_keep, kwargs.get("extra_state")
            )

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = True, **kwargs: Any
    ) -> Any:
        """Restore a checkpoint written by :meth:`save_checkpoint`; returns ``{global_step, extra_state}``."""
        self._require_module("load_checkpoint")
        with self._loaded(optimizer=True):
            return self.checkpoint_manager.load_checkpoint(local_path, hdfs_path, del_local_after_load)

    @contextmanager
    def _loaded(self, optimizer: bool) -> Iterator[None]:
        """Bring offloaded state to the device for the block, offload it again after."""
        params, optim = self._is_offload_param, self._is_offload_optimizer and optimizer
        if params or optim:
            self.to(self.device_type, model=params, optimizer=optim, grad=params)
        try:
            yield
        finally:
            if params or optim:
                self.to("cpu", model=params, optimizer=optim, grad=params)

    def disable_adapter(self) -> Any:
        module = self._require_module("disable_adapter")
        return module.disable_adapter() if has_lora(module) else nullcontext()


class _EvalModeCtx(BaseEngineCtx):
    def __init__(self, engine: FSDPEngine, **kwargs: Any) -> None:
        super().__init__(engine, "eval", **kwargs)

    def __enter__(self) -> _EvalModeCtx:
        super().__enter__()
        self.engine._require_module("eval_mode").eval()
        return self


class _TrainModeCtx(BaseEngineCtx):
    def __init__(self, engine: FSDPEngine, **kwargs: Any) -> None:
        super().__init__(engine, "train", **kwargs)

    def __enter__(self) -> _TrainModeCtx:
        super().__enter__()
        self.engine._require_module("train_mode").train()
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if self.zero_grad_on_exit or exc_type is not None:
            self.engine.optimizer_zero_grad()
        super().__exit__(exc_type, exc_value, traceback)


@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=_DEVICES)
class FSDPEngineWithLMHead(FSDPEngine):
    """The policy / reference engine: per-token ``log_probs`` of the next token (and ``entropy`` when the batch
    sets ``calculate_entropy``), under ``logits / temperature``."""

    model_role = "actor"

    def _build_module(self, model_path: str) -> nn.Module:
        module = load_causal_lm(self.model_config, model_path, self._model_dtype(), trainable=not self.forward_only)
        if self.model_config.use_fused_kernels:
            from verl.workers.actor.fused_head import check_fused_head

            self._fused_head = check_fused_head(module)
        return module

    def _uses_fused_head(self, micro_batch: TensorDict) -> bool:
        return self._fused_head is not None and bool(tu.get_non_tensor_data(micro_batch, "use_fused_kernels", True))

    def _head_context(self, micro_batch: TensorDict, output_args: dict[str, Any], forward_only: bool) -> Any:
        if not self._uses_fused_head(micro_batch):
            return nullcontext()
        temperature = output_args["temperature"]
        if isinstance(temperature, torch.Tensor):
            raise NotImplementedError("use_fused_kernels with per-sample temperatures is not supported")
        from verl.workers.actor.fused_head import fused_lm_head

        labels = output_args["labels"]
        if not output_args["remove_padding"]:
            padded = torch.zeros(output_args["real"].shape, dtype=labels.dtype, device=labels.device)
            padded[output_args["real"]] = labels
            labels = padded
        output_args["fused"] = True
        entropy = bool(tu.get_non_tensor_data(micro_batch, "calculate_entropy", False))
        return fused_lm_head(
            self._fused_head,
            labels.reshape(1, -1) if output_args["remove_padding"] else labels,
            temperature,
            calculate_entropy=entropy,
            entropy_grad=entropy and not forward_only and torch.is_grad_enabled(),
        )

    def prepare_model_outputs(
        self, output: Any, output_args: dict[str, Any], micro_batch: TensorDict, logits_processor_func: Callable | None
    ) -> dict[str, torch.Tensor]:
        if tu.get_non_tensor_data(micro_batch, "distillation_use_topk", False):
            raise NotImplementedError("FSDPEngineWithLMHead: top-k distillation outputs are not part of this build")
        calculate_entropy = bool(tu.get_non_tensor_data(micro_batch, "calculate_entropy", False))
        lengths = output_args["lengths"]
        flat = self._flat_output(output.logits if hasattr(output, "logits") else output[0], output_args)
        if output_args.get("fused"):
            result = {"log_probs": self._jagged(flat[..., 0], lengths)}
            if calculate_entropy:
                result["entropy"] = self._jagged(flat[..., 1], lengths)
            return result
        logits = flat.float()
        temperature = output_args["temperature"]
        if isinstance(temperature, torch.Tensor) or temperature != 1.0:
            logits = logits / temperature
        result = {
            "log_probs": self._jagged(
                logprobs_from_logits(logits, output_args["labels"], compiled=self._compiled), lengths
            )
        }
        if calculate_entropy:
            if self.engine_config.entropy_checkpointing and torch.is_grad_enabled():
                entropy = torch.utils.checkpoint.checkpoint(
                    self.compute_entropy_from_logits, logits, use_reentrant=False
                )
            else:
                entropy = self.compute_entropy_from_logits(logits)
            result["entropy"] = self._jagged(entropy, lengths)
        return result


@EngineRegistry.register(model_type="value_model", backend=["fsdp", "fsdp2"], device=_DEVICES)
class FSDPEngineWithValueHead(FSDPEngineWithLMHead):
    """The critic engine: the checkpoint loaded as a one-output token classifier, per-token ``values``."""

    model_role = "critic"

    def _build_module(self, model_path: str) -> nn.Module:
        return load_critic_model(self.model_config, model_path, self._model_dtype())

    def _head_context(self, micro_batch: TensorDict, output_args: dict[str, Any], forward_only: bool) -> Any:
        return nullcontext()

    def prepare_model_outputs(
        self, output: Any, output_args: dict[str, Any], micro_batch: TensorDict, logits_processor_func: Callable | None
    ) -> dict[str, torch.Tensor]:
        values = output.logits if hasattr(output, "logits") else output[0]
        if values.dim() == 3:
            values = values.squeeze(-1)
        return {"values": self._jagged(self._flat_output(values, output_args).float(), output_args["lengths"])}
