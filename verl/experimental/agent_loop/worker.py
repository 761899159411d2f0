"""AgentLoopWorker: runs one agent loop per sample of its shard, all at once on one event loop.

The manager starts ``rollout.agent.num_workers`` of them as Ray actors (``ray.remote(AgentLoopWorker)``); each
holds its own :class:`AsyncLLMServerManager` over every replica, so routing state (sessions, in-flight counts)
lives next to the loops that use it. When reward runs in the loop, each trajectory is scored the moment it
finishes, on a scoring thread, while the other samples are still generating (streaming), not after the shard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.config import model_group, reward_in_loop_enabled, rollout_group, sampling_params_for
from verl.experimental.agent_loop.hybrid_server import CURRENT_BATCH_GROUP
from verl.experimental.agent_loop.postprocess import assemble_batch
from verl.experimental.agent_loop.registry import AgentLoopSpec, get_agent_loop_spec, restore_registry
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager, RoutingStats
from verl.protocol import DataProto

__all__ = ["AGENT_LOOP_METRICS_KEY", "BATCH_GROUP_KEY", "ROW_OFFSET_KEY", "AgentLoopWorker", "resolve_agent_names"]

logger = logging.getLogger(__name__)

# meta_info key under which a worker returns one metrics dict per sample (popped by the manager)
AGENT_LOOP_METRICS_KEY = "agent_loop_metrics"
# meta_info key telling a worker the global index of its shard's first row (per-row seeds)
ROW_OFFSET_KEY = "agent_loop_row_offset"
# meta_info key carrying the BatchGroup of a hybrid batch (its calls to one engine are merged there)
BATCH_GROUP_KEY = "agent_loop_batch_group"


def resolve_agent_names(batch: DataProto, default: str) -> list[str]:
    """Each row's loop: its ``agent_name`` column, or ``default`` where absent or empty."""
    column = batch.non_tensor_batch.get("agent_name")
    if column is None:
        return [default] * len(batch)
    return [str(name) if name not in (None, "") else default for name in column]


def _row_prompt_ids(batch: DataProto, i: int) -> list[int] | None:
    if batch.batch is None or "input_ids" not in batch.batch.keys():
        return None
    ids = batch.batch["input_ids"][i]
    if "attention_mask" in batch.batch.keys():
        ids = ids[batch.batch["attention_mask"][i].bool()]
    return ids.tolist()


