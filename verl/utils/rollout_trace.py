"""Tracing of rollout calls (agent-loop runs, generate calls) to Weave or MLflow: verl's ``rollout_trace_op``.

Nothing is recorded until :meth:`RolloutTraceConfig.init` names a backend; until then :func:`rollout_trace_op`
calls the wrapped function directly. With a backend, each call is one trace entry with the call's arguments, its
result (or exception) and the trajectory it serves (step, sample index, rollout number: the attributes of the
enclosing :func:`rollout_trace_attr`; a trajectory entered with ``trace=False`` is not recorded). The backends'
packages are optional: ``pip install weave`` / ``pip install mlflow``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from verl.utils.extras import MissingExtraError, missing_message

__all__ = [
    "BACKENDS",
    "RolloutTraceConfig",
    "current_trajectory",
    "get_trajectory_info",
    "rollout_trace_attr",
    "rollout_trace_op",
    "trajectory_attr",
]

BACKENDS = ("weave", "mlflow")
# The trajectory-context flag set by rollout_trace_attr(trace=...) (not the rollout.trace config block).
_TRACE_FLAG = "trace"
_TRAJECTORY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("verl_trajectory", default=None)


@contextlib.contextmanager
def trajectory_attr(
    step: int = -1,
    sample_index: Any = None,
    rollout_n: int = 0,
    validate: bool = False,
    name: str = "rollout_trace",
    trace: bool = True,
    **attrs: Any,
) -> Iterator[dict[str, Any]]:
    """Mark the code inside as working on one trajectory and yield its attributes (``trace=False``: not selected
    for tracing). The agent loop's form (step first); :func:`rollout_trace_attr` is verl's, with the backends."""
    info = {
        "step": step,
        "sample_index": sample_index,
        "rollout_n": rollout_n,
        "validate": validate,
        "name": name,
        "trace": trace,
        **attrs,
    }
    token = _TRAJECTORY.set(info)
    try:
        yield info
    finally:
        _TRAJECTORY.reset(token)


def current_trajectory() -> dict[str, Any] | None:
    """The attributes of the enclosing :func:`trajectory_attr` / :func:`rollout_trace_attr`, or None outside one."""
    return _TRAJECTORY.get()


async def get_trajectory_info(step: int, index: Sequence[Any], validate: bool) -> list[dict[str, Any]]:
    """One ``{step, sample_index, rollout_n, validate}`` per row; ``rollout_n`` counts the consecutive rows of one
    sample index (the ``rollout.n`` copies of a prompt sit next to each other)."""
    info: list[dict[str, Any]] = []
    previous, repeat = object(), 0
    for value in index:
        repeat = repeat + 1 if value == previous else 0
        previous = value
        info.append({"step": step, "sample_index": value, "rollout_n": repeat, "validate": validate})
    return info


class RolloutTraceConfig:
    """Process-wide tracing settings (a singleton, as in verl): backend, its client, whether to decode token ids
    to text in traces, the run's names and the per-worker sample budget the agent loop applies."""

    _instance: RolloutTraceConfig | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> RolloutTraceConfig:
        if cls._instance is None:
            instance = super().__new__(cls)
            instance.backend = None
            instance.client = None
            instance.token2text = False
            instance.project_name = None
            instance.experiment_name = None
            instance.max_samples_per_step_per_worker = None
            instance._initialized = False
            cls._instance = instance
        return cls._instance

    @classmethod
    def get_instance(cls) -> RolloutTraceConfig:
        return cls()

    @classmethod
    def init(
        cls,
        project_name: str,
        experiment_name: str,
        backend: str | None,
        token2text: bool = False,
        max_samples_per_step_per_worker: int | None = None,
    ) -> None:
        """Set tracing up once per process (later calls are ignored); ``backend`` None keeps tracing off."""
        config = cls.get_instance()
        if config._initialized:
            return
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"rollout trace backend must be one of {list(BACKENDS)} or None, got {backend!r}")
        if backend == "weave":
            config.client = _require("weave", "rollout tracing to Weave").init(project_name)
        elif backend == "mlflow":
            import os

            mlflow = _require("mlflow", "rollout tracing to MLflow")
            mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:////tmp/mlruns.db"))
            mlflow.set_experiment(project_name)
            config.client = mlflow
        config.backend = backend
        config.token2text = token2text
        config.project_name = project_name
        config.experiment_name = experiment_name
        config.max_samples_per_step_per_worker = max_samples_per_step_per_worker
        config._initialized = True

    @classmethod
    def get_backend(cls) -> str | None:
        return cls.get_instance().backend

    @classmethod
    def get_client(cls) -> Any:
        return cls.get_instance().client

    @classmethod
    def enable_token2text(cls) -> bool:
        return bool(cls.get_instance().token2text)

    @classmethod
    def reset(cls) -> None:
        cls._instance = None


