"""The agent-loop contract: one sample in, one token-level trajectory out (verl's module and names).

An agent loop talks token-in-token-out to the rollout servers through the server manager
(``await self.server_manager.generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``),
interleaving model turns with whatever it adds itself (tool results, user turns). It reports the trajectory as
:class:`AgentLoopOutput`: the prompt, then every response token in order with ``response_mask`` telling which ones
the model produced (1) and which ones the loop inserted (0), so training only scores the model's own tokens.

A loop is a subclass of :class:`AgentLoopBase` registered with ``@register("name")``; it implements
``async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput`` where ``kwargs`` are the sample's
non-tensor columns (``raw_prompt``, ``raw_prompt_ids``, ``tools_kwargs``, ``extra_info``, ``agent_name``, ...).
The worker builds one instance per sample with the keyword arguments ``trainer_config`` (a :class:`DictConfigWrap`),
``server_manager``, ``tokenizer``, ``processor``, ``dataset_cls``, ``data_config`` (a :class:`DictConfigWrap`),
``hf_model_type`` and ``tools`` (a :class:`ToolListWrap`), plus the kwargs of the loop's registration.

This module also exposes verl's ``AgentLoopWorker``, ``AgentLoopManager``, ``register``, ``_agent_loop_registry``
and ``get_trajectory_info``; they live in :mod:`.worker`, :mod:`.manager`, :mod:`.registry` and :mod:`.trace`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import Any

import hydra  # noqa: F401  (verl code reaches hydra.utils.instantiate through this module)
import hydra.utils  # noqa: F401
import torch
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, SkipValidation, model_validator

from verl.experimental.agent_loop.context_tokens import ChatRenderer, MergeResult, merge_assistant_tokens
from verl.experimental.agent_loop.registry import _agent_loop_registry, register
from verl.experimental.agent_loop.trace import get_trajectory_info, rollout_trace_attr
from verl.utils.import_utils import lazy_exports

__all__ = [
    "AgentLoopBase",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "DictConfigWrap",
    "ToolListWrap",
    "_DummyConfig",
    "_agent_loop_registry",
    "get_trajectory_info",
    "register",
    "rollout_trace_attr",
]

logger = logging.getLogger(__name__)


class AgentLoopMetrics(BaseModel):
    """Seconds one trajectory spent on the rollout servers, on tools and on scoring; preemptions (-1: unknown)."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = -1


class AgentLoopOutput(BaseModel):
    """One finished trajectory.

    Attributes:
        prompt_ids: the prompt as sent in the first turn (unpadded).
        response_ids: every token after the prompt: model turns and inserted tool/user turns, in order.
        response_mask: one entry per response token, 1 for model tokens and 0 for inserted ones.
        response_logprobs: rollout log-probabilities per response token (0.0 for inserted tokens), or None.
        routed_experts: MoE routing per token of the whole sequence, when the engine reports it.
        multi_modal_data: images / videos / audios of the trajectory (multimodal models).
        reward_score: a score the loop computed itself; None lets the configured reward score the trajectory.
        num_turns: user/assistant/tool turns in the trajectory (a single-turn sample has 2).
        metrics: timings of this trajectory (a dict with the same keys is accepted).
        extra_fields: per-sample values that become non-tensor columns of the output batch.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    routed_experts: Any | None = None
    multi_modal_data: dict[str, Any] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: SerializeAsAny[AgentLoopMetrics] = Field(default_factory=AgentLoopMetrics)
    extra_fields: dict[str, Any] = Field(default_factory=dict)
    mm_processor_kwargs: dict[str, Any] | None = None
    mm_processor_output: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _check_lengths(self) -> AgentLoopOutput:
        if not isinstance(self.response_ids, list):  # the padded (tensor) form is checked where it is built
            return self
        name = type(self).__name__
        if len(self.response_mask) != len(self.response_ids):
            raise ValueError(
                f"{name}.response_mask has {len(self.response_mask)} entries for {len(self.response_ids)} response_ids"
            )
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(
                f"{name}.response_logprobs has {len(self.response_logprobs)} entries for "
                f"{len(self.response_ids)} response_ids"
            )
        if not self.prompt_ids:
            raise ValueError(f"{name}.prompt_ids is empty")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The trajectory as tensors and values (``prompts``, ``responses``, ``response_mask``, optional
        ``rollout_log_probs`` / ``routed_experts`` / ``rm_scores``, ``teacher_*`` taken out of ``extra_fields``);
        fields left at their defaults are omitted. The model itself is not changed."""
        out = self.model_dump(exclude_unset=True)
        out["prompts"] = torch.tensor(out.pop("prompt_ids"), dtype=torch.int64)
        out["responses"] = torch.tensor(out.pop("response_ids"), dtype=torch.int64)
        out["response_mask"] = torch.tensor(out.pop("response_mask"), dtype=torch.int64)
        logprobs = out.pop("response_logprobs", None)
        if logprobs is not None:
            out["rollout_log_probs"] = torch.tensor(logprobs, dtype=torch.float32)
        experts = out.pop("routed_experts", None)
        if experts is not None:
            out["routed_experts"] = _align_experts(experts, out["prompts"].numel() + out["responses"].numel())
        score = out.pop("reward_score", None)
        if score is not None:
            rm_scores = torch.zeros(out["responses"].numel(), dtype=torch.float32)
            if rm_scores.numel():
                rm_scores[-1] = float(score)
            out["rm_scores"] = rm_scores
        extra = dict(self.extra_fields)  # in-place edits of the default dict are not "set" for model_dump
        for key in ("teacher_ids", "teacher_logprobs"):
            value = extra.pop(key, None)
            if value is not None:
                out[key] = value
        out["extra_fields"] = extra
        return out


