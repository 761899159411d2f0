"""SFTTrainer: supervised fine-tuning of a causal LM on prompt/response parquet, ending in an HF checkpoint.

Why it exists: RL from a random or weak model collapses on tasks whose reward is rarely non-zero. A short SFT run on
demonstrations puts the policy where GRPO/PPO get signal; its output folder is passed to ``main_ppo`` as
``model.path``.

One process by default; under torchrun (``WORLD_SIZE > 1``) each rank holds an FSDP2 shard and reads its own slice
of every batch (``DistributedSampler``). The loss is the token mean of cross entropy over response tokens of the whole
global batch, so the result does not depend on how the batch is cut into ranks and micro-batches.

Saves go to ``global_step_{k}/`` in verl's checkpoint layout (:mod:`verl.trainer.sft.resume`); with
``trainer.final_export`` the final model is also exported to ``{default_local_dir}/huggingface``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from verl.base_config import ConfigError
from verl.trainer.sft.checkpoint import save_hf_checkpoint
from verl.trainer.sft.config import AFTER_EACH_EPOCH, SFTConfig
from verl.trainer.sft.dataset import SFTDataset
from verl.trainer.sft.distributed import DistContext, init_distributed
from verl.trainer.sft.resume import SFTCheckpointer
from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

__all__ = ["FINAL_CHECKPOINT_NAME", "SFTTrainer", "response_token_loss"]

logger = logging.getLogger(__name__)

# The final export lands in ``{default_local_dir}/huggingface``; periodic ones in ``global_step_{k}/huggingface``.
FINAL_CHECKPOINT_NAME = "huggingface"


def response_token_loss(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross entropy over positions whose *target* token has ``loss_mask == 1``.

    Position ``t`` predicts token ``t + 1``, so the mask is shifted by one. Returns a scalar sum (not a mean): the
    caller divides by the token count of the whole global batch.
    """
    shift_logits = logits[:, :-1].float()
    labels = input_ids[:, 1:]
    mask = loss_mask[:, 1:].to(shift_logits.dtype)
    ce = F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), labels.reshape(-1), reduction="none")
    return (ce.view_as(mask) * mask).sum()


def _resolve_model_path(raw: str) -> str:
    from verl.workers.config.model import BUILTIN_TINY_MODEL

    if raw == BUILTIN_TINY_MODEL:
        from verl.utils.tiny_model import tiny_model_path

        return str(tiny_model_path())
    path = os.path.expanduser(raw)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model.path={raw!r}: no such folder (this trainer loads local HF checkpoints)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model.path={raw!r} is not a Hugging Face checkpoint folder: it has no config.json")
    return path


