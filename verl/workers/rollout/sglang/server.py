"""SGLang behind the rollout contract, written against SGLang's public offline ``Engine`` API.

Imported only when ``rollout.name=sglang``; the ``sglang`` package (``pip install verl[sglang]``)
and a CUDA GPU are checked first. Weights go through ``update_weights_from_tensor``; the checksum
covers what the trainer sent, cast to the rollout dtype.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from verl.utils.weight_checksum import weight_checksum
from verl.workers.rollout.adapter_utils import (
    PauseGate,
    engine_args_with_overrides,
    finish_reason_to_stop_reason,
    require_engine,
)
from verl.workers.rollout.base import RolloutServer, TokenOutput, as_rollout_config

__all__ = ["SGLangRolloutServer", "sglang_engine_args"]


def sglang_engine_args(config: Any, model_path: str, engine_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments of ``sglang.Engine`` (its ``ServerArgs``) for the rollout ``config`` (built into a
    ``RolloutConfig``).

    Pure (SGLang is not imported) so that the mapping from verl's keys is testable anywhere: ``enforce_eager`` is
    SGLang's ``disable_cuda_graph``, ``max_num_batched_tokens`` its ``chunked_prefill_size`` and
    ``data_parallel_size`` its ``dp_size`` (one replica spans ``tp_size x dp_size`` GPUs).
    ``rollout.engine_kwargs.sglang`` and then the caller's ``engine_kwargs`` override any of them.
    """
    config = as_rollout_config(config)
    args: dict[str, Any] = {
        "model_path": str(model_path),
        "dtype": config.dtype,
        "tp_size": config.tensor_model_parallel_size,
        "dp_size": config.data_parallel_size,
        "context_length": config.max_total_length,
        "max_running_requests": config.max_num_seqs,
        "mem_fraction_static": config.gpu_memory_utilization,
        "disable_cuda_graph": config.enforce_eager,
        "chunked_prefill_size": config.max_num_batched_tokens,
    }
    return engine_args_with_overrides(config, "sglang", args, engine_kwargs)


class SGLangRolloutServer(RolloutServer):
    """One SGLang ``Engine``; each request is an ``async_generate`` call."""

    def __init__(self, config: Any, model_path: str | None = None, **engine_kwargs: Any):
        require_engine("sglang", "sglang")
        if model_path is None:
            raise ValueError("rollout.name='sglang' needs model_path (model.path)")
        import sglang

        config = as_rollout_config(config)
        args = sglang_engine_args(config, model_path, engine_kwargs)
        self.response_length = config.response_length
        self.dtype = str(args["dtype"])
        self.calculate_log_probs = config.calculate_log_probs
        self.engine = sglang.Engine(**args)
        self.gate = PauseGate()
        self.in_flight: dict[str, asyncio.Task] = {}
        self.version = 0

    def _sampling_params(self, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        params = dict(params or {})
        greedy = float(params.get("temperature", 1.0)) == 0.0 or params.get("do_sample", True) is False
        top_k = int(params.get("top_k", -1))
        out = {
            "temperature": 0.0 if greedy else float(params.get("temperature", 1.0)),
            "top_p": float(params.get("top_p", 1.0)),
            "top_k": top_k if top_k > 0 else -1,
            "max_new_tokens": int(params.get("max_tokens", self.response_length)),
            "stop_token_ids": list(params.get("stop_token_ids") or []),
            "ignore_eos": bool(params.get("ignore_eos", False)),
        }
        if params.get("seed") is not None:
            out["sampling_seed"] = int(params["seed"])
        return out, bool(params.get("logprobs", self.calculate_log_probs))

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        await self.gate.wait(request_id)
        params, want_logprobs = self._sampling_params(sampling_params)
        rid = f"{request_id}-{uuid.uuid4().hex[:8]}"
        call = self.engine.async_generate(
            input_ids=list(prompt_ids), sampling_params=params, return_logprob=want_logprobs, rid=rid
        )
        task = asyncio.ensure_future(call)
        self.in_flight[rid] = task
        try:
            result = await task
        finally:
            self.in_flight.pop(rid, None)
        meta = result.get("meta_info", {})
        token_ids = list(result.get("output_ids", []))
        log_probs = None
        if want_logprobs and meta.get("output_token_logprobs") is not None:
            log_probs = [float(entry[0]) for entry in meta["output_token_logprobs"]]
        return TokenOutput(token_ids, log_probs, finish_reason_to_stop_reason(meta.get("finish_reason")))

    async def _abort_requests(self) -> None:
        for rid in list(self.in_flight):
            self.engine.tokenizer_manager.abort_request(rid)
        if self.in_flight:
            await asyncio.gather(*self.in_flight.values(), return_exceptions=True)

    async def abort_all(self) -> None:
        self.gate.set(paused=True)
        await self._abort_requests()

    async def resume(self) -> None:
        self.gate.set(paused=False)

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        items = list(named_tensors.items()) if isinstance(named_tensors, dict) else list(named_tensors)
        await asyncio.to_thread(self.engine.update_weights_from_tensor, items)
        self.version = version
        from verl.workers.rollout.hf.model_io import resolve_dtype

        return {"version": version, "checksum": weight_checksum(items, dtype=resolve_dtype(self.dtype))}

    async def sleep(self) -> None:
        self.gate.set(sleeping=True)
        await self._abort_requests()
        await asyncio.to_thread(self.engine.release_memory_occupation)

    async def wake_up(self) -> None:
        await asyncio.to_thread(self.engine.resume_memory_occupation)
        self.gate.set(sleeping=False)

    async def get_version(self) -> int:
        return self.version
