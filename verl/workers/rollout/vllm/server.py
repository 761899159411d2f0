"""vLLM behind the rollout contract, written against vLLM's public async engine API.

Imported only when ``rollout.name=vllm``; the ``vllm`` package (``pip install verl[vllm]``) and a
CUDA GPU are checked before anything else so a CPU machine fails with a clear message.

Weights travel through ``collective_rpc`` to a worker extension that calls the model's own
``load_weights``; the checksum is computed over what the trainer sent, cast to the rollout dtype
(the engine's sharded tensors cannot be read back in one place cheaply).
"""

from __future__ import annotations

import asyncio
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

__all__ = ["VLLMRolloutServer", "WeightUpdateExtension", "vllm_engine_args"]


def vllm_engine_args(config: Any, model_path: str, engine_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments of vLLM's ``AsyncEngineArgs`` for the rollout ``config`` (built into a ``RolloutConfig``).

    Pure (vLLM is not imported) so that the mapping from verl's keys is testable anywhere. One replica spans
    ``tensor_model_parallel_size x data_parallel_size`` GPUs: vLLM runs ``data_parallel_size`` engine copies of
    ``tensor_parallel_size`` GPUs each behind the one server.
    ``rollout.engine_kwargs.vllm`` and then the caller's ``engine_kwargs`` override any of them: the user's explicit
    engine settings win.
    """
    config = as_rollout_config(config)
    args: dict[str, Any] = {
        "model": str(model_path),
        "dtype": config.dtype,
        "tensor_parallel_size": config.tensor_model_parallel_size,
        "data_parallel_size": config.data_parallel_size,
        "max_num_seqs": config.max_num_seqs,
        "max_model_len": config.max_total_length,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enforce_eager": config.enforce_eager,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "enable_sleep_mode": True,
        "worker_extension_cls": f"{__name__}.WeightUpdateExtension",
    }
    return engine_args_with_overrides(config, "vllm", args, engine_kwargs)


class WeightUpdateExtension:
    """Mixed into vLLM workers (``worker_extension_cls``): loads named tensors into the model in place."""

    def verl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        model = self.model_runner.model  # attribute of the vLLM GPU worker this class extends
        model.load_weights(weights=named_tensors)
        return len(named_tensors)


class VLLMRolloutServer(RolloutServer):
    """One vLLM ``AsyncLLM`` engine; requests are streamed and the last output is returned."""

    def __init__(self, config: Any, model_path: str | None = None, **engine_kwargs: Any):
        require_engine("vllm", "vllm")
        if model_path is None:
            raise ValueError("rollout.name='vllm' needs model_path (model.path)")
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        self.config = config = as_rollout_config(config)
        args = vllm_engine_args(config, model_path, engine_kwargs)
        self.dtype = str(args["dtype"])
        self.max_model_len = int(args["max_model_len"])
        self.response_length = config.response_length
        self.calculate_log_probs = config.calculate_log_probs
        self.engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**args))
        self.gate = PauseGate()
        self.in_flight: set[str] = set()
        self.version = 0

    def _sampling_params(self, params: dict[str, Any]):
        from vllm import SamplingParams

        params = dict(params or {})
        greedy = float(params.get("temperature", 1.0)) == 0.0 or params.pop("do_sample", True) is False
        logprobs = params.pop("logprobs", self.calculate_log_probs)
        return SamplingParams(
            temperature=0.0 if greedy else float(params.pop("temperature", 1.0)),
            top_p=float(params.pop("top_p", 1.0)),
            top_k=int(params.pop("top_k", -1)) or -1,
            max_tokens=int(params.pop("max_tokens", self.response_length)),
            stop_token_ids=list(params.pop("stop_token_ids", None) or []),
            ignore_eos=bool(params.pop("ignore_eos", False)),
            seed=params.pop("seed", None),
            logprobs=0 if logprobs else None,
        )

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        from vllm.inputs import TokensPrompt

        await self.gate.wait(request_id)
        self.in_flight.add(request_id)
        final = None
        try:
            stream = self.engine.generate(
                TokensPrompt(prompt_token_ids=list(prompt_ids)), self._sampling_params(sampling_params), request_id
            )
            async for output in stream:
                final = output
        finally:
            self.in_flight.discard(request_id)
        if final is None or not final.outputs:
            return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted")
        out = final.outputs[0]
        token_ids = list(out.token_ids)
        log_probs = None
        if out.logprobs is not None:
            log_probs = [float(step[token].logprob) for step, token in zip(out.logprobs, token_ids)]
        return TokenOutput(token_ids, log_probs, finish_reason_to_stop_reason(out.finish_reason))

    async def _abort_requests(self) -> None:
        for request_id in list(self.in_flight):
            await self.engine.abort(request_id)
        while self.in_flight:  # aborted streams end with their partial output
            await asyncio.sleep(0.01)

    async def abort_all(self) -> None:
        self.gate.set(paused=True)
        await self._abort_requests()

    async def resume(self) -> None:
        self.gate.set(paused=False)

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        items = list(named_tensors.items()) if isinstance(named_tensors, dict) else list(named_tensors)
        await self.engine.collective_rpc("verl_load_weights", args=(items,))
        await self.engine.reset_prefix_cache()
        self.version = version
        from verl.workers.rollout.hf.model_io import resolve_dtype

        return {"version": version, "checksum": weight_checksum(items, dtype=resolve_dtype(self.dtype))}

    async def sleep(self) -> None:
        self.gate.set(sleeping=True)
        await self._abort_requests()
        await self.engine.sleep(level=1)

    async def wake_up(self) -> None:
        await self.engine.wake_up()
        self.gate.set(sleeping=False)

    async def get_version(self) -> int:
        return self.version