def _enable_activation_checkpointing(model: nn.Module) -> None:
    # transformers 5 renamed gradient_checkpointing_enable; non-reentrant checkpointing works with frozen inputs (LoRA).
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class SFTTrainer:
    """Build data, model and optimizer from an :class:`SFTConfig`; ``fit()`` trains and exports checkpoints.

    ``tokenizer``/``train_dataset``/``val_dataset`` may be passed in to override what the config describes.
    Call ``close()`` (or use ``fit()``, which calls it) to leave the process group.
    """

    def __init__(
        self,
        config: SFTConfig,
        tokenizer: Any = None,
        train_dataset: torch.utils.data.Dataset | None = None,
        val_dataset: torch.utils.data.Dataset | None = None,
    ) -> None:
        self.config = config
        tcfg = config.trainer
        self.ctx: DistContext = init_distributed(tcfg.device, tcfg.nnodes, tcfg.n_gpus_per_node)
        torch.manual_seed(tcfg.seed)
        self.model_path = _resolve_model_path(config.model.path)
        self.tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer()
        dcfg = config.data
        if train_dataset is None:
            train_dataset = self._build_dataset(dcfg.train_file_list, "data.train_files", dcfg.train_max_samples)
        self.train_dataset = train_dataset
        if val_dataset is None and dcfg.val_file_list:
            val_dataset = self._build_dataset(dcfg.val_file_list, "data.val_files", dcfg.val_max_samples)
        self.val_dataset = val_dataset
        self._plan_batches()
        self.model = self._build_model()
        self.optimizer, self.lr_scheduler = self._build_optimizer()
        self.global_step = 0
        self.checkpointer = self._build_checkpointer()
        self._resume()
        self.tracker = self._build_tracker()
        self.history: list[dict[str, float]] = []

    # ----------------------------------------------------------------------------------------------- setup
    def _load_tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        mcfg = self.config.model
        tokenizer_path = mcfg.tokenizer_path
        if tokenizer_path in (None, mcfg.path):
            tokenizer_path = self.model_path
        tokenizer_path = os.path.expanduser(tokenizer_path)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=mcfg.trust_remote_code)
        if mcfg.custom_chat_template:
            tokenizer.chat_template = mcfg.custom_chat_template
        if tokenizer.chat_template is None:
            raise ValueError(f"the tokenizer of {tokenizer_path} has no chat template; set model.custom_chat_template")
        return tokenizer

    def _build_dataset(self, files: list[str], files_key: str, max_samples: int) -> torch.utils.data.Dataset:
        """SFTDataset (or ``data.custom_cls``) over ``files``, cut to the first ``max_samples`` rows when > 0."""
        dcfg = self.config.data
        if dcfg.custom_cls.path:
            from omegaconf import OmegaConf

            from verl.utils.import_utils import load_extern_object

            cls = load_extern_object(
                dcfg.custom_cls.path,
                dcfg.custom_cls.name or "",
                config_key="data.custom_cls.path",
                what="dataset class",
            )
            kwargs: dict[str, Any] = {
                "parquet_files": files,
                "tokenizer": self.tokenizer,
                "config": OmegaConf.create(dcfg.to_dict()),
            }
            if "max_samples" in inspect.signature(cls).parameters:
                kwargs["max_samples"] = max_samples
            dataset = cls(**kwargs)
        else:
            dataset = SFTDataset(files, self.tokenizer, dcfg, files_key)
        if 0 < max_samples < len(dataset):
            dataset = Subset(dataset, range(max_samples))
        return dataset

    def _plan_batches(self) -> None:
        dcfg, world = self.config.data, self.ctx.world_size
        if dcfg.train_batch_size % world:
            raise ConfigError(
                f"{dcfg.train_batch_size} is not divisible by the number of processes ({world})",
                key="data.train_batch_size",
            )
        self.batch_per_rank = dcfg.train_batch_size // world
        if self.batch_per_rank % dcfg.micro_batch_size_per_gpu:
            raise ConfigError(
                f"{dcfg.micro_batch_size_per_gpu} does not divide the per-process batch "
                f"{self.batch_per_rank} (data.train_batch_size={dcfg.train_batch_size} / {world} processes)",
                key="data.micro_batch_size_per_gpu",
            )
        self.grad_accum = self.batch_per_rank // dcfg.micro_batch_size_per_gpu
        self.train_sampler = DistributedSampler(
            self.train_dataset,
            num_replicas=world,
            rank=self.ctx.rank,
            shuffle=dcfg.shuffle,
            seed=self.config.trainer.seed,
            drop_last=True,
        )
        self.train_loader = DataLoader(
            self.train_dataset, batch_size=self.batch_per_rank, sampler=self.train_sampler, drop_last=True
        )
        self.steps_per_epoch = len(self.train_loader)
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"data.train_files hold {len(self.train_dataset)} rows, fewer than one batch "
                f"(data.train_batch_size={dcfg.train_batch_size})"
            )
        tcfg = self.config.trainer
        self.total_steps = tcfg.total_training_steps or self.steps_per_epoch * tcfg.total_epochs
        self.save_freq = self._steps_of(tcfg.save_freq)
        self.test_freq = self._steps_of(tcfg.test_freq)
        self.val_loader = None
        if self.val_dataset is not None:
            sampler = DistributedSampler(self.val_dataset, num_replicas=world, rank=self.ctx.rank, shuffle=False)
            self.val_loader = DataLoader(self.val_dataset, batch_size=dcfg.micro_batch_size_per_gpu, sampler=sampler)

    def _steps_of(self, freq: int | str) -> int:
        """``trainer.save_freq``/``test_freq`` in steps (``after_each_epoch``: one pass over the data)."""
        return self.steps_per_epoch if freq == AFTER_EACH_EPOCH else int(freq)

    def _mixed_precision_dtype(self) -> torch.dtype | None:
        mode = self.config.trainer.mixed_precision
        if mode == "bf16" or (mode == "auto" and self.ctx.device.type == "cuda"):
            return torch.bfloat16
        return None

    def _build_model(self) -> nn.Module:
        from transformers import AutoConfig, AutoModelForCausalLM

        mcfg = self.config.model
        if mcfg.external_lib:
            import importlib

            importlib.import_module(mcfg.external_lib)
        hf_config = AutoConfig.from_pretrained(
            mcfg.hf_config_path or self.model_path, trust_remote_code=mcfg.trust_remote_code, **mcfg.override_config
        )
        self.save_dtype = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
        if isinstance(self.save_dtype, str):
            self.save_dtype = getattr(torch, self.save_dtype, None)
        # Master weights stay float32 so AdamW updates are not lost to rounding; compute may run in bf16.
        model = AutoModelForCausalLM.from_pretrained(
            self.model_path, config=hf_config, dtype=torch.float32, trust_remote_code=mcfg.trust_remote_code
        )
        # Forward passes pass use_cache=False; config.use_cache stays as loaded so the exported model generates fast.
        if mcfg.enable_gradient_checkpointing:
            _enable_activation_checkpointing(model)
        self.lora_scaling = None
        if mcfg.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=mcfg.lora_rank,
                lora_alpha=mcfg.lora_alpha,
                target_modules=mcfg.target_modules,
                exclude_modules=mcfg.exclude_modules,
                lora_dropout=0.0,
                bias="none",
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, lora)
            self.lora_scaling = mcfg.lora_alpha / mcfg.lora_rank
        self.hf_config = self._export_config(model)
        model.to(self.ctx.device)
        self.autocast_dtype = self._mixed_precision_dtype()
        if self.ctx.is_distributed:
            model = self._shard(model)
        return model

    def _export_config(self, model: nn.Module) -> Any:
        """The config written next to every checkpoint: the loaded one, naming the model class and the save dtype."""
        from verl.workers.fsdp.model_loader import export_config

        config = export_config(model)
        if self.save_dtype is not None:
            config.dtype = self.save_dtype
        return config

    def _shard(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.ctx.device.type, (self.ctx.world_size,))
        kwargs: dict[str, Any] = {"mesh": mesh}
        if self.autocast_dtype is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=self.autocast_dtype, reduce_dtype=torch.float32)
            self.autocast_dtype = None  # FSDP casts the parameters itself
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        layer_names = set(getattr(base, "_no_split_modules", None) or [])
        layers = [m for m in model.modules() if type(m).__name__ in layer_names]
        if not layers:
            layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
        for layer in layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def _build_optimizer(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        ocfg = self.config.optim
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=ocfg.lr, betas=tuple(ocfg.betas), weight_decay=ocfg.weight_decay)
        warmup = ocfg.warmup_steps(self.total_steps)
        if ocfg.lr_scheduler_type == "cosine":
            scheduler = get_cosine_schedule_with_warmup(
                optimizer, warmup, self.total_steps, min_lr_ratio=ocfg.min_lr_ratio, num_cycles=ocfg.num_cycles
            )
        else:
            scheduler = get_constant_schedule_with_warmup(optimizer, warmup)
        return optimizer, scheduler

    def _build_checkpointer(self) -> SFTCheckpointer:
        mcfg = self.config.model
        lora_meta = None
        if mcfg.lora_rank > 0:
            lora_meta = {"r": mcfg.lora_rank, "lora_alpha": mcfg.lora_alpha, "task_type": "CAUSAL_LM"}
        return SFTCheckpointer(
            self.config.trainer,
            self.config.checkpoint,
            self.model,
            self.optimizer,
            self.lr_scheduler,
            self.tokenizer,
            self.hf_config,
            self._export_hf_weights,
            is_main=self.ctx.is_main,
            lora_meta=lora_meta,
        )

    def _export_hf_weights(self, out_dir: str) -> None:
        save_hf_checkpoint(
            self.model,
            self.tokenizer,
            out_dir,
            distributed=self.ctx.is_distributed,
            is_main=self.ctx.is_main,
            lora_scaling=self.lora_scaling,
            dtype=self.save_dtype,
        )

    def _resume(self) -> None:
        """Continue from the checkpoint ``trainer.resume_mode`` picks (model, optimizer, LR schedule, position)."""
        step_dir = self.checkpointer.find_resume_dir()
        if step_dir is None:
            return
        load = list(self.config.checkpoint.load_contents or [])
        if "model" not in load:
            raise ConfigError(
                f"is {load}: resuming from {step_dir} needs 'model' (and 'optimizer', 'extra' for an exact "
                "continuation); set trainer.resume_mode=disable to start fresh",
                key="checkpoint.load_contents",
            )
        state = self.checkpointer.load(step_dir)
        self.global_step = int(state["global_step"])
        saved_batch = (state.get("extra_state") or {}).get("train_batch_size")
        if saved_batch is not None and saved_batch != self.config.data.train_batch_size:
            logger.warning(
                "resumed from %s, saved with data.train_batch_size=%s (now %s): the data position is "
                "counted in steps of the new size",
                step_dir,
                saved_batch,
                self.config.data.train_batch_size,
            )
        if self.ctx.is_main:
            print(f"[sft] resumed from {step_dir} at step {self.global_step}", flush=True)

    def save_step_checkpoint(self) -> Path:
        """Write ``global_step_{k}`` for the current step (what ``checkpoint.save_contents`` names); collective."""
        extra = {"train_batch_size": self.config.data.train_batch_size, "steps_per_epoch": self.steps_per_epoch}
        return self.checkpointer.save(self.global_step, extra_state=extra)

    def _build_tracker(self) -> Any:
        if not self.ctx.is_main:
            return None
        from verl.utils.tracking import Tracking

        tcfg = self.config.trainer
        return Tracking(
            tcfg.project_name,
            tcfg.experiment_name,
            default_backend=tcfg.logger,
            config=self.config.to_dict(),
            local_dir=os.path.expanduser(tcfg.default_local_dir),
        )

    # ----------------------------------------------------------------------------------------------- steps
    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=self.autocast_dtype)

    def _forward_loss_sum(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # Rows are right-padded: drop the columns no row of this micro-batch uses.
        length = max(int(batch["attention_mask"].sum(-1).max()), 2)
        batch = {k: v[:, :length].to(self.ctx.device) for k, v in batch.items()}
        with self._autocast():
            logits = self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"],
                use_cache=False,
            ).logits
        return response_token_loss(logits, batch["input_ids"], batch["loss_mask"])

    def _set_grad_sync(self, enabled: bool) -> None:
        if self.ctx.is_distributed and hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(enabled)

    def train_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One optimizer step on this rank's share of a global batch; returns the step's metrics."""
        self.model.train()
        counts = torch.stack([batch["loss_mask"][:, 1:].sum(), batch["attention_mask"].sum()])
        counts = self.ctx.all_reduce_sum(counts.to(torch.float64).to(self.ctx.device)).tolist()
        global_tokens, sequence_tokens = counts
        if global_tokens == 0:
            raise ValueError(
                "a training batch has no response tokens (every loss_mask is 0): check data.response_key "
                "and data.truncation"
            )
        micro = self.config.data.micro_batch_size_per_gpu
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.ctx.device)
        for i in range(self.grad_accum):
            self._set_grad_sync(i == self.grad_accum - 1)
            part = {k: v[i * micro : (i + 1) * micro] for k, v in batch.items()}
            summed = self._forward_loss_sum(part)
            # FSDP averages gradients over ranks; scaling by world size turns that into the global token mean.
            (summed * (self.ctx.world_size / global_tokens)).backward()
            loss_sum += summed.detach().to(torch.float64)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.config.optim.clip_grad
        )
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        lr = self.lr_scheduler.get_last_lr()[0]
        if math.isfinite(grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.lr_scheduler.step()
        loss = float(self.ctx.all_reduce_sum(loss_sum).item()) / global_tokens
        return {
            "train/loss": loss,
            "train/lr": lr,
            "train/grad_norm": grad_norm,
            "train/skipped_step": float(not math.isfinite(grad_norm)),
            "train/global_tokens": sequence_tokens,
        }

    @torch.no_grad()
    def validate(self) -> float:
        """Token-mean response cross entropy over the whole validation set (all ranks)."""
        if self.val_loader is None:
            raise ValueError("validate() needs data.val_files")
        self.model.eval()
        totals = torch.zeros(2, dtype=torch.float64, device=self.ctx.device)
        for batch in self.val_loader:
            totals[0] += self._forward_loss_sum(batch).to(torch.float64)
            totals[1] += batch["loss_mask"][:, 1:].sum()
        self.ctx.all_reduce_sum(totals)
        return float(totals[0] / totals[1].clamp(min=1))

    def save_checkpoint(self, out_dir: str | os.PathLike) -> Path:
        """Export an HF folder (merged weights + tokenizer) to ``out_dir``; collective under torchrun."""
        path = save_hf_checkpoint(
            self.model,
            self.tokenizer,
            out_dir,
            distributed=self.ctx.is_distributed,
            is_main=self.ctx.is_main,
            lora_scaling=self.lora_scaling,
            dtype=self.save_dtype,
        )
        self.ctx.barrier()
        return path

    def _log(self, metrics: dict[str, float]) -> None:
        self.history.append({"step": self.global_step, **metrics})
        if self.tracker is not None:
            self.tracker.log(metrics, step=self.global_step)

    def _iterate_batches(self):
        """(epoch, batch) from the current step on: a resumed run skips the batches its checkpoint already saw."""
        epoch, skip = divmod(self.global_step, self.steps_per_epoch)
        while True:
            self.train_sampler.set_epoch(epoch)
            loader = self.train_loader
            if skip:
                rest = list(self.train_sampler)[skip * self.batch_per_rank :]
                loader = DataLoader(self.train_dataset, batch_size=self.batch_per_rank, sampler=rest, drop_last=True)
            for batch in loader:
                yield epoch, batch
            epoch, skip = epoch + 1, 0

    # ----------------------------------------------------------------------------------------------- loop
    def fit(self) -> Path:
        """Train up to ``total_steps`` optimizer steps; return the final checkpoint folder (``.../huggingface`` with
        ``trainer.final_export``, else the last ``global_step_{k}``)."""
        tcfg = self.config.trainer
        out_root = Path(tcfg.default_local_dir).expanduser()
        if self.ctx.is_main:
            print(
                f"[sft] {len(self.train_dataset)} rows, {self.steps_per_epoch} steps/epoch, {self.total_steps} steps, "
                f"batch {self.config.data.train_batch_size} = {self.ctx.world_size} proc x {self.grad_accum} micro x "
                f"{self.config.data.micro_batch_size_per_gpu}, device {self.ctx.device}",
                flush=True,
            )
        try:
            start, first_step, total_tokens = time.perf_counter(), self.global_step, 0.0
            for epoch, batch in self._iterate_batches():
                if self.global_step >= self.total_steps:
                    break
                metrics = self.train_step(batch)
                self.global_step += 1
                metrics["train/epoch"] = float(epoch)
                total_tokens += metrics["train/global_tokens"]
                metrics["train/total_tokens(B)"] = total_tokens / 1e9
                last = self.global_step == self.total_steps
                if self.val_loader is not None and (last or _every(self.test_freq, self.global_step)):
                    metrics["val/loss"] = self.validate()
                if (last and not tcfg.final_export) or _every(self.save_freq, self.global_step):
                    self.save_step_checkpoint()
                metrics["train/step_time_s"] = (time.perf_counter() - start) / (self.global_step - first_step)
                self._log(metrics)
            self.checkpointer.wait()
            if not tcfg.final_export:
                return out_root / f"global_step_{self.global_step}"
            final = self.save_checkpoint(out_root / FINAL_CHECKPOINT_NAME)
            if self.ctx.is_main:
                print(f"[sft] saved the final checkpoint to {final} (use it as model.path)", flush=True)
            return final
        finally:
            self.close()

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.finish()
            self.tracker = None
        self.ctx.shutdown()


def _every(freq: int, step: int) -> bool:
    return freq > 0 and step % freq == 0