def _align_experts(experts: Any, total_length: int) -> torch.Tensor:
    """Routing rows indexed by absolute token position over the whole sequence; rows the engine did not record
    (the tail of a multi-turn trajectory) stay zero."""
    table = torch.as_tensor(experts.copy() if hasattr(experts, "copy") else experts).to(torch.int16)
    aligned = table.new_zeros((total_length, *table.shape[1:]))
    rows = min(table.shape[0], total_length)
    aligned[:rows] = table[:rows]
    return aligned


class _InternalAgentLoopOutput(AgentLoopOutput):
    """One trajectory padded to the batch widths, as the worker stacks them: each row a ``[1, W]`` tensor, or a
    one-row list ``[[...]]`` (cheaper to build per sample; stacked into one tensor per batch column)."""

    # built by the worker's padding, once per sample: not re-validated
    prompt_ids: SkipValidation[torch.Tensor | list[list[int]]]
    response_ids: SkipValidation[torch.Tensor | list[list[int]]]
    input_ids: SkipValidation[torch.Tensor | list[list[int]]]
    position_ids: SkipValidation[torch.Tensor | list[list[int]]]
    response_mask: SkipValidation[torch.Tensor | list[list[int]]]
    attention_mask: SkipValidation[torch.Tensor | list[list[int]]]
    response_logprobs: SkipValidation[torch.Tensor | list[list[float]] | None] = None
    teacher_logprobs: torch.Tensor | None = None
    teacher_ids: torch.Tensor | None = None
    routed_experts: torch.Tensor | None = None
    multi_modal_inputs: dict[str, torch.Tensor] | None = None


class DictConfigWrap:
    """Carries a config through ``hydra.utils.instantiate`` untouched (Hydra would merge and resolve it)."""

    def __init__(self, config: Any) -> None:
        self.config = config


class ToolListWrap:
    """Carries the tool list through ``hydra.utils.instantiate`` untouched (Hydra would turn dataclass tools such as
    ``FunctionTool`` into ``DictConfig``)."""

    def __init__(self, tools: list[Any]) -> None:
        self.tools = tools


# verl 0.5-0.6's name for the wrapper that carries the trainer config into an agent loop
_DummyConfig = DictConfigWrap


def _unwrap(value: Any) -> Any:
    return value.config if isinstance(value, DictConfigWrap) else value


