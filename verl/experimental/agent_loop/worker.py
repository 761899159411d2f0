"""AgentLoopWorker: runs one agent loop per sample of its shard, all at once on one event loop.

The manager starts ``rollout.agent.num_workers`` of them as Ray actors (``ray.remote(AgentLoopWorker)``); each
holds its own :class:`AsyncLLMServerManager` over every replica, so routing state (sessions, in-flight counts)
lives next to the loops that use it. verl's contract holds: the worker is built as
``AgentLoopWorker(config, llm_client, teacher_client=None, reward_loop_worker_handles=None)`` (``llm_client`` may
also be the list of replicas), loads the tools of ``rollout.multi_turn.tool_config_path`` / ``function_tool_path``
once, and builds each sample's loop from its registry entry with the keyword arguments ``trainer_config``,
``server_manager``, ``tokenizer``, ``processor``, ``hf_model_type``, ``dataset_cls``, ``data_config`` and ``tools``.

Each trajectory is padded (and, when reward runs in the loop, scored on a scoring thread) the moment its loop
finishes, while the other samples are still generating; the shard is stacked at the end.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop import agent_loop as agent_loop_module
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _InternalAgentLoopOutput,
)
from verl.experimental.agent_loop.concurrency import MAX_IN_FLIGHT_KEY, PEAK_IN_FLIGHT_KEY, InFlightLimiter
from verl.experimental.agent_loop.config import (
    data_group,
    model_group,
    reward_in_loop_enabled,
    rollout_group,
    sampling_params_for,
)
from verl.experimental.agent_loop.postprocess import pad_token_id_of, pad_trajectory, stack_trajectories
from verl.experimental.agent_loop.registry import get_agent_loop_entry, restore_registry
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager, RoutingStats
from verl.experimental.agent_loop.trace import get_trajectory_info
from verl.experimental.agent_loop.utils import resolve_config_path
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.fsdp.worker_config import has_group
from verl.workers.rollout.request_batching import CURRENT_BATCH_GROUP

__all__ = ["AGENT_LOOP_METRICS_KEY", "BATCH_GROUP_KEY", "ROW_OFFSET_KEY", "AgentLoopWorker", "resolve_agent_names"]

logger = logging.getLogger(__name__)

# meta_info key under which a worker returns one metrics dict per sample (verl's; the manager summarizes them)
AGENT_LOOP_METRICS_KEY = "metrics"
# meta_info key telling a worker the global index of its shard's first row (per-row seeds)
ROW_OFFSET_KEY = "agent_loop_row_offset"
# meta_info key carrying the BatchGroup of a hybrid batch (its calls to one engine are merged there)
BATCH_GROUP_KEY = "agent_loop_batch_group"
# per-sample greedy override (REMAX's baseline rollouts); never passed on to the loops
DO_SAMPLE_KEY = "__do_sample__"


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


def _distillation_enabled(config: Any) -> bool:
    """verl's top-level ``distillation`` block (a free-form block here: no dataclass declares it)."""
    from verl.experimental.agent_loop.config import _holder

    holder = _holder(config, "distillation")
    if not has_group(holder, "distillation"):
        return False
    block = holder["distillation"] if hasattr(holder, "keys") else holder.distillation
    return bool(block.get("enable") or block.get("enabled"))


def _model_type(model_path: str) -> str | None:
    """``model_type`` of a local Hugging Face model folder (None when it is not one)."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as handle:
            value = json.load(handle).get("model_type")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, str) else None


def _is_direct(entry: Any) -> bool:
    """An entry whose class is at hand and whose kwargs hold nothing for Hydra to build (no nested ``_target_``)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("_target_"), type):
        return False
    return not any(isinstance(v, Mapping) and "_target_" in v for k, v in entry.items() if k != "_target_")


