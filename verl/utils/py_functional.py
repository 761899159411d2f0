"""Small pure-Python helpers verl code imports from here: dict merging, metric accumulation, a time limit for a
call, a temporary environment variable, and conversions of config values to plain containers."""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import queue
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np

from verl.utils.metric import Metric

__all__ = [  # noqa: F822 (DynamicEnum and DynamicEnumMeta are loaded lazily by __getattr__)
    "DynamicEnum",
    "DynamicEnumMeta",
    "NestedNamespace",
    "append_to_dict",
    "convert_nested_value_to_list_recursive",
    "convert_to_regular_types",
    "list_of_dict_to_dict_of_list",
    "rename_dict",
    "temp_env_var",
    "timeout_limit",
    "union_two_dict",
]


def __getattr__(name: str) -> Any:
    # The single-controller package imports Ray; load it only for the names that live there.
    if name in ("DynamicEnum", "DynamicEnumMeta"):
        from verl.single_controller.base.dynamic_enum import DynamicEnum

        return DynamicEnum if name == "DynamicEnum" else type(DynamicEnum)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- time limit


def _run_and_report(fn: Callable, results: multiprocessing.Queue, args: tuple, kwargs: dict) -> None:
    """Child side of :func:`timeout_limit`: send ``(ok, result_or_exception)`` back to the parent."""
    try:
        outcome = (True, fn(*args, **kwargs))
    except Exception as exc:  # sent back and re-raised in the parent
        outcome = (False, exc)
    try:
        pickle.dumps(outcome)
    except Exception as exc:
        what = "result" if outcome[0] else f"{type(outcome[1]).__name__} exception"
        outcome = (False, RuntimeError(f"{getattr(fn, '__name__', fn)}: its {what} cannot be pickled: {exc}"))
    results.put(outcome)


def _with_signal_timeout(fn: Callable, seconds: float) -> Callable:
    if os.name != "posix":
        raise NotImplementedError(f"timeout_limit(use_signals=True) needs POSIX signals; this OS is {os.name!r}")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        def on_alarm(signum, frame):
            raise TimeoutError(f"{fn.__name__} did not finish within {seconds} s (signal)")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return wrapper


def _with_process_timeout(fn: Callable, seconds: float) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        results: multiprocessing.Queue = multiprocessing.Queue(maxsize=1)
        child = multiprocessing.Process(target=_run_and_report, args=(fn, results, args, kwargs))
        child.start()
        child.join(timeout=seconds)
        try:
            if child.is_alive():
                child.terminate()
                child.join(timeout=0.5)
                raise TimeoutError(f"{fn.__name__} did not finish within {seconds} s (its process was terminated)")
            try:
                ok, value = results.get(timeout=0.1)
            except queue.Empty as err:
                raise RuntimeError(
                    f"{fn.__name__}: its process exited (exit code {child.exitcode}) without returning a result"
                ) from err
        finally:
            results.close()
            results.join_thread()
        if ok:
            return value
        raise value

    return wrapper


def timeout_limit(seconds: float, use_signals: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: raise ``TimeoutError`` when the call takes longer than ``seconds``.

    By default the call runs in a child process that is terminated on timeout (works from any thread; arguments,
    result and exceptions must pickle). ``use_signals=True`` uses ``SIGALRM`` in the calling process instead,
    which only works in the main thread of a POSIX process.
    """

    def decorator(fn: Callable) -> Callable:
        return _with_signal_timeout(fn, seconds) if use_signals else _with_process_timeout(fn, seconds)

    return decorator


# ----------------------------------------------------------------------------- dicts


def union_two_dict(dict1: dict, dict2: dict) -> dict:
    """Add ``dict2``'s items to ``dict1`` (in place, returned); a key in both must hold equal values."""
    for key, value in dict2.items():
        if key in dict1 and dict1[key] != value:
            raise AssertionError(f"union_two_dict: key {key!r} holds different values ({dict1[key]!r} vs {value!r})")
        dict1[key] = value
    return dict1


def rename_dict(data: dict, prefix: str = "") -> dict:
    """A copy of ``data`` whose keys all start with ``prefix`` (keys that already do are kept)."""
    return {key if key.startswith(prefix) else f"{prefix}{key}": value for key, value in data.items()}


def append_to_dict(data: dict, new_data: dict, prefix: str = "") -> None:
    """Accumulate ``new_data`` into ``data`` in place: one list (or :class:`Metric`) of values per key.

    Keys get ``prefix`` unless they already start with it. A list value extends, anything else appends; the first
    value of a key that is a Metric starts an empty Metric with the same aggregation, so the reduction travels
    with the values.
    """
    for key, value in new_data.items():
        name = key if key.startswith(prefix) else f"{prefix}{key}"
        if name not in data:
            data[name] = value.init_list() if isinstance(value, Metric) else []
        if isinstance(value, list):
            data[name].extend(value)
        else:
            data[name].append(value)


def list_of_dict_to_dict_of_list(list_of_dict: list[dict]) -> dict[str, list]:
    """``[{a: 1, b: 2}, {a: 3, b: 4}]`` -> ``{a: [1, 3], b: [2, 4]}``; every dict must use the first one's keys."""
    if not list_of_dict:
        return {}
    output: dict[str, list] = {key: [] for key in list_of_dict[0]}
    for row, item in enumerate(list_of_dict):
        for key, value in item.items():
            if key not in output:
                raise AssertionError(
                    f"list_of_dict_to_dict_of_list: dict {row} has key {key!r}, which the first "
                    f"dict lacks (keys: {list(output)})"
                )
            output[key].append(value)
    return output


class NestedNamespace(SimpleNamespace):
    """A namespace over a nested dict: ``NestedNamespace({"a": {"b": 1}}).a.b == 1``."""

    def __init__(self, dictionary: dict, **kwargs: Any):
        super().__init__(**kwargs)
        for key, value in dictionary.items():
            setattr(self, key, NestedNamespace(value) if isinstance(value, dict) else value)


# ----------------------------------------------------------------------------- environment and conversions


@contextmanager
def temp_env_var(key: str, value: str) -> Iterator[None]:
    """Set the environment variable ``key`` for the duration of the block, then restore (or remove) it."""
    previous = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def convert_to_regular_types(obj: Any) -> Any:
    """OmegaConf containers (and nested lists, tuples, dicts) as plain dicts and lists."""
    from omegaconf import DictConfig, ListConfig

    if isinstance(obj, DictConfig | dict):
        return {key: convert_to_regular_types(value) for key, value in obj.items()}
    if isinstance(obj, ListConfig | list | tuple):
        return [convert_to_regular_types(value) for value in obj]
    return obj


def convert_nested_value_to_list_recursive(data_item: Any) -> Any:
    """Numpy arrays anywhere inside nested dicts and lists become lists (e.g. before JSON serialisation)."""
    if isinstance(data_item, np.ndarray):
        data_item = data_item.tolist()
    if isinstance(data_item, dict):
        return {key: convert_nested_value_to_list_recursive(value) for key, value in data_item.items()}
    if isinstance(data_item, list):
        return [convert_nested_value_to_list_recursive(value) for value in data_item]
    return data_item