class AgentLoopWorker:
    """Run agent loops for a shard of the batch and lay the results out as a DataProto.

    Args:
        config: the flattened trainer config (rollout, model, data, reward groups).
        replicas: rollout replica handles (StandaloneReplica, WorkerRankReplica, HybridReplica).
        registry: a ``registry_snapshot()`` from the driver, so driver-registered loops exist here.
        reward_in_loop: score each trajectory as it finishes (None: decide from the config).
        request_timeout_s: limit on one generate request.
        max_sessions: bound of the sticky-session LRU.
        reward_fn: a reward manager to use instead of building the configured one (in-process use).
    """

    def __init__(self, config: Any, replicas: list[Any], *, registry: dict[str, AgentLoopSpec] | None = None,
                 reward_in_loop: bool | None = None, request_timeout_s: float | None = 3600.0,
                 max_sessions: int = 10000, reward_fn: Any = None) -> None:
        from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

        self.config = config
        self.rollout_config = rollout_group(config)
        model_config = model_group(config)
        self.tokenizer = load_tokenizer(model_config, resolve_model_path(model_config))
        self.processor = None
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))
        restore_registry(registry or {})
        self.default_agent = self.rollout_config.agent.default_agent_loop
        self.server_manager = AsyncLLMServerManager(replicas, max_sessions=max_sessions,
                                                    request_timeout_s=request_timeout_s)
        self.reward_fn = reward_fn
        if self.reward_fn is None and reward_in_loop_enabled(config, reward_in_loop):
            from verl.trainer.ppo.reward import load_reward_manager

            self.reward_fn = load_reward_manager(config, self.tokenizer)
        # one scoring thread: the reward manager's process pool is not meant for concurrent callers
        self._reward_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-loop-reward")
        self.background_error: BaseException | None = None

    # ------------------------------------------------------------------ public

    def ready(self) -> bool:
        return True

    def server_stats(self) -> RoutingStats:
        return self.server_manager.stats()

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        """One trajectory per row; returns the padded batch with per-sample metrics in meta_info."""
        if len(batch) == 0:
            raise ValueError("AgentLoopWorker.generate_sequences got an empty batch")
        meta = dict(batch.meta_info)
        params = sampling_params_for(self.rollout_config, meta)
        names = resolve_agent_names(batch, self.default_agent)
        specs = {name: get_agent_loop_spec(name) for name in dict.fromkeys(names)}
        seed = meta.get("seed")
        offset = int(meta.pop(ROW_OFFSET_KEY, 0) or 0)
        group_token = CURRENT_BATCH_GROUP.set(meta.pop(BATCH_GROUP_KEY, None))  # tasks below copy this context
        tasks = []
        for i in range(len(batch)):
            row = {key: value[i] for key, value in batch.non_tensor_batch.items()}
            if row.get("raw_prompt_ids") is None and row.get("raw_prompt") is None:
                row["raw_prompt_ids"] = _row_prompt_ids(batch, i)
            sample_params = dict(params)
            if seed is not None:
                sample_params["seed"] = int(seed) + offset + i
            tasks.append(asyncio.ensure_future(self._run_sample(specs[names[i]], sample_params, row)))
        CURRENT_BATCH_GROUP.reset(group_token)
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        outputs = [out for out, _ in results]
        meta.pop("metrics", None)
        meta[AGENT_LOOP_METRICS_KEY] = [metrics for _, metrics in results]
        return assemble_batch(
            outputs,
            prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length),
            pad_token_id=self.pad_token_id,
            non_tensors=dict(batch.non_tensor_batch),
            meta_info=meta,
        )

    # ------------------------------------------------------------------ one sample

    async def _run_sample(self, spec: AgentLoopSpec, params: dict[str, Any],
                          row: dict[str, Any]) -> tuple[AgentLoopOutput, dict[str, float]]:
        spec.cls.ensure_class_initialized(self.config, self.tokenizer, self.processor, **spec.kwargs)
        loop = spec.cls(self.config, self.server_manager, self.tokenizer, self.processor, **spec.kwargs)
        output = await loop.run(params, **row)
        if not isinstance(output, AgentLoopOutput):
            raise TypeError(f"agent loop {spec.cls.__qualname__}.run returned {type(output).__name__}, "
                            "not an AgentLoopOutput")
        metrics = {"generate_sequences": float(output.metrics.generate_sequences),
                   "tool_calls": float(output.metrics.tool_calls), "num_turns": float(output.num_turns)}
        # loop-specific counters (e.g. the tool loop's malformed-call and tool-error counts)
        metrics.update(getattr(output.metrics, "counters", None) or {})
        if self.reward_fn is not None and output.reward_score is None:
            start = time.perf_counter()
            score, extra = await asyncio.get_running_loop().run_in_executor(
                self._reward_executor, self._score, output, row
            )
            output.reward_score = score
            for key, value in extra.items():
                output.extra_fields.setdefault(key, value)
            metrics["reward"] = time.perf_counter() - start
        return output, metrics

    def _score(self, output: AgentLoopOutput, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """Score one finished trajectory with the configured reward manager (runs on the scoring thread)."""
        from verl.trainer.ppo.reward import compute_reward

        response = list(output.response_ids[: int(self.rollout_config.response_length)])
        width = max(len(response), 1)  # a manager places the score at index len-1: keep one column for empties
        responses = torch.full((1, width), self.pad_token_id, dtype=torch.long)
        responses[0, : len(response)] = torch.tensor(response, dtype=torch.long)
        attention = torch.cat([torch.ones(1, len(output.prompt_ids), dtype=torch.long),
                               (torch.arange(width) < len(response)).long().unsqueeze(0)], dim=-1)
        non_tensors = {}
        for key, value in row.items():
            column = np.empty(1, dtype=object)
            column[0] = value
            non_tensors[key] = column
        data = DataProto.from_dict(
            tensors={"prompts": torch.tensor([output.prompt_ids], dtype=torch.long), "responses": responses,
                     "attention_mask": attention},
            non_tensors=non_tensors,
        )
        reward_tensor, extra = compute_reward(data, self.reward_fn)
        return float(reward_tensor[0].sum()), {key: values[0] for key, values in extra.items()}