async def _score_on_reward_worker(handles: list[Any], batch: DataProto, output: Any, row: dict[str, Any]) -> Any:
    """``compute_score`` of one trajectory on a reward-loop actor picked at random. The actor's death becomes a
    WorkerDiedError whose first line names it (``reward worker rank <i>``, node, pid, the call), not the
    agent-loop worker that saw it."""
    from ray.exceptions import RayActorError

    index = random.randrange(len(handles))
    try:
        return await handles[index].compute_score.remote(batch)
    except RayActorError as err:
        from verl.experimental.reward_loop.reward_loop import REWARD_WORKER_ROLE
        from verl.single_controller.ray.errors import actor_died_error

        sample = row.get("index", row.get("uid"))
        what = f"it was scoring a trajectory of {len(output.response_ids)} response tokens"
        raise actor_died_error(
            err,
            role=REWARD_WORKER_ROLE,
            index=index,
            method="compute_score",
            actor=handles[index],
            context=what + (f" (sample {sample})" if sample is not None else ""),
        ) from None


class AgentLoopWorker:
    """Run agent loops for a shard of the batch and lay the results out as a DataProto.

    Args:
        config: the trainer config (flattened rollout / model / data / reward groups, or verl's nesting).
        llm_client: what the loops generate through: the rollout replica handles (StandaloneReplica,
            WorkerRankReplica, a RolloutServer in this process; routed by an :class:`AsyncLLMServerManager`), or a
            ready client with verl's ``async generate(request_id, *, prompt_ids, sampling_params, ...)``.
        teacher_client: teacher servers for online distillation (not supported here; must be None).
        reward_loop_worker_handles: Ray actors with ``compute_score.remote(DataProto)`` that score each trajectory as
            it finishes (verl's reward loop); None scores in-process when reward runs in the loop.
        registry: a ``registry_snapshot()`` from the driver, so driver-registered loops exist here.
        reward_in_loop: score each trajectory in-process as it finishes (None: decide from the config).
        request_timeout_s: limit on one generate request; max_sessions: bound of the sticky-session LRU.
        reward_fn: a reward manager to use instead of building the configured one (in-process use).
    """

    def __init__(
        self,
        config: Any,
        llm_client: Any,
        teacher_client: Any = None,
        reward_loop_worker_handles: list[Any] | None = None,
        *,
        registry: dict[str, Any] | None = None,
        reward_in_loop: bool | None = None,
        request_timeout_s: float | None = 3600.0,
        max_sessions: int = 10000,
        reward_fn: Any = None,
    ) -> None:
        from verl.tools.tool_registry import load_all_tools
        from verl.utils.dataset.factory import get_dataset_class
        from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

        self.config = config
        self.rollout_config = rollout_group(config)
        self.model_config = model_group(config)
        model_path = resolve_model_path(self.model_config)
        self.tokenizer = load_tokenizer(self.model_config, model_path)
        self.processor = None
        self.hf_model_type = _model_type(model_path)
        self.pad_token_id = pad_token_id_of(self.tokenizer)
        self.data_config = data_group(config)
        self.dataset_cls = get_dataset_class(self.data_config)
        self.mm_processor_kwargs = dict(self.data_config.mm_processor_kwargs)
        self.teacher_client = teacher_client
        self.distillation_enabled = _distillation_enabled(config)
        if teacher_client is not None or self.distillation_enabled:
            raise NotImplementedError(
                "AgentLoopWorker: online policy distillation (teacher_client / distillation.*) "
                "is not supported by this verl build"
            )
        restore_registry(registry or {})
        self.default_agent = self.rollout_config.agent.default_agent_loop
        multi_turn = self.rollout_config.multi_turn
        tool_path, function_path = multi_turn.tool_config_path, multi_turn.function_tool_path
        self.tools = load_all_tools(
            resolve_config_path(tool_path, must_exist=False) if tool_path else None,
            resolve_config_path(function_path, must_exist=False) if function_path else None,
        )
        if isinstance(llm_client, list | tuple):
            llm_client = AsyncLLMServerManager(
                list(llm_client), max_sessions=max_sessions, request_timeout_s=request_timeout_s
            )
        self.llm_client = llm_client
        self.reward_loop_worker_handles = reward_loop_worker_handles
        self.reward_fn = reward_fn
        if (
            self.reward_fn is None
            and reward_loop_worker_handles is None
            and reward_in_loop_enabled(config, reward_in_loop)
        ):
            from verl.trainer.ppo.reward import load_reward_manager

            self.reward_fn = load_reward_manager(config, self.tokenizer)
        # one scoring thread: the reward manager's process pool is not meant for concurrent callers
        self._reward_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-loop-reward")
        self.background_error: BaseException | None = None

    @property
    def server_manager(self) -> Any:
        """The client the loops generate through (verl calls it ``llm_client``)."""
        return self.llm_client

    @server_manager.setter
    def server_manager(self, value: Any) -> None:
        self.llm_client = value

    # ------------------------------------------------------------------ public

    def ready(self) -> bool:
        return True

    def server_stats(self) -> RoutingStats:
        return self.server_manager.stats()

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        """One trajectory per row; returns the padded batch with one metrics dict per sample in
        ``meta_info["metrics"]`` (the rest of the input's meta_info is kept)."""
        if len(batch) == 0:
            raise ValueError("AgentLoopWorker.generate_sequences got an empty batch")
        meta = dict(batch.meta_info)
        validate = bool(meta.get("validate", False))
        params = sampling_params_for(self.rollout_config, meta)
        names = resolve_agent_names(batch, self.default_agent)
        for name in dict.fromkeys(names):
            get_agent_loop_entry(name)  # unknown agent_name: fail before any request is sent
        seed = meta.get("seed")
        offset = int(meta.pop(ROW_OFFSET_KEY, 0) or 0)
        index = batch.non_tensor_batch.get("index")
        index = list(index) if index is not None else list(range(len(batch)))
        trajectories = await get_trajectory_info(meta.get("global_steps", -1), index, validate)
        limiter = InFlightLimiter(meta.pop(MAX_IN_FLIGHT_KEY, None))
        group_token = CURRENT_BATCH_GROUP.set(meta.pop(BATCH_GROUP_KEY, None))  # tasks below copy this context
        tasks = []
        for i in range(len(batch)):
            row = {key: value[i] for key, value in batch.non_tensor_batch.items() if key != DO_SAMPLE_KEY}
            if row.get("raw_prompt_ids") is None and row.get("raw_prompt") is None:
                row["raw_prompt_ids"] = _row_prompt_ids(batch, i)
            row["agent_name"] = names[i]
            sample_params = dict(params)
            if seed is not None:
                sample_params["seed"] = int(seed) + offset + i
            do_sample = batch.non_tensor_batch.get(DO_SAMPLE_KEY)
            if not validate and do_sample is not None and not bool(do_sample[i]):
                sample_params.update(temperature=0.0, top_p=1.0, top_k=-1, do_sample=False)
            start = functools.partial(self._run_agent_loop, sample_params, trajectories[i], **row)
            tasks.append(asyncio.ensure_future(limiter.run(start)))
        CURRENT_BATCH_GROUP.reset(group_token)
        try:
            outputs = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        output = self._postprocess(outputs, input_non_tensor_batch=batch.non_tensor_batch, validate=validate)
        meta.pop("metrics", None)
        output.meta_info = {**meta, **output.meta_info, PEAK_IN_FLIGHT_KEY: limiter.peak}
        return output

    # ------------------------------------------------------------------ one sample

    def _instantiate(self, entry: Any) -> Any:
        """The sample's loop, built from its registry entry: directly for a registered class, else by Hydra."""
        kwargs = {
            "trainer_config": DictConfigWrap(self.config),
            "server_manager": self.llm_client,
            "tokenizer": self.tokenizer,
            "processor": self.processor,
            "hf_model_type": self.hf_model_type,
            "dataset_cls": self.dataset_cls,
            # read from the config, not self.data_config, as verl's worker does (recipes build workers bare); once
            # per config object, since this runs per sample
            "data_config": DictConfigWrap(data_group(self.config)),
            "tools": ToolListWrap(list(self.tools)),
        }
        if _is_direct(entry):
            cls = entry["_target_"]
            loop_kwargs = {k: v for k, v in entry.items() if k not in ("_target_", "name")}
            cls.ensure_class_initialized(self.config, self.tokenizer, self.processor, **loop_kwargs)
            return cls(**kwargs, **loop_kwargs)
        return agent_loop_module.hydra.utils.instantiate(config=entry, **kwargs)

    async def _run_agent_loop(
        self,
        sampling_params: dict[str, Any],
        trajectory: dict[str, Any],
        *,
        agent_name: str,
        trace: bool = True,
        **kwargs: Any,
    ) -> _InternalAgentLoopOutput:
        """Build the loop registered as ``agent_name``, run it on the sample ``kwargs``, pad its trajectory."""
        with agent_loop_module.rollout_trace_attr(
            step=trajectory["step"],
            sample_index=trajectory["sample_index"],
            rollout_n=trajectory["rollout_n"],
            validate=trajectory["validate"],
            name="agent_loop",
            trace=trace,
        ):
            agent_loop = self._instantiate(get_agent_loop_entry(agent_name))
            output = await agent_loop.run(sampling_params, **kwargs)
            return await self._agent_loop_postprocess(output, trajectory["validate"], **kwargs)

    def _pad_token_ids(
        self, tokens: list[int], *, max_length: int, padding_side: str, return_attention_mask: bool
    ) -> dict[str, torch.Tensor]:
        """``tokens`` padded to ``[1, max_length]`` with the tokenizer's pad id (and their attention mask)."""
        from verl.experimental.agent_loop.postprocess import pad_ids

        ids, mask = pad_ids(tokens, max_length, pad_token_id_of(self.tokenizer), left=padding_side == "left")
        return {"input_ids": ids, "attention_mask": mask} if return_attention_mask else {"input_ids": ids}

    async def _agent_loop_postprocess(
        self, output: AgentLoopOutput, validate: bool, **kwargs: Any
    ) -> _InternalAgentLoopOutput:
        """Pad one finished trajectory to the batch widths; score it when reward runs in the loop."""
        if not isinstance(output, AgentLoopOutput):
            raise TypeError(
                f"agent loop {kwargs.get('agent_name', '?')!r}: run() returned {type(output).__name__}, "
                "not an AgentLoopOutput"
            )
        if kwargs.get("raw_prompt") is not None:
            output.extra_fields.setdefault("raw_prompt", kwargs["raw_prompt"])
        pad_id = getattr(self, "pad_token_id", None)  # resolved once at start-up (tokenizer lookups are slow)
        padded = pad_trajectory(
            output,
            prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length),
            pad_token_id=pad_token_id_of(self.tokenizer) if pad_id is None else pad_id,
            index=kwargs.get("index"),
        )
        multi_modal_inputs = (
            self._compute_multi_modal_inputs(output, torch.tensor(padded["input_ids"]))
            if self.processor is not None
            else None
        )
        if self.processor is not None:  # text-only: pad_trajectory's positions already count the real tokens
            audios = (output.multi_modal_data or {}).get("audios")
            mm_kwargs = (
                output.mm_processor_kwargs
                if output.mm_processor_kwargs is not None
                else self._get_mm_processor_kwargs(audios)
            )
            padded["position_ids"] = self._compute_position_ids(
                torch.tensor(padded["input_ids"]), torch.tensor(padded["attention_mask"]), multi_modal_inputs, mm_kwargs
            )
        await self._compute_score([output], kwargs=kwargs)
        await self._compute_teacher_logprobs(
            output,
            prompt_ids=output.prompt_ids,
            response_ids=output.response_ids,
            validate=validate,
            sample_kwargs=kwargs,
        )
        return _InternalAgentLoopOutput(
            **padded,
            multi_modal_inputs=multi_modal_inputs,
            multi_modal_data=output.multi_modal_data,
            mm_processor_kwargs=output.mm_processor_kwargs,
            reward_score=output.reward_score,
            num_turns=output.num_turns,
            metrics=output.metrics,
            extra_fields=output.extra_fields,
        )

    def _get_mm_processor_kwargs(self, audio_data: list[Any] | None = None) -> dict[str, Any]:
        kwargs = dict(self.mm_processor_kwargs or {})
        if audio_data is not None and "sampling_rate" not in kwargs:
            rate = getattr(getattr(self.processor, "feature_extractor", None), "sampling_rate", None)
            if rate is not None:
                kwargs["sampling_rate"] = int(rate)
        return kwargs

    def _compute_multi_modal_inputs(
        self, output: AgentLoopOutput, input_ids: torch.Tensor
    ) -> dict[str, torch.Tensor] | None:
        """The processor's tensors for the trajectory's media (the model's vision/audio inputs); None for a
        text-only trajectory."""
        media = output.multi_modal_data or {}
        if self.processor is None or not any(media.get(k) for k in ("images", "videos", "audios")):
            return None
        # collapse each run of image/video placeholder ids to one: the processor expands them again
        placeholders = {getattr(self.processor, f"{kind}_token_id", None) for kind in ("image", "video")} - {None}
        ids, previous = [], None
        for token in input_ids[0].tolist():
            if not (token in placeholders and token == previous):
                ids.append(token)
            previous = token
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        kwargs = (
            output.mm_processor_kwargs
            if output.mm_processor_kwargs is not None
            else self._get_mm_processor_kwargs(media.get("audios"))
        )
        processed = self.processor(
            text=[text],
            images=media.get("images"),
            videos=media.get("videos"),
            audio=media.get("audios"),
            return_tensors="pt",
            **kwargs,
        )
        inputs = {key: value for key, value in dict(processed).items() if key not in ("input_ids", "attention_mask")}
        grid = inputs.get("image_grid_thw")
        if grid is not None:
            inputs["images_seqlens"] = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
        return inputs

    def _compute_position_ids(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        multi_modal_inputs: dict[str, torch.Tensor] | None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """``[1, L]`` positions counting real tokens; with an M-RoPE processor ``[1, 4, L]``: text positions
        then the processor's three rope rows."""
        processor = self.processor
        if processor is None or not hasattr(processor, "get_rope_index"):
            return compute_position_id_with_mask(attention_mask)
        inputs = dict(multi_modal_inputs or {})
        rope_kwargs: dict[str, Any] = {
            "image_grid_thw": inputs.get("image_grid_thw"),
            "video_grid_thw": inputs.get("video_grid_thw"),
        }
        if inputs.get("mm_token_type_ids") is not None:  # recomputed over the whole trajectory
            token_types = torch.zeros_like(input_ids)
            for kind, code in (("image", 1), ("video", 2)):
                token_id = getattr(processor, f"{kind}_token_id", None)
                if token_id is not None:
                    token_types[input_ids == token_id] = code
            rope_kwargs["mm_token_type_ids"] = token_types
        extra = getattr(processor, "get_rope_index_kwargs", None)
        if extra is not None:
            rope_kwargs.update(extra(inputs))
        rope, _ = processor.get_rope_index(input_ids=input_ids, attention_mask=attention_mask, **rope_kwargs)
        valid = attention_mask[0].bool()
        text = torch.ones((1, 1, input_ids.shape[-1]), dtype=torch.long)
        text[0, 0, valid] = torch.arange(int(valid.sum()), dtype=torch.long)
        return torch.cat([text, rope.transpose(0, 1).to(torch.long)], dim=1)

    async def _compute_score(self, outputs: list[AgentLoopOutput], kwargs: dict[str, Any]) -> None:
        """Score the trajectory (its last output) unless the loop did: on verl reward-loop actors when given, else
        with the in-process reward manager on the scoring thread."""
        final = outputs[-1]
        handles = self.reward_loop_worker_handles
        reward_fn = getattr(self, "reward_fn", None)
        if final.reward_score is not None or (handles is None and reward_fn is None):
            return
        start = time.perf_counter()
        if handles is not None:
            result = await _score_on_reward_worker(handles, self._reward_batch(outputs, kwargs), final, kwargs)
            score, extra = result["reward_score"], dict(result.get("reward_extra_info") or {})
        else:
            score, extra = await asyncio.get_running_loop().run_in_executor(
                self._reward_executor, self._score, final, kwargs
            )
        final.reward_score = score
        final.extra_fields["reward_extra_info"] = extra
        final.metrics.compute_score = time.perf_counter() - start

    def _reward_batch(self, outputs: list[AgentLoopOutput], kwargs: dict[str, Any]) -> DataProto:
        """The trajectory's outputs as the unpadded batch a reward-loop actor scores."""
        rows = []
        for out in outputs:
            prompts = torch.tensor(out.prompt_ids, dtype=torch.long)
            responses = torch.tensor(out.response_ids, dtype=torch.long)
            input_ids = torch.cat([prompts, responses])
            mask = torch.ones_like(input_ids)
            rows.append((prompts, responses, input_ids, mask, compute_position_id_with_mask(mask[None])[0]))
        pad = torch.nn.utils.rnn.pad_sequence
        tensors = {
            name: pad([row[k] for row in rows], batch_first=True, padding_value=0)
            for k, name in enumerate(("prompts", "responses", "input_ids", "attention_mask", "position_ids"))
        }
        n = len(outputs)

        def column(values: list[Any]) -> np.ndarray:
            array = np.empty(n, dtype=object)
            array[:] = values
            return array

        non_tensors = {key: column([value] * n) for key, value in kwargs.items()}
        non_tensors.update(
            {
                "__num_turns__": np.array([o.num_turns for o in outputs]),
                "tool_extra_fields": column([o.extra_fields for o in outputs]),
                "prompt_len": np.array([len(o.prompt_ids) for o in outputs]),
                "response_len": np.array([len(o.response_ids) for o in outputs]),
            }
        )
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    def _score(self, output: AgentLoopOutput, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """Score one finished trajectory with the configured reward manager (runs on the scoring thread)."""
        from verl.trainer.ppo.reward import compute_reward

        response = list(output.response_ids[: int(self.rollout_config.response_length)])
        width = max(len(response), 1)  # a manager places the score at index len-1: keep one column for empties
        responses = torch.full((1, width), self.pad_token_id, dtype=torch.long)
        responses[0, : len(response)] = torch.tensor(response, dtype=torch.long)
        attention = torch.cat(
            [
                torch.ones(1, len(output.prompt_ids), dtype=torch.long),
                (torch.arange(width) < len(response)).long().unsqueeze(0),
            ],
            dim=-1,
        )
        non_tensors = {}
        for key, value in row.items():
            column = np.empty(1, dtype=object)
            column[0] = value
            non_tensors[key] = column
        data = DataProto.from_dict(
            tensors={
                "prompts": torch.tensor([output.prompt_ids], dtype=torch.long),
                "responses": responses,
                "attention_mask": attention,
            },
            non_tensors=non_tensors,
        )
        reward_tensor, extra = compute_reward(data, self.reward_fn)
        return float(reward_tensor[0].sum()), {key: values[0] for key, values in extra.items()}

    async def _compute_teacher_logprobs(
        self,
        output: AgentLoopOutput,
        prompt_ids: list[int],
        response_ids: list[int],
        validate: bool,
        sample_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Teacher log-probs for online distillation: not supported here (refused at construction)."""
        if getattr(self, "distillation_enabled", False) and not validate:
            raise NotImplementedError("online policy distillation is not supported by this verl build")

    def _postprocess(
        self, inputs: list[_InternalAgentLoopOutput], input_non_tensor_batch: dict | None = None, validate: bool = False
    ) -> DataProto:
        """Stack the shard's padded trajectories; the input rows' columns are carried over unless verl's reward
        actors scored them (they received the rows already)."""
        passthrough = input_non_tensor_batch if self.reward_loop_worker_handles is None else None
        return stack_trajectories(inputs, dict(passthrough) if passthrough else None)
