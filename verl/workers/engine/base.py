"""The model-engine contract (verl's ``BaseEngine``) and the registry that picks an engine by model type and backend.

An engine owns one model's training state on this rank (module, optimizer, LR schedule, checkpoints) and runs
batches through it: ``train_batch`` (forward, backward, optimizer step) and ``infer_batch`` (forward only), both
taking a TensorDict in the no-padding layout (:mod:`verl.workers.utils.padding`) and a loss function of the form
``loss_fn(model_output=..., data=..., dp_group=...) -> (loss, metrics)`` (:mod:`verl.workers.utils.losses`).
Workers program against this contract only, so an engine for another parallel backend drops in by registering
itself. ``train_mode()`` / ``eval_mode()`` are context managers that bring offloaded weights (and, for training,
optimizer state) to the device on entry and back to host memory on exit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from tensordict import TensorDict

from verl.utils.device import get_device_name
from verl.utils.tensordict_utils import maybe_fix_3d_position_ids

__all__ = ["BaseEngine", "BaseEngineCtx", "EngineRegistry"]


class BaseEngine:
    """One model's training engine on this rank. Subclasses implement the methods that raise here."""

    mode: str | None = None

    def initialize(self) -> None:
        """Build (or load) the model, optimizer and LR schedule."""
        raise NotImplementedError(f"{type(self).__name__}.initialize")

    @property
    def is_param_offload_enabled(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.is_param_offload_enabled")

    @property
    def is_optimizer_offload_enabled(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.is_optimizer_offload_enabled")

    def train_mode(self, **kwargs: Any) -> AbstractContextManager:
        raise NotImplementedError(f"{type(self).__name__}.train_mode")

    def eval_mode(self, **kwargs: Any) -> AbstractContextManager:
        raise NotImplementedError(f"{type(self).__name__}.eval_mode")

    def optimizer_zero_grad(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.optimizer_zero_grad")

    def optimizer_step(self) -> float:
        """Clip, step (unless the gradient is not finite) and return the gradient norm before clipping."""
        raise NotImplementedError(f"{type(self).__name__}.optimizer_step")

    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule one step; returns the new learning rate."""
        raise NotImplementedError(f"{type(self).__name__}.lr_scheduler_step")

    def forward_backward_batch(
        self, data: TensorDict, loss_function: Callable | None, forward_only: bool = False
    ) -> Any:
        """Run every micro-batch of ``data``; with ``forward_only`` false, also backward (gradients accumulate)."""
        raise NotImplementedError(f"{type(self).__name__}.forward_backward_batch")

    def train_batch(self, data: TensorDict, loss_function: Callable) -> dict[str, Any]:
        """Zero the gradients, forward and backward every micro-batch, take one optimizer step.

        Returns the engine's output dict; on ranks that hold outputs, ``metrics['grad_norm']`` is the step's norm.
        """
        maybe_fix_3d_position_ids(data)
        self.optimizer_zero_grad()
        outputs = self.forward_backward_batch(data, loss_function, forward_only=False)
        grad_norm = self.optimizer_step()
        if self.is_mp_src_rank_with_outputs():
            metrics = outputs.setdefault("metrics", {})
            if "grad_norm" in metrics:
                raise ValueError(
                    "train_batch: the loss function reported a 'grad_norm' metric, which is the engine's own"
                )
            metrics["grad_norm"] = grad_norm
        return outputs

    def infer_batch(self, data: TensorDict, loss_function: Callable | None = None) -> dict[str, Any]:
        """Forward every micro-batch without gradients; returns the engine's output dict."""
        maybe_fix_3d_position_ids(data)
        with torch.no_grad():
            return self.forward_backward_batch(data, loss_function, forward_only=True)

    def get_per_tensor_param(self, **kwargs: Any) -> tuple[Iterator[tuple[str, torch.Tensor]], dict | None]:
        """Full weights under Hugging Face names (collective over the group) and the PEFT config, if any."""
        raise NotImplementedError(f"{type(self).__name__}.get_per_tensor_param")

    def get_data_parallel_size(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.get_data_parallel_size")

    def get_data_parallel_rank(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.get_data_parallel_rank")

    def get_data_parallel_group(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.get_data_parallel_group")

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Move model parameters (with their gradients when ``grad``) and/or optimizer state to ``device``."""
        if grad and not model:
            raise ValueError("BaseEngine.to: gradients move with the model (grad=True needs model=True)")

    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        **kwargs: Any,
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.save_checkpoint")

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = True, **kwargs: Any
    ) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.load_checkpoint")

    def is_mp_src_rank_with_outputs(self) -> bool:
        """Whether this rank holds the model outputs of its model-parallel group (and reports them)."""
        raise NotImplementedError(f"{type(self).__name__}.is_mp_src_rank_with_outputs")

    def disable_adapter(self) -> AbstractContextManager:
        """Within the block the model runs without its LoRA adapters (the reference policy of a LoRA actor)."""
        return nullcontext()


class BaseEngineCtx:
    """``train_mode()`` / ``eval_mode()`` of an engine: loads what offloading moved to host memory on entry and
    offloads it again on exit (unless ``disable_auto_offload``); evaluation needs the weights only."""

    def __init__(self, engine: BaseEngine, mode: str, **kwargs: Any) -> None:
        if mode not in ("train", "eval"):
            raise ValueError(f"engine mode must be 'train' or 'eval', got {mode!r}")
        self.engine = engine
        self.mode = mode
        self.disable_auto_offload = bool(kwargs.pop("disable_auto_offload", False))
        self.zero_grad_on_exit = bool(kwargs.pop("zero_grad_on_exit", True))
        if kwargs:
            raise TypeError(f"{mode}_mode() got unexpected keyword arguments {sorted(kwargs)}")

    def _move(self, device: str) -> None:
        if self.disable_auto_offload:
            return
        params = self.engine.is_param_offload_enabled
        optimizer = self.engine.is_optimizer_offload_enabled and self.mode == "train"
        if params or optimizer:
            self.engine.to(device=device, model=params, optimizer=optimizer, grad=params and self.mode == "train")

    def __enter__(self) -> BaseEngineCtx:
        self.engine.mode = self.mode
        self._move(get_device_name())
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        self._move("cpu")
        self.engine.mode = None


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


class EngineRegistry:
    """Engine classes by ``model_type`` ("language_model", "value_model"), backend ("fsdp", "fsdp2", ...) and
    device ("cuda", "cpu", optionally with a vendor). ``VERL_ENGINE_DEVICE`` / ``VERL_ENGINE_VENDOR`` override the
    detected device and vendor."""

    _engines: dict[str, dict[str, dict[Any, type[BaseEngine]]]] = {}

    @classmethod
    def register(
        cls,
        model_type: str,
        backend: list[str] | str,
        device: list[str] | str = "cuda",
        vendor: list[str] | str | None = None,
    ) -> Callable[[type[BaseEngine]], type[BaseEngine]]:
        """Class decorator registering an engine for every (backend, device[, vendor]) combination given."""

        def decorator(engine_class: type[BaseEngine]) -> type[BaseEngine]:
            if not (isinstance(engine_class, type) and issubclass(engine_class, BaseEngine)):
                raise TypeError(f"EngineRegistry.register: {engine_class!r} is not a BaseEngine subclass")
            by_backend = cls._engines.setdefault(model_type, {})
            for backend_name in _as_list(backend):
                slots = by_backend.setdefault(backend_name, {})
                for device_name in _as_list(device):
                    for vendor_name in _as_list(vendor) if vendor else [None]:
                        key = (device_name, vendor_name) if vendor_name else device_name
                        existing = slots.get(key)
                        if existing is not None and existing is not engine_class:
                            raise ValueError(
                                f"engine for model_type={model_type!r} backend={backend_name!r} "
                                f"device={key!r} is already registered to {existing.__qualname__}"
                            )
                        slots[key] = engine_class
            return engine_class

        return decorator

    @classmethod
    def get_engine_cls(cls, model_type: str, backend: str) -> type[BaseEngine]:
        """The engine class for this machine's device (and vendor, when registered per vendor)."""
        if model_type not in cls._engines:
            raise ValueError(f"no engine registered for model_type={model_type!r}; known: {sorted(cls._engines)}")
        backends = cls._engines[model_type]
        if backend not in backends:
            raise ValueError(f"no {model_type!r} engine registered for backend={backend!r}; known: {sorted(backends)}")
        device = os.getenv("VERL_ENGINE_DEVICE") or get_device_name()
        vendor = os.getenv("VERL_ENGINE_VENDOR") or ("nvidia" if device == "cuda" else None)
        slots = backends[backend]
        for key in ((device, vendor), device, (device, "nvidia")):
            if key in slots:
                return slots[key]
        raise ValueError(
            f"no {model_type!r} engine for backend={backend!r} on device={device!r} "
            f"(vendor={vendor!r}); registered: {sorted(map(str, slots))}"
        )

    @classmethod
    def new(cls, model_type: str, backend: str, *args: Any, **kwargs: Any) -> BaseEngine:
        """Instantiate the engine :meth:`get_engine_cls` picks with ``*args, **kwargs``."""
        return cls.get_engine_cls(model_type, backend)(*args, **kwargs)
