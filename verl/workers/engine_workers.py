"""verl's ``verl.workers.engine_workers``: engine-backed training workers with verl's group methods.

``TrainingWorker(config)`` drives one model engine (:mod:`verl.workers.engine`, picked by ``config.model_type`` and
``config.engine_config.strategy``) on TensorDict batches: ``train_batch`` (one optimizer step), ``train_mini_batch``
(mini-batches over epochs), ``infer_batch`` (forward only), with a loss function set by ``set_loss_fn``. Its batch
methods dispatch over the ``train`` mesh; each returns a TensorDict holding the model outputs and a ``metrics``
entry, on the ranks that hold outputs.

``ActorRolloutRefWorker`` is this package's FSDP2 policy worker (:mod:`verl.workers.fsdp.actor_worker`: roles,
model building, log-prob / update / rollout methods, checkpoints) plus verl's checkpoint-engine methods:

- ``update_weights(global_steps, mode)``: ``naive`` loads the actor's current weights into this rank's colocated
  rollout engine; any other backend sends them through this rank's streaming ``checkpoint_engine``
  (:mod:`verl.checkpoint_engine.streaming`), built in ``init_model`` from ``rollout.checkpoint_engine``.
- ``execute_checkpoint_engine(method, ...)``: drive that engine (prepare, connect, finalize).

The trainers of this package publish weights with ``CheckpointEngineManager`` instead, through the worker's
``send_weights(request)``; the ``ray`` and ``collective`` backends exist only there.

Note: ``ActorRolloutRefWorker.update_weights`` is verl's group method, so it replaces the token-level
``update_weights(named_tensors, version)`` that the FSDP worker exposes to rollout clients; use
:class:`verl.workers.fsdp_workers.ActorRolloutRefWorker` where a worker serves as a rollout replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any

import psutil
import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl.checkpoint_engine.buckets import iter_named_weights
from verl.checkpoint_engine.streaming import CheckpointEngine, CheckpointEngineRegistry
from verl.checkpoint_engine.worker import build_checkpoint_engine
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.config import CheckpointConfig
from verl.utils.config_builder import as_config
from verl.utils.device import get_device_name
from verl.utils.metric.utils import Metric
from verl.utils.py_functional import append_to_dict
from verl.utils.tensordict_utils import maybe_fix_3d_position_ids
from verl.workers.config.distillation import DistillationConfig
from verl.workers.config.engine_common import EngineConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.config.optimizer import OptimizerConfig
from verl.workers.config.training_worker import MODEL_TYPES, TrainingWorkerConfig
from verl.workers.engine import BaseEngine, EngineRegistry
from verl.workers.fsdp.actor_worker import ActorRolloutRefWorker as FSDPActorRolloutRefWorker

__all__ = ["ActorRolloutRefWorker", "TrainingWorker", "TrainingWorkerConfig"]

logger = logging.getLogger(__name__)


def _with_routing_replay_flag(enabled: bool) -> Callable[[Callable], Callable]:
    """Decorator for a worker method taking a TensorDict: when the worker has ``enable_routing_replay`` on, mark the
    batch with ``enable_routing_replay=enabled`` (MoE router replay between log-prob and update passes)."""

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(self, data: TensorDict, *args: Any, **kwargs: Any) -> Any:
            if getattr(self, "enable_routing_replay", False):
                tu.assign_non_tensor_data(data, "enable_routing_replay", enabled)
            return func(self, data, *args, **kwargs)

        return wrapper

    return decorator


def _flatten(values: Any) -> Any:
    """Per-rank lists of per-micro-batch values as one list (Metric objects are aggregated across ranks)."""
    if not isinstance(values, list) or not values:
        return values
    if isinstance(values[0], Metric):
        return Metric.aggregate_dp(values)
    if all(isinstance(v, list) for v in values):
        return list(itertools.chain.from_iterable(values))
    return values


class TrainingWorker(Worker):
    """One rank of a group training one model through a model engine (see the module docstring).

    ``config`` (verl's ``TrainingWorkerConfig``, or a DictConfig / dict / ``SimpleNamespace`` of its keys, typed
    here) carries ``model_type`` ("language_model" / "value_model", required), ``model_config``, ``engine_config``
    (its ``strategy`` picks the engine backend), ``optimizer_config``, ``checkpoint_config``, and
    ``auto_select_engine_optim_fn(model_config, device)`` used when ``engine_config`` is None.
    """

    def __init__(self, config: Any) -> None:
        Worker.__init__(self)
        # Typed once here: a TrainingWorkerConfig (or a DictConfig / dict / SimpleNamespace of its keys), its groups
        # as HFModelConfig, EngineConfig (the backend's own class when given one; a plain mapping keeps the
        # backend's keys for the engine, which builds its own class), OptimizerConfig and CheckpointConfig.
        self.config = config = as_config(config, TrainingWorkerConfig, "training_worker")
        self.model_config = as_config(config.model_config, HFModelConfig, "training_worker.model_config")
        self.device_name = get_device_name()
        engine_config, optimizer_config = config.engine_config, config.optimizer_config
        if engine_config is None:
            if config.auto_select_engine_optim_fn is None:
                raise ValueError(
                    "TrainingWorker: config.engine_config is None and config.auto_select_engine_optim_fn "
                    "is not set, so no engine backend can be chosen"
                )
            engine_config, optimizer_config = config.auto_select_engine_optim_fn(self.model_config, self.device_name)
        self.engine_config = as_config(engine_config, EngineConfig, "training_worker.engine_config")
        self.optimizer_config = (
            None  # a forward-only engine has none
            if optimizer_config is None
            else as_config(optimizer_config, OptimizerConfig, "training_worker.optimizer_config")
        )
        self.checkpoint_config = as_config(
            config.checkpoint_config, CheckpointConfig, "training_worker.checkpoint_config"
        )
        if config.model_type is None:
            raise ValueError(f"TrainingWorker: config.model_type must name the model head, one of {list(MODEL_TYPES)}")
        self.model_type = config.model_type
        strategy = self.engine_config.strategy
        if strategy is None:
            raise ValueError("TrainingWorker: engine_config.strategy must name the engine backend (e.g. fsdp2)")
        self.engine: BaseEngine = EngineRegistry.new(
            model_type=self.model_type,
            backend=strategy,
            model_config=self.model_config,
            engine_config=self.engine_config,
            optimizer_config=self.optimizer_config,
            checkpoint_config=self.checkpoint_config,
        )
        self._register_dispatch_collect_info(
            "train", dp_rank=self.engine.get_data_parallel_rank(), is_collect=self.engine.is_mp_src_rank_with_outputs()
        )
        self.loss_fn: Callable | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Load to the accelerator (``device="device"``) or offload to ``"cpu"`` by hand."""
        if device not in ("cpu", "device"):
            raise ValueError(f"TrainingWorker.to: device must be 'cpu' or 'device', got {device!r}")
        self.engine.to(
            device=self.device_name if device == "device" else "cpu", model=model, optimizer=optimizer, grad=grad
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_loss_fn(self, loss_fn: Callable) -> None:
        """``loss_fn(model_output=..., data=..., dp_group=...) -> (loss, metrics)`` for training batches."""
        self.loss_fn = loss_fn

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reset(self) -> None:
        """Build the engine's model, optimizer and schedule (again)."""
        self.engine.initialize()

    def _batch_defaults(self, data: TensorDict, forward_only: bool) -> None:
        engine = self.engine_config
        defaults = {
            "use_remove_padding": self.model_config.use_remove_padding,
            "use_dynamic_bsz": engine.use_dynamic_bsz,
            "max_token_len_per_gpu": (
                engine.infer_max_token_len_per_gpu if forward_only else engine.max_token_len_per_gpu
            ),
            "micro_batch_size_per_gpu": (
                engine.infer_micro_batch_size_per_gpu if forward_only else engine.micro_batch_size_per_gpu
            ),
            "use_fused_kernels": engine.use_fused_kernels,
        }
        missing = {key: value for key, value in defaults.items() if key not in data.keys()}
        if missing:
            tu.assign_non_tensor(data, **missing)

    def _postprocess_output(self, output: dict[str, Any]) -> TensorDict:
        """Model outputs plus metrics: the loss summed over micro-batches and averaged over data-parallel ranks,
        grad norm and learning rate as reported, every other metric gathered from all data-parallel ranks."""
        metrics: dict[str, Any] = dict(output.pop("metrics", {}) or {})
        losses = output.pop("loss", 0.0)
        loss = torch.tensor(float(sum(losses)) if isinstance(losses, list) else float(losses), dtype=torch.float64)
        group = self.engine.get_data_parallel_group() if dist.is_initialized() else None
        dp_size = dist.get_world_size(group) if group is not None else 1
        grad_norm = metrics.pop("grad_norm", None)
        lr = metrics.pop("lr", None)
        if dp_size > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.SUM, group=group)
            loss /= dp_size
            gathered: list[dict[str, Any]] = [{} for _ in range(dp_size)]
            dist.all_gather_object(gathered, metrics, group=group)
            metrics = {key: [rank_metrics.get(key) for rank_metrics in gathered] for key in metrics}
        final = {key: _flatten(value) for key, value in metrics.items()}
        final["loss"] = float(loss.item())
        if grad_norm is not None:
            final["grad_norm"] = float(grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm)
        if lr is not None:
            final["lr"] = lr
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            final["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
            final["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / 2**30
        final["perf/cpu_memory_used_gb"] = psutil.virtual_memory().used / 2**30
        return tu.get_tensordict(
            tensor_dict=dict(output.pop("model_output", {}) or {}), non_tensor_dict={"metrics": final}
        )

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def train_batch(self, data: TensorDict) -> TensorDict | None:
        """One optimizer step over ``data`` (this rank's share); steps the LR schedule when the batch sets
        ``update_lr_scheduler``. Returns metrics on the ranks holding outputs, None elsewhere."""
        if self.loss_fn is None:
            raise RuntimeError("TrainingWorker.train_batch: set a loss function first (set_loss_fn)")
        if self.engine_config.forward_only:
            raise RuntimeError("TrainingWorker.train_batch: the engine is forward_only (engine_config.forward_only)")
        self._batch_defaults(data, forward_only=False)
        offload = bool(tu.get(data, "disable_auto_offload", False))
        with self.engine.train_mode(disable_auto_offload=offload):
            output = self.engine.train_batch(data, loss_function=self.loss_fn)
        lr = self.engine.lr_scheduler_step() if tu.get(data, "update_lr_scheduler", False) else None
        if not self.engine.is_mp_src_rank_with_outputs():
            return None
        output.pop("model_output", None)
        if lr is not None:
            output.setdefault("metrics", {})["lr"] = lr
        return self._postprocess_output(output).cpu()

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def train_mini_batch(self, data: TensorDict) -> TensorDict | None:
        """Split ``data`` into mini-batches (``mini_batch_size`` over all ranks, or ``num_mini_batch``), run
        ``epochs`` passes with one optimizer step each, step the LR schedule after the last; metrics per step."""
        maybe_fix_3d_position_ids(data)
        rows = data.shape[0]
        tu.pop(data, "disable_auto_offload", False)
        mini_batch_size = tu.pop(data, "mini_batch_size", None)
        num_mini_batch = tu.pop(data, "num_mini_batch", None)
        epochs = int(tu.pop(data, "epochs", 1))
        seed = int(tu.pop(data, "seed", 42))
        dataloader_kwargs = tu.pop(data, "dataloader_kwargs", {}) or {}
        dp_size = self.engine.get_data_parallel_size()
        if mini_batch_size is not None:
            if mini_batch_size % dp_size:
                raise ValueError(
                    f"train_mini_batch: mini_batch_size={mini_batch_size} is not divisible by the "
                    f"data-parallel size {dp_size}"
                )
            per_rank = mini_batch_size // dp_size
        elif num_mini_batch is not None:
            if rows % num_mini_batch:
                raise ValueError(
                    f"train_mini_batch: {rows} rows per rank do not split into {num_mini_batch} mini-batches"
                )
            per_rank = rows // num_mini_batch
        else:
            raise ValueError("train_mini_batch: the batch must set mini_batch_size or num_mini_batch")
        batches = tu.make_iterator(
            data,
            mini_batch_size=per_rank,
            epochs=epochs,
            seed=seed + self.engine.get_data_parallel_rank(),
            dataloader_kwargs=dataloader_kwargs,
        )
        steps = rows // per_rank * epochs
        outputs = []
        with self.engine.train_mode(disable_auto_offload=False):
            for index, mini_batch in enumerate(batches):
                tu.assign_non_tensor(mini_batch, update_lr_scheduler=index == steps - 1, disable_auto_offload=True)
                outputs.append(self.train_batch(mini_batch))
        if not self.engine.is_mp_src_rank_with_outputs():
            return None
        metrics: dict[str, Any] = {}
        for output in outputs:
            append_to_dict(metrics, tu.get(output, "metrics"))
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def infer_batch(self, data: TensorDict) -> TensorDict | None:
        """Forward ``data`` without gradients; the loss function runs too unless the batch sets
        ``compute_loss=False``; ``no_lora_adapter=True`` runs the base model of a LoRA model."""
        compute_loss = bool(tu.get(data, "compute_loss", True))
        offload = bool(tu.get(data, "disable_auto_offload", False))
        no_adapter = bool(tu.pop(data, "no_lora_adapter", False))
        self._batch_defaults(data, forward_only=True)
        with self.engine.eval_mode(disable_auto_offload=offload):
            with self.engine.disable_adapter() if no_adapter else contextlib.nullcontext():
                output = self.engine.infer_batch(data, loss_function=self.loss_fn if compute_loss else None)
        if not self.engine.is_mp_src_rank_with_outputs():
            return None
        return self._postprocess_output(output).cpu()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> Any:
        return self.engine.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> Any:
        return self.engine.load_checkpoint(local_path, hdfs_path, del_local_after_load)


class ActorRolloutRefWorker(FSDPActorRolloutRefWorker):
    """Policy worker (roles actor | rollout | ref | actor_rollout | actor_rollout_ref) with verl's
    ``update_weights(global_steps, mode)``; see the module docstring."""

    def __init__(self, config: Any, role: str, distillation_config: Any = None, **kwargs: Any) -> None:
        if distillation_config is not None:
            distillation_config = as_config(distillation_config, DistillationConfig, "distillation")
        if distillation_config is not None and distillation_config.enabled:
            raise ValueError(
                "ActorRolloutRefWorker: distillation (distillation_config) is not supported by the FSDP "
                "policy worker; leave it unset"
            )
        super().__init__(config, role, **kwargs)
        self.distillation_config = distillation_config
        self.checkpoint_engine: CheckpointEngine | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the models as the role asks, then (actor roles) the streaming checkpoint engine when
        ``rollout.checkpoint_engine.backend`` names one."""
        super().init_model()
        backend = self.config.rollout.checkpoint_engine.backend
        if self._is_actor and backend != "naive" and backend in CheckpointEngineRegistry.registered():
            self.checkpoint_engine = build_checkpoint_engine(
                self.config.rollout.checkpoint_engine, is_master=self.rank == 0
            )

    def _trainer_weights(self) -> Iterable[tuple[str, torch.Tensor]]:
        """The actor's full weights under Hugging Face names (collective over the group): from a training engine
        exposing ``get_per_tensor_param`` (verl's engines), else gathered from the FSDP module."""
        engine = getattr(self.actor, "engine", None)
        if engine is not None and callable(getattr(engine, "get_per_tensor_param", None)):
            weights, _peft_config = engine.get_per_tensor_param()
            return weights
        module = self._require("actor_module_fsdp", "update_weights")
        return iter_named_weights(module, device=None)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int | None = None, mode: str = "auto") -> dict[str, Any]:
        """Move the actor's weights to the rollout side for step ``global_steps``.

        ``mode="auto"`` uses ``rollout.checkpoint_engine.backend``. ``naive``: load them into this rank's colocated
        engine (returns ``{version, checksum}``). Otherwise send them through ``checkpoint_engine`` (returns the
        engine's metrics, ``{}`` when it reports none).
        """
        effective = self.config.rollout.checkpoint_engine.backend if mode == "auto" else mode
        if effective != "naive":
            if self.checkpoint_engine is None:
                raise RuntimeError(
                    f"update_weights(mode={effective!r}) on rank {self.rank}: no streaming checkpoint engine named "
                    f"{effective!r} is registered (registered: {CheckpointEngineRegistry.registered()}); the "
                    "'ray' and 'collective' backends are driven by CheckpointEngineManager through send_weights"
                )
            metrics = await self.checkpoint_engine.send_weights(self._trainer_weights(), global_steps=global_steps)
            return metrics or {}
        return await asyncio.to_thread(self._load_local_rollout, int(global_steps or 0))

    def _load_local_rollout(self, version: int) -> dict[str, Any]:
        rollout = self._require("rollout", "update_weights")
        self._load_actor()
        try:
            return rollout.update_weights(self.iter_rollout_weight_buckets(), version)
        finally:
            self._offload_actor()

    @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
    def execute_checkpoint_engine(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` of this rank's streaming checkpoint engine (``prepare``, ``init_process_group``...)."""
        if self.checkpoint_engine is None:
            raise RuntimeError(
                f"execute_checkpoint_engine({method!r}) on rank {self.rank}: this worker has no "
                "streaming checkpoint engine (rollout.checkpoint_engine.backend names none)"
            )
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)
