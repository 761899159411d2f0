"""The agent-loop contract: one sample in, one token-level trajectory out.

An agent loop talks token-in-token-out to the rollout servers through the server manager
(``await server_manager.generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``), interleaving
model turns with whatever it adds itself (tool results, user turns). It reports the trajectory as
:class:`AgentLoopOutput`: the prompt, then every response token in order with ``response_mask`` telling which ones
the model produced (1) and which ones the loop inserted (0), so training only scores the model's own tokens.

Stable API (the tool loop and user loops build on it):

- ``AgentLoopBase.__init__(self, trainer_config, server_manager, tokenizer, processor=None, **kwargs)``
- ``async AgentLoopBase.run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput`` where ``kwargs`` are the
  sample's non-tensor fields (raw_prompt, raw_prompt_ids, tools_kwargs, extra_info, agent_name, ...).
- ``AgentLoopBase.init_class(trainer_config, tokenizer, processor=None, **kwargs)``: one-time, per-process set-up
  shared by all instances of a class (load tool schemas, compile templates); called before the first instance.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentLoopBase", "AgentLoopMetrics", "AgentLoopOutput"]


@dataclass
class AgentLoopMetrics:
    """Seconds one trajectory spent waiting on the rollout servers and on tools."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0


@dataclass
class AgentLoopOutput:
    """One finished trajectory.

    Attributes:
        prompt_ids: the prompt as sent in the first turn (unpadded).
        response_ids: every token after the prompt: model turns and inserted tool/user turns, in order.
        response_mask: one entry per response token, 1 for model tokens and 0 for inserted ones.
        response_logprobs: rollout log-probabilities per response token (0.0 for inserted tokens), or None when
            not computed.
        num_turns: user/assistant/tool turns in the trajectory (a single-turn sample has 2).
        reward_score: a score the loop computed itself (e.g. from its environment); None lets the reward manager
            score the trajectory when reward runs in the loop.
        metrics: timings of this trajectory.
        extra_fields: per-sample values that become non-tensor columns of the output batch.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    num_turns: int = 0
    reward_score: float | None = None
    metrics: AgentLoopMetrics = field(default_factory=AgentLoopMetrics)
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.response_mask) != len(self.response_ids):
            raise ValueError(
                f"AgentLoopOutput.response_mask has {len(self.response_mask)} entries for "
                f"{len(self.response_ids)} response_ids"
            )
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(
                f"AgentLoopOutput.response_logprobs has {len(self.response_logprobs)} entries for "
                f"{len(self.response_ids)} response_ids"
            )
        if not self.prompt_ids:
            raise ValueError("AgentLoopOutput.prompt_ids is empty")


class AgentLoopBase(abc.ABC):
    """Base class of agent loops; subclasses implement :meth:`run` and register with ``@register("name")``.

    Args:
        trainer_config: the flattened trainer config (groups ``rollout``, ``model``, ``data``, ``reward``); the
            typed ``rollout`` group is also available as ``self.rollout_config``.
        server_manager: routes generate calls to the rollout replicas (``AsyncLLMServerManager``).
        tokenizer: the model's tokenizer.
        processor: a multimodal processor, or None.
        **kwargs: extra arguments from the loop's registration (YAML keys besides ``name`` and ``_target_``).
    """

    _class_initialized: bool = False

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any = None,
                 **kwargs: Any) -> None:
        from verl.experimental.agent_loop.config import rollout_group

        self.config = trainer_config
        self.rollout_config = rollout_group(trainer_config)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.loop_kwargs = dict(kwargs)

    @classmethod
    def init_class(cls, trainer_config: Any, tokenizer: Any, processor: Any = None, **kwargs: Any) -> None:
        """One-time set-up per process and class; override to load shared state. Called before the first
        instance is built; the default does nothing."""
        return None

    @classmethod
    def ensure_class_initialized(cls, trainer_config: Any, tokenizer: Any, processor: Any = None,
                                 **kwargs: Any) -> None:
        if cls.__dict__.get("_class_initialized", False):
            return
        cls.init_class(trainer_config, tokenizer, processor, **kwargs)
        cls._class_initialized = True

    @abc.abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Produce one trajectory for the sample whose non-tensor fields are ``kwargs``."""