def _require(package: str, feature: str) -> Any:
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingExtraError(missing_message("verl.utils.rollout_trace", feature, package=package)) from exc


@contextlib.contextmanager
def rollout_trace_attr(
    sample_index: Any = None,
    step: Any = None,
    rollout_n: Any = None,
    name: str = "rollout_trace",
    validate: bool = False,
    trace: bool = True,
) -> Iterator[None]:
    """Mark the code inside as working on one trajectory (verl's argument order); ``trace=False`` keeps its
    calls out of the trace. The attributes are the trajectory context (:func:`current_trajectory`)."""
    with trajectory_attr(
        step=-1 if step is None else step,
        sample_index=sample_index,
        rollout_n=0 if rollout_n is None else rollout_n,
        validate=validate,
        name=name,
        trace=trace,
    ):
        # Weave calls get the trajectory's attributes when they are created (_Call); MLflow groups a trajectory's
        # calls under one span tagged with them.
        if RolloutTraceConfig.get_backend() == "mlflow" and trace:
            mlflow = RolloutTraceConfig.get_client()
            with mlflow.start_span(name=name) as span:
                for key, value in _attributes().items():
                    mlflow.set_trace_tag(span.trace_id, str(key), str(value))
                yield
        else:
            yield


def _attributes() -> dict[str, Any]:
    info = current_trajectory() or {}
    keys = ("sample_index", "step", "rollout_n", "validate")
    attributes = {k: info[k] for k in keys if info.get(k) is not None}
    attributes["experiment_name"] = RolloutTraceConfig.get_instance().experiment_name
    return attributes


def _with_text(instance: Any, inputs: dict[str, Any], output: Any) -> Any:
    """A copy of ``output`` with ``prompt_text`` / ``response_text`` decoded by ``instance.tokenizer``."""
    decode = getattr(getattr(instance, "tokenizer", None), "decode", None)
    if not callable(decode):
        return output

    def field(name: str) -> Any:
        return output.get(name) if isinstance(output, dict) else getattr(output, name, None)

    prompt_ids = field("prompt_ids") if field("prompt_ids") is not None else inputs.get("prompt_ids")
    response_ids = field("response_ids") if field("response_ids") is not None else field("token_ids")
    if prompt_ids is None and response_ids is None:
        return output
    if isinstance(output, dict):
        copy = dict(output)
    elif hasattr(output, "model_dump"):
        copy = output.model_dump()
    elif hasattr(output, "__dict__"):
        copy = dict(vars(output))
    else:
        return output
    if prompt_ids is not None:
        copy["prompt_text"] = decode(prompt_ids)
    if response_ids is not None:
        copy["response_text"] = decode(response_ids)
    return copy


def _inputs(func: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    inputs = dict(bound.arguments)
    inputs.pop("self", None)
    return inputs


class _Call:
    """One traced call on the configured backend: ``finish(output)`` or ``fail(exc)`` closes it."""

    def __init__(self, func: Callable, inputs: dict[str, Any]) -> None:
        self.backend = RolloutTraceConfig.get_backend()
        self.client = RolloutTraceConfig.get_client()
        self.name = func.__qualname__
        if self.backend == "weave":
            self.handle = self.client.create_call(op=self.name, inputs=inputs, attributes=_attributes())
        else:
            self._span = self.client.start_span(name=self.name)
            self.handle = self._span.__enter__()
            self.handle.set_inputs(inputs)

    def finish(self, output: Any) -> None:
        if self.backend == "weave":
            self.client.finish_call(self.handle, output=output)
        else:
            self.handle.set_outputs(output)
            self._span.__exit__(None, None, None)

    def fail(self, exc: BaseException) -> None:
        if self.backend == "weave":
            self.client.finish_call(self.handle, exception=exc)
        else:
            self._span.__exit__(type(exc), exc, exc.__traceback__)


def _tracing() -> bool:
    if RolloutTraceConfig.get_backend() is None:
        return False
    info = current_trajectory()
    return info is None or bool(info.get(_TRACE_FLAG, True))


def rollout_trace_op(func: Callable) -> Callable:
    """Decorator (sync or async methods) recording each call on the configured trace backend; a plain call when
    no backend is configured or the trajectory is excluded from tracing."""

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _tracing():
                return await func(*args, **kwargs)
            inputs = _inputs(func, args, kwargs)
            call = _Call(func, inputs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                call.fail(exc)
                raise
            shown = (
                _with_text(args[0] if args else None, inputs, result)
                if RolloutTraceConfig.enable_token2text()
                else result
            )
            call.finish(shown)
            return result

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _tracing():
            return func(*args, **kwargs)
        inputs = _inputs(func, args, kwargs)
        call = _Call(func, inputs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            call.fail(exc)
            raise
        call.finish(result)
        return result

    return wrapper
