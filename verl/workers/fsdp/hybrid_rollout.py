"""The rollout engine living inside an actor worker process (hybrid engine), driven from sync worker methods.

The engine speaks asyncio (``RolloutServer``); a worker method is a plain synchronous Ray call. One private event
loop on a daemon thread owns every engine call, so the engine's background task, locks and futures always live on
the same loop; sync methods submit coroutines to it and wait with a timeout. This is the only place in the worker
that touches asyncio.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from verl.base_config import BaseConfig
from verl.protocol import DataProto
from verl.utils.weight_checksum import weight_checksum
from verl.workers.rollout.batch_rendezvous import BatchGroup, BatchRendezvous
from verl.workers.rollout.replica import build_server
from verl.workers.rollout.request_batching import gather_each, serve_request_batch

__all__ = ["AsyncLoopThread", "HybridRollout", "rollout_dtype"]

_SAMPLING_META_KEYS = ("temperature", "top_p", "top_k", "do_sample")


class AsyncLoopThread:
    """A private event loop on a daemon thread; ``run(coro)`` blocks the caller until the coroutine finishes."""

    def __init__(self, name: str = "verl-hybrid-rollout-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def run_async(self, coro: Coroutine, timeout_s: float | None, what: str) -> Any:
        """Await ``coro`` on the private loop from another running loop (e.g. Ray's), without blocking it."""
        future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))
        try:
            return await asyncio.wait_for(future, timeout=timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"hybrid rollout: {what} did not finish within {timeout_s}s") from None

    def run(self, coro: Coroutine, timeout_s: float | None, what: str) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"hybrid rollout: {what} did not finish within {timeout_s}s") from None

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


def rollout_dtype(name: str, device: torch.device) -> torch.dtype:
    """``rollout.dtype``: ``auto`` is bfloat16 on an accelerator and float32 on CPU."""
    from verl.workers.fsdp.model_loader import parse_dtype

    if str(name) == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return parse_dtype(name, key="rollout.dtype")


