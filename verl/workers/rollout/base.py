"""The rollout contract: a server that speaks tokens, whatever engine sits behind it.

Agent loops, the synchronous trainer and the fully-async rollouter only ever see this interface, so
the embedded ``hf`` engine, vLLM and SGLang are interchangeable by ``rollout.name``.

Pause semantics (the fully-async trainer relies on them): ``abort_all()`` closes the admission gate
and makes every in-flight request return what it has with ``stop_reason="aborted"``; ``generate``
calls made while the gate is closed wait until ``resume()`` (or raise a ``TimeoutError`` naming the
request id). ``sleep()`` also closes the gate until ``wake_up()``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from verl.utils.config_builder import as_config

if TYPE_CHECKING:
    from verl.workers.config import HFModelConfig, RolloutConfig

T = TypeVar("T")

__all__ = [
    "BaseRollout",
    "STOP_REASONS",
    "RolloutMode",
    "RolloutReplica",
    "RolloutServer",
    "TokenOutput",
    "as_model_config",
    "as_rollout_config",
]

STOP_REASONS = ("stop", "length", "aborted")


@dataclass
class TokenOutput:
    """What one request produced.

    ``log_probs[i]`` is the log-probability of ``token_ids[i]`` under the distribution it was sampled
    from before top-k/top-p truncation: ``log_softmax(logits / temperature)``, or ``log_softmax(logits)``
    for greedy requests. That is the quantity the actor recomputes, so the two can be compared.
    """

    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str = "stop"
    num_preempted: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # MoE routing per token, for engines that report it (router replay); None otherwise
    routed_experts: Any = None
    # verl's name for ``extra``: the same dict after construction (given values are merged into ``extra``)
    extra_fields: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.extra_fields and self.extra_fields is not self.extra:
            self.extra = {**self.extra, **self.extra_fields}
        self.extra_fields = self.extra
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"TokenOutput.stop_reason must be one of {STOP_REASONS}, got {self.stop_reason!r}")
        if self.log_probs is not None and len(self.log_probs) != len(self.token_ids):
            raise ValueError(
                f"TokenOutput.log_probs has {len(self.log_probs)} entries for {len(self.token_ids)} token_ids"
            )


class RolloutMode(Enum):
    """Where a replica's engine runs relative to the trainer (verl's names).

    ``HYBRID``: inside the training worker's process, sharing its device; weights are copied in place.
    ``COLOCATED``: in a process of its own on the trainer's devices (e.g. an LLM judge); no weight sync.
    ``STANDALONE``: on devices of its own (disaggregated, off-policy training).
    """

    HYBRID = "hybrid"
    COLOCATED = "colocated"
    STANDALONE = "standalone"


class RolloutReplica(abc.ABC):
    """The token-level contract of one rollout engine, whatever carries the calls to it (docs/architecture.md).

    Three transports serve it: the :class:`RolloutServer` itself in the process that holds it, and, from other
    processes, ``StandaloneReplica`` (the server is a Ray actor) and ``WorkerRankReplica`` (the server lives in a
    rank of a hybrid actor group), both in :mod:`verl.workers.rollout.replica`. ``rollout_mode`` says where the
    engine runs.
    """

    rollout_mode: RolloutMode | None = None

    @abc.abstractmethod
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        """Generate a continuation of ``prompt_ids``.

        ``sampling_params`` keys: temperature, top_p, top_k (-1/0 = off), max_tokens, stop_token_ids,
        logprobs (bool), seed, ignore_eos, do_sample (False = greedy, as is temperature 0).
        """

    @abc.abstractmethod
    async def abort_all(self) -> None:
        """Pause admission; in-flight requests return their partial tokens with stop_reason 'aborted'."""

    @abc.abstractmethod
    async def resume(self) -> None:
        """Re-open admission after ``abort_all``; waiting ``generate`` calls proceed."""

    @abc.abstractmethod
    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        """Load new weights and return ``{"version": version, "checksum": weight_checksum(loaded weights)}``."""

    @abc.abstractmethod
    async def sleep(self) -> None:
        """Free the KV cache (and offload weights where the engine can) while the trainer uses the device."""

    @abc.abstractmethod
    async def wake_up(self) -> None:
        """Rebuild what ``sleep`` freed and re-open admission."""

    @abc.abstractmethod
    async def get_version(self) -> int:
        """Version of the weights currently loaded (0 before any update)."""


class RolloutServer(RolloutReplica):
    """One inference engine behind the token-level contract. In the process that holds it the server is its own
    replica (the hybrid transport: calls are direct awaits, weight updates are in-place copies); on the rollout
    pool it is itself the Ray actor a ``StandaloneReplica`` talks to."""

    rollout_mode = RolloutMode.HYBRID

    async def generate_batch(self, requests: Any, batch_group: Any = None) -> Any:
        """Many ``(prompt_ids, sampling_params, request_id)`` requests in one call (packed ``bytes`` or a list), as a
        ``StandaloneReplica`` sends them: per request its ``TokenOutput`` or the exception it raised, in the same
        form. Requests of one ``batch_group`` spread over several servers are admitted together."""
        from verl.workers.rollout.batch_rendezvous import BatchRendezvous
        from verl.workers.rollout.request_batching import gather_each, serve_request_batch

        rendezvous = self.__dict__.get("_batch_rendezvous")
        if rendezvous is None:
            rendezvous = self._batch_rendezvous = BatchRendezvous()
        return await serve_request_batch(requests, batch_group, rendezvous, gather_each(self.generate))


def as_rollout_config(config: Any) -> RolloutConfig:
    """The ``rollout`` group as a typed :class:`~verl.workers.config.RolloutConfig` (see ``as_config``)."""
    from verl.workers.config import RolloutConfig

    return as_config(config, RolloutConfig, "rollout")


def as_model_config(config: Any) -> HFModelConfig:
    """The ``model`` group as a typed :class:`~verl.workers.config.HFModelConfig` (see ``as_config``)."""
    from verl.workers.config import HFModelConfig

    return as_config(config, HFModelConfig, "model")


class BaseRollout(abc.ABC):
    """verl's in-worker rollout adapter: the engine handle a training worker drives around each update.

    Recipes subclass it to plug an engine into verl's worker flow: ``release()`` frees the engine's device memory
    before training, ``update_weights(weights)`` loads the new policy, ``resume(tags)`` brings weights and/or KV
    cache back. ``config`` and ``model_config`` may be OmegaConf nodes or dicts; they are turned into
    :class:`~verl.workers.config.RolloutConfig` / :class:`~verl.workers.config.HFModelConfig`. Batch generation
    (``generate_sequences``) is optional: server-mode adapters generate through the replicas instead.
    """

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, *args: Any, **kwargs: Any) -> None:
        self.config = as_rollout_config(config)
        self.model_config = as_model_config(model_config)
        self.device_mesh = device_mesh

    @abc.abstractmethod
    async def resume(self, tags: list[str]) -> None:
        """Bring back what ``release`` freed: ``tags`` holds ``"weights"`` and/or ``"kv_cache"``."""

    @abc.abstractmethod
    async def update_weights(
        self, weights: Iterable[Any] | AsyncIterable[Any], wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        """Load new weights: ``(name, tensor)`` pairs for ``wire_format="named_tensors"``, or
        ``(named_tensors, is_last)`` flushes for ``"delta_flush"``."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Free the weights and KV cache on the device while the trainer uses it."""

    def generate_sequences(self, prompts: Any) -> Any:
        """Batch generation for adapters that support it; server-mode adapters generate through their replicas."""
        raise NotImplementedError(
            f"{type(self).__qualname__} generates through its rollout replicas (server mode); "
            "it has no batch generate_sequences"
        )
