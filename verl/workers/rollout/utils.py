"""Small helpers of verl's rollout servers (``verl.workers.rollout.utils``): async iteration, free ports, model
length."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any, TypeVar

from verl.utils import net_utils
from verl.utils.net_utils import is_valid_ipv6_address

__all__ = [
    "engine_gpus",
    "ensure_async_iterator",
    "get_free_port",
    "get_max_position_embeddings",
    "is_valid_ipv6_address",
    "model_path_of",
]

T = TypeVar("T")


async def ensure_async_iterator(iterable: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
    """Iterate a sync or async iterable with ``async for`` (weight streams may be either)."""
    if hasattr(iterable, "__aiter__"):
        async for item in iterable:
            yield item
    else:
        for item in iterable:
            yield item


def get_free_port(address: str = "127.0.0.1") -> tuple[int, socket.socket]:
    """A port free on ``address`` and the open socket that holds it (verl's rollout servers' variant of
    :func:`verl.utils.net_utils.get_free_port`): close the socket just before the server binds the port."""
    return net_utils.get_free_port(address, with_alive_sock=True)


def get_max_position_embeddings(hf_config: Any) -> int:
    """``max_position_embeddings`` of a transformers config (its ``text_config`` for multimodal models)."""
    value = getattr(hf_config, "max_position_embeddings", None)
    if value is None:
        value = getattr(getattr(hf_config, "text_config", None), "max_position_embeddings", None)
    if value is None:
        raise ValueError(
            f"{type(hf_config).__name__} has no max_position_embeddings (nor text_config.max_position_embeddings)"
        )
    return int(value)


def engine_gpus(config: Any) -> int:
    """GPUs one replica of an external engine spans: ``tensor_model_parallel_size x data_parallel_size``."""
    from verl.workers.rollout.base import as_rollout_config

    config = as_rollout_config(config)
    return config.tensor_model_parallel_size * config.data_parallel_size


def model_path_of(model_config: Any) -> str:
    """The checkpoint folder of a model config (built into an ``HFModelConfig``): ``local_path`` (verl's resolved
    copy) or ``path``, checked as the workers check it."""
    from verl.workers.fsdp.model_loader import resolve_model_path
    from verl.workers.rollout.base import as_model_config

    model_config = as_model_config(model_config)
    if model_config.local_path:
        return model_config.local_path

    return resolve_model_path(model_config)