class AgentLoopBase(abc.ABC):
    """Base class of agent loops; subclasses implement :meth:`run` and register with ``@register("name")``.

    Args:
        trainer_config: the trainer config (flattened, or verl's ``actor_rollout_ref`` nesting), bare or in a
            :class:`DictConfigWrap`; ``self.config`` is the config, ``self.rollout_config`` its typed rollout group.
        server_manager: routes generate calls to the rollout replicas.
        tokenizer: the model's tokenizer.
        processor: a multimodal processor, or None.
        dataset_cls: the dataset class (its multimodal helpers); default the built-in RL dataset.
        data_config: the ``data`` group, bare or wrapped (default: the config's own ``data`` group).
        hf_model_type: the model's ``config.model_type``, for model-specific handling.
        **kwargs: extra arguments of the loop's registration (YAML keys besides ``name`` and ``_target_``), kept in
            ``self.loop_kwargs``.
    """

    _class_initialized: bool = False

    def __init__(
        self,
        trainer_config: Any,
        server_manager: Any,
        tokenizer: Any,
        processor: Any = None,
        dataset_cls: type | None = None,
        data_config: Any = None,
        hf_model_type: str | None = None,
        **kwargs: Any,
    ) -> None:
        from verl.experimental.agent_loop.config import as_data_config, data_group, rollout_group

        self.config = _unwrap(trainer_config)
        self.rollout_config = rollout_group(self.config)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        if dataset_cls is None:
            from verl.utils.dataset.rl_dataset import RLHFDataset

            dataset_cls = RLHFDataset
        self.dataset_cls = dataset_cls
        data = _unwrap(data_config)
        self.data_config = data_group(self.config) if data is None else as_data_config(data)
        self.apply_chat_template_kwargs = dict(self.data_config.apply_chat_template_kwargs)
        self.mm_processor_kwargs = dict(self.data_config.mm_processor_kwargs)
        self.hf_model_type = hf_model_type
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.loop_kwargs = dict(kwargs)
        self._renderer: ChatRenderer | None = None

    @classmethod
    def init_class(cls, trainer_config: Any, tokenizer: Any, processor: Any = None, **kwargs: Any) -> None:
        """One-time set-up per process and class; override to load shared state. Called before the first
        instance is built; the default does nothing."""
        return None

    @classmethod
    def ensure_class_initialized(
        cls, trainer_config: Any, tokenizer: Any, processor: Any = None, **kwargs: Any
    ) -> None:
        if cls.__dict__.get("_class_initialized", False):
            return
        cls.init_class(_unwrap(trainer_config), tokenizer, processor, **kwargs)
        cls._class_initialized = True

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop running this agent loop (for ``run_in_executor``)."""
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            from verl.utils.ray_utils import get_event_loop

            return get_event_loop()

    @property
    def chat_renderer(self) -> ChatRenderer:
        """The chat template with ``data.apply_chat_template_kwargs`` (token building helpers below)."""
        if self._renderer is None:
            mode = self.rollout_config.multi_turn.tokenization_sanity_check_mode
            self._renderer = ChatRenderer(self.tokenizer, self.apply_chat_template_kwargs, mode)
        return self._renderer

    # ------------------------------------------------------------------ multimodal

    def _assert_mm_supported(self, has_multi_modal: bool) -> None:
        """Refuse multimodal input before any state changes: it needs a processor, and a rollout engine that
        accepts images (the built-in ``hf`` engine is text-only)."""
        if has_multi_modal and self.processor is None:
            raise ValueError(
                f"{type(self).__name__}: the sample carries images/videos/audio, but there is no multimodal processor "
                "(the model is text-only); use a vision-language model or drop the media from the data"
            )

    def _get_mm_processor_kwargs(self, audio_data: list[Any] | None = None) -> dict[str, Any]:
        kwargs = dict(self.mm_processor_kwargs or {})
        if audio_data is not None and "sampling_rate" not in kwargs:
            rate = getattr(getattr(self.processor, "feature_extractor", None), "sampling_rate", None)
            if rate is not None:
                kwargs["sampling_rate"] = int(rate)
        return kwargs

    async def process_vision_info(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.process_multi_modal_info(messages)

    async def process_multi_modal_info(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """``{"images": ..., "videos": ..., "audios": ...}`` of the messages (only the kinds present); {} for a
        text-only model. The dataset class extracts them, as it does for the prompt-length filter."""
        if self.processor is None:
            return {}
        patch_size = getattr(getattr(self.processor, "image_processor", None), "patch_size", 14)
        extract = getattr(self.dataset_cls, "process_multi_modal_info", None)
        if extract is not None:
            images, videos, audios = await extract(messages, image_patch_size=patch_size, config=self.data_config)
        else:
            extract = getattr(self.dataset_cls, "process_vision_info", None)
            if extract is None:
                raise NotImplementedError(
                    f"{type(self).__name__}: a processor is set, but the dataset class {self.dataset_cls.__name__} "
                    "has no process_multi_modal_info / process_vision_info to extract the media of a sample"
                )
            images, videos = await extract(messages, image_patch_size=patch_size, config=self.data_config)
            audios = None
        found = {"images": images, "videos": videos, "audios": audios}
        return {key: value for key, value in found.items() if value is not None}

    @staticmethod
    def build_sglang_video_payload(videos: Any, mm_inputs: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Video features already computed by the processor, in the ``processor_output`` form an SGLang server
        accepts instead of raw frames; None without videos. (The built-in engine does not use it.)"""
        if not videos or "pixel_values_videos" not in mm_inputs:
            return None
        payload = {
            "format": "processor_output",
            "pixel_values_videos": mm_inputs["pixel_values_videos"],
            "video_grid_thw": mm_inputs["video_grid_thw"],
        }
        if "second_per_grid_ts" in mm_inputs:
            payload["second_per_grid_ts"] = mm_inputs["second_per_grid_ts"]
        return [payload]

    # ------------------------------------------------------------------ building the trajectory's tokens

    async def ct_build_initial_tokens(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        images: list[Any] | None = None,
        videos: list[Any] | None = None,
        audios: list[Any] | None = None,
        mm_inputs_out: dict[str, Any] | None = None,
    ) -> list[int]:
        """The first prompt: the chat template's rendering of ``messages`` (and ``tools``), left-truncated to
        ``rollout.prompt_length`` with a warning (a multimodal prompt cannot be cut: its placeholders must match
        its media, so it is an error)."""
        if images or videos or audios:
            self._assert_mm_supported(True)
            raise NotImplementedError(
                f"{type(self).__name__}: multimodal prompts are not supported by this verl build's agent loops "
                "(the hf rollout engine is text-only)"
            )
        prompt_ids = await asyncio.to_thread(self.chat_renderer.initial_tokens, list(messages), tools)
        return self._cap_text_prompt_length(prompt_ids)

    async def ct_merge_assistant_token(
        self,
        runtime_token_ids: list[int],
        assistant_token_ids: list[int],
        response_mask: list[int],
        response_logprobs: list[float] | None = None,
        assistant_logprobs: list[float] | None = None,
    ) -> tuple[MergeResult, list[int], list[float] | None]:
        """Append a model turn (mask 1): returns the merge (``.token_ids``), the mask and the log-probs."""
        return merge_assistant_tokens(
            runtime_token_ids, assistant_token_ids, response_mask, response_logprobs, assistant_logprobs
        )

    async def ct_merge_context_msg(
        self,
        previous_messages: list[dict[str, Any]],
        updated_messages: list[dict[str, Any]],
        runtime_token_ids: list[int],
        response_mask: list[int],
        response_logprobs: list[float] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[MergeResult, list[int], list[float] | None]:
        """Append the messages added after ``previous_messages`` (tool results, user turns) with mask 0, tokenized
        by :meth:`inserted_message_ids`; the merge's ``mismatch`` tells where they differ from the template's
        rendering of the whole conversation."""
        return await asyncio.to_thread(
            self.chat_renderer.merge_context,
            list(previous_messages),
            list(updated_messages),
            list(runtime_token_ids),
            list(response_mask),
            response_logprobs,
            tools,
            self.inserted_message_ids,
        )

    def inserted_message_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """The tokens of messages the loop adds after a model turn: the chat template continuing the conversation
        (its fixed prefix cut off). Override to render them otherwise."""
        return self.chat_renderer.continuation_ids(new_messages)

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        if len(prompt_ids) > self.prompt_length:
            logger.warning(
                "%s: a prompt of %d tokens exceeds rollout.prompt_length=%d; keeping its last %d tokens",
                type(self).__name__,
                len(prompt_ids),
                self.prompt_length,
                self.prompt_length,
            )
            return list(prompt_ids[-self.prompt_length :])
        return list(prompt_ids)

    @abc.abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Produce one trajectory for the sample whose non-tensor fields are ``kwargs``."""


# the worker and the manager import this module: reach them lazily
__getattr__ = lazy_exports(
    __name__,
    {
        "AgentLoopWorker": "verl.experimental.agent_loop.worker",
        "AgentLoopManager": "verl.experimental.agent_loop.manager",
        "AsyncLLMServerManager": "verl.experimental.agent_loop.server_manager",
    },
)
