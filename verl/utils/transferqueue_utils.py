"""verl's TransferQueue bridge names, for a build without TransferQueue.

In verl, workers and trainer functions decorated with :func:`tqbridge` accept TransferQueue metadata (``BatchMeta`` /
``KVBatchMeta``) in place of data: the decorator fetches the fields from the queue, calls the function and puts its
output back. This package moves batches through Ray object refs and never enables TransferQueue, so no argument is
ever a metadata batch and :func:`tqbridge` calls the function unchanged (sync or async) -- exactly what verl's
decorator does when TransferQueue is disabled. The metadata types cannot be instantiated, and every ``tq.<name>``
(the ``transfer_queue`` module in verl) and :func:`create_transferqueue_client` raise
:class:`~verl.utils.extras.MissingExtraError` saying TransferQueue is not part of this build.

:func:`repeat_dict` is real: it repeats every column of a batch dict, as the TransferQueue trainers of verl's forks do
when they expand prompts to ``n`` rollouts before putting them in the queue.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verl.utils.extras import unavailable_class, unavailable_function

__all__ = [
    "BatchMeta",
    "KVBatchMeta",
    "TQ_INITIALIZED",
    "create_transferqueue_client",
    "get_transferqueue_client",
    "is_transferqueue_enabled",
    "repeat_dict",
    "tq",
    "tqbridge",
]

_FEATURE = "TransferQueue"
_REASON = (
    "this package passes batches between the trainer and its workers through Ray object refs; verl's "
    "TransferQueue data plane (trainer.use_v1 / transfer_queue.enable) is not implemented here"
)

# Whether verl's TransferQueue data path is on (the TRANSFER_QUEUE_ENABLE switch of older releases): never here.
is_transferqueue_enabled = False
TQ_INITIALIZED = False

BatchMeta = unavailable_class("BatchMeta", __name__, _FEATURE, package="transfer_queue", reason=_REASON)
KVBatchMeta = unavailable_class("KVBatchMeta", __name__, _FEATURE, package="transfer_queue", reason=_REASON)


class _UnavailableTransferQueue:
    """Stands in for the ``transfer_queue`` module: any function looked up on it raises when called."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        return unavailable_function(name, "transfer_queue", _FEATURE, package="transfer_queue", reason=_REASON)

    def __repr__(self) -> str:
        return "<transfer_queue: not part of this build>"


tq = _UnavailableTransferQueue()

create_transferqueue_client = unavailable_function(
    "create_transferqueue_client", __name__, _FEATURE, package="transfer_queue", reason=_REASON
)


def get_transferqueue_client() -> None:
    """The process's TransferQueue client: always ``None`` here, since none can be created."""
    return None


def tqbridge(dispatch_mode: Any = None, put_data: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """verl's TransferQueue bridge decorator; with TransferQueue disabled (always, here) it calls the function as is.

    ``dispatch_mode`` is still checked (a typo should fail where it is written); ``put_data`` is the argument of
    older verl releases and has nothing to control without a queue.
    """
    if dispatch_mode is not None:
        from verl.single_controller.base.decorator import _check_dispatch_mode

        _check_dispatch_mode(dispatch_mode)

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_inner(*args: Any, **kwargs: Any) -> Any:
                return await func(*args, **kwargs)

            return async_inner

        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        return inner

    return decorator


def _repeat(value: Any, key: str, repeat_times: int, interleave: bool) -> Any:
    if isinstance(value, torch.Tensor):
        if interleave:
            return value.repeat_interleave(repeat_times, dim=0)
        return value.repeat(repeat_times, *([1] * (value.dim() - 1)))
    if isinstance(value, np.ndarray):
        return np.repeat(value, repeat_times, axis=0) if interleave else np.concatenate([value] * repeat_times)
    if isinstance(value, list | tuple):
        items = [item for item in value for _ in range(repeat_times)] if interleave else list(value) * repeat_times
        return type(value)(items) if isinstance(value, tuple) else items
    raise TypeError(f"repeat_dict: column {key!r} is a {type(value).__name__}; expected a tensor, array or list")


def repeat_dict(batch_dict: dict[str, Any], repeat_times: int = 2, interleave: bool = True) -> dict[str, Any]:
    """Every column of ``batch_dict`` repeated along its first dimension, like :meth:`DataProto.repeat`.

    ``interleave=True`` gives ``a a b b`` (each prompt's copies side by side, as GRPO groups need), ``False`` gives
    ``a b a b``. Tensors, numpy arrays and lists are supported; ``repeat_times=1`` returns the dict itself.
    """
    if repeat_times < 1:
        raise ValueError(f"repeat_dict: repeat_times must be >= 1, got {repeat_times}")
    if repeat_times == 1:
        return batch_dict
    return {key: _repeat(value, key, repeat_times, interleave) for key, value in batch_dict.items()}