def _row_prompt(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[int]:
    return input_ids[attention_mask.bool()].tolist()


class HybridRollout:
    """One rollout replica in this process plus the batch-level ``generate_sequences`` on top of it.

    Args:
        config: the ``rollout`` group (``RolloutConfig``; a DictConfig or dict is converted), read by attribute.
        model_path: checkpoint folder the engine loads its own copy from.
        device: where the engine runs.
        pad_token_id: pads responses on the right.
        call_timeout_s: bound on every engine call made from a sync method.
    """

    def __init__(
        self, config: Any, model_path: str, device: torch.device, pad_token_id: int, call_timeout_s: float = 3600.0
    ) -> None:
        if isinstance(config, Mapping) and not isinstance(config, BaseConfig):
            from verl.utils.config_builder import as_config
            from verl.workers.config.rollout import RolloutConfig

            config = as_config(config, RolloutConfig, "rollout")
        self.config = config
        self.device = device
        self.pad_token_id = int(pad_token_id)
        self.call_timeout_s = call_timeout_s
        self.dtype = rollout_dtype(config.dtype, device)
        name = config.name
        kwargs: dict[str, Any] = {}
        if name == "hf":
            from verl.workers.rollout.hf.model_io import load_model

            kwargs["model"] = load_model(model_path, self.dtype, device, "sdpa")
        self.replica = build_server(config, model_path, **kwargs)
        self.loop = AsyncLoopThread()
        self.rendezvous = BatchRendezvous()
        self.asleep = False

    def run(self, coro: Coroutine, what: str) -> Any:
        return self.loop.run(coro, self.call_timeout_s, what)

    async def run_async(self, coro: Coroutine, what: str) -> Any:
        return await self.loop.run_async(coro, self.call_timeout_s, what)

    # ------------------------------------------------------------------ generation

    def sampling_params(self, meta_info: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Per-request sampling parameters and ``n`` for a batch: the config's, the validation set's when
        ``meta_info['validate']``, then explicit meta_info overrides."""
        cfg = self.config
        source = cfg.val_kwargs if meta_info.get("validate") else cfg
        params: dict[str, Any] = {
            "temperature": float(source.temperature),
            "top_p": float(source.top_p),
            "top_k": int(source.top_k),
            "do_sample": bool(source.do_sample),
            "max_tokens": int(cfg.response_length),
            "logprobs": bool(cfg.calculate_log_probs),
            "ignore_eos": bool(cfg.ignore_eos),
        }
        n = int(source.n) if meta_info.get("validate") else 1
        for key in _SAMPLING_META_KEYS:
            if meta_info.get(key) is not None:
                params[key] = meta_info[key]
        if meta_info.get("n") is not None:
            n = int(meta_info["n"])
        if n < 1:
            raise ValueError(f"generate_sequences: meta_info['n'] must be >= 1, got {n}")
        return params, n

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per row (``n`` per row when meta_info asks) and lay the batch out as verl does.

        Input: left-padded ``input_ids`` / ``attention_mask`` / ``position_ids``. Output rows (repeated ``n`` times,
        interleaved) carry prompts, responses (right padded to rollout.response_length), response_mask, input_ids,
        attention_mask, position_ids, and rollout_log_probs when rollout.calculate_log_probs.
        """
        batch = prompts.batch
        missing = [k for k in ("input_ids", "attention_mask", "position_ids") if batch is None or k not in batch.keys()]
        if missing:
            raise KeyError(
                f"generate_sequences needs batch keys {missing}; the batch has "
                f"{sorted(batch.keys()) if batch is not None else []}"
            )
        params, n = self.sampling_params(prompts.meta_info)
        if n > 1:
            prompts = prompts.repeat(repeat_times=n, interleave=True)
            batch = prompts.batch
        input_ids = batch["input_ids"].cpu()
        attention_mask = batch["attention_mask"].cpu()
        position_ids = batch["position_ids"].cpu()
        rows = [_row_prompt(input_ids[i], attention_mask[i]) for i in range(input_ids.shape[0])]
        seed = prompts.meta_info.get("seed")
        # A batch call on a sleeping engine would wait for a wake_up nobody sends: wake it for this batch only.
        was_asleep = self.asleep
        if was_asleep:
            self.wake_up()
        try:
            outputs = self.run(self._generate_all(rows, params, seed), "generate_sequences")
        finally:
            if was_asleep:
                self.sleep()
        response_length = int(self.config.response_length)
        responses = torch.full((len(rows), response_length), self.pad_token_id, dtype=input_ids.dtype)
        response_mask = torch.zeros((len(rows), response_length), dtype=attention_mask.dtype)
        log_probs = torch.zeros((len(rows), response_length), dtype=torch.float32)
        for i, out in enumerate(outputs):
            tokens = out.token_ids[:response_length]
            responses[i, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
            response_mask[i, : len(tokens)] = 1
            if out.log_probs is not None:
                log_probs[i, : len(tokens)] = torch.tensor(out.log_probs[: len(tokens)], dtype=torch.float32)
        steps = torch.arange(1, response_length + 1, dtype=position_ids.dtype).unsqueeze(0)
        response_positions = position_ids[:, -1:] + steps
        tensors = {
            "prompts": input_ids,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([input_ids, responses], dim=-1),
            "attention_mask": torch.cat([attention_mask, response_mask], dim=-1),
            "position_ids": torch.cat([position_ids, response_positions], dim=-1),
        }
        if params["logprobs"]:
            tensors["rollout_log_probs"] = log_probs
        non_tensors = {k: v for k, v in prompts.non_tensor_batch.items()}
        stop = np.array([out.stop_reason for out in outputs], dtype=object)
        non_tensors["stop_reason"] = stop
        # No timing here: per-rank values would make concat (equal meta_info) and union refuse the outputs.
        meta = {k: v for k, v in prompts.meta_info.items() if k != "metrics"}
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)

    async def serve_requests(
        self, requests: list[tuple[list[int], dict[str, Any], str]] | bytes, batch_group: BatchGroup | None = None
    ) -> list[Any] | bytes:
        """Serve many token-level requests in one call: each entry's ``TokenOutput``, or the exception it raised.

        One hop onto the engine's loop for the whole list (instead of one per request) and every request reaches
        the engine's admission queue at once, so they decode together as one batch; the calls of one
        ``batch_group`` (one trainer batch split over agent-loop workers) are merged first
        (:mod:`verl.workers.rollout.batch_rendezvous`). Requests packed with
        :func:`~verl.workers.rollout.batch_wire.pack_batch` get their results packed the same way.
        """
        return await serve_request_batch(requests, batch_group, self.rendezvous, self._serve_now)

    async def _serve_now(self, requests: list[tuple[list[int], dict[str, Any], str]]) -> list[Any]:
        return await self.run_async(gather_each(self.replica.generate)(requests), f"{len(requests)} generate requests")

    async def _generate_all(self, rows: list[list[int]], params: dict[str, Any], seed: int | None) -> list:
        tag = uuid.uuid4().hex[:8]
        calls = []
        for i, prompt in enumerate(rows):
            request = dict(params)
            if seed is not None:
                request["seed"] = int(seed) + i
            calls.append(self.replica.generate(prompt, request, f"gen-{tag}-{i}"))
        return await asyncio.gather(*calls)

    # ------------------------------------------------------------------ weights and memory

    def update_weights(self, buckets: Iterable[list[tuple[str, torch.Tensor]]], version: int) -> dict[str, Any]:
        """Load every bucket into the engine; the checksum covers all loaded tensors as the engine holds them."""
        names: list[str] = []
        bucket_sums: list[str] = []
        for bucket in buckets:
            result = self.run(self.replica.update_weights(bucket, version), "update_weights")
            names.extend(name for name, _ in bucket)
            bucket_sums.append(str(result.get("checksum")))
        model = getattr(self.replica, "model", None)
        if len(bucket_sums) == 1 and model is not None:  # the engine hashed exactly these tensors after loading
            checksum = bucket_sums[0]
        elif model is not None:
            own = dict(model.named_parameters(remove_duplicate=False))
            own.update(dict(model.named_buffers(remove_duplicate=False)))
            checksum = weight_checksum([(name, own[name]) for name in names])
        else:  # an engine whose tensors we cannot see: fold its per-bucket checksums as the checkpoint engine does
            from verl.checkpoint_engine import combine_bucket_checksums

            checksum = combine_bucket_checksums(bucket_sums)
        return {"version": int(version), "checksum": checksum}

    def sleep(self) -> None:
        self.run(self.replica.sleep(), "sleep")
        self.asleep = True

    def wake_up(self) -> None:
        self.run(self.replica.wake_up(), "wake_up")
        self.asleep = False

    async def sleep_async(self) -> None:
        """``sleep`` for callers already on an event loop (the worker's async methods)."""
        await self.run_async(self.replica.sleep(), "sleep")
        self.asleep = True

    async def wake_up_async(self) -> None:
        await self.run_async(self.replica.wake_up(), "wake_up")
        self.asleep = False

    def get_version(self) -> int:
        return int(self.run(self.replica.get_version(), "get_version"))

    def close(self) -> None:
        self.loop.close()
