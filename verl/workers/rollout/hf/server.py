"""The embedded ``hf`` rollout server: continuous batching over a transformers model on CPU or GPU.

One background task drives the engine. Between decode steps it admits waiting requests (up to
``rollout.max_num_seqs`` rows), and after each step it retires finished rows and resolves their
futures. Forwards run on a single worker thread so the event loop stays responsive (abort, new
requests, agent-loop I/O) while the model computes; every mutation of the batch happens under one
lock, either on that thread or on the loop while the thread is idle.

A weight sync either aborts what runs (``abort_all``, then ``update_weights``, then ``resume``) or keeps it
(``pause_generation``, then ``update_weights``, then ``resume``): the rows stop between two decode steps with their KV
cache, the weights are copied in place (so a captured decode graph still reads the right memory), and decoding goes
on under the new weights. Each call's result says which weight version produced which of its tokens.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch

from verl.utils.async_utils import FAILURE_ATTR, spawn_logged
from verl.workers.rollout.base import RolloutServer, TokenOutput, as_rollout_config
from verl.workers.rollout.hf.decode_graphs import DecodeGraphs
from verl.workers.rollout.hf.kv_batch import RunningBatch
from verl.workers.rollout.hf.model_io import eos_token_ids as model_eos_token_ids
from verl.workers.rollout.hf.model_io import load_model, load_named_tensors, resolve_dtype
from verl.workers.rollout.hf.sampling import RowSamplingState, SamplingParams, sample_next_tokens
from verl.workers.rollout.hf.scheduler import AdmissionPolicy, Request
from verl.workers.rollout.hf.static_batch import StaticBatch, default_batch_buckets, supports_static_cache

__all__ = ["HFRolloutServer", "captures_graphs"]

logger = logging.getLogger(__name__)

_TRUNCATIONS = ("error", "left", "right")
#: columns a captured decode step's key/value window is rounded up to (fewer graphs against a little more attention)
GRAPH_WINDOW_COLUMNS = 256


def captures_graphs(device: torch.device, enforce_eager: bool, model: torch.nn.Module | None = None) -> bool:
    """Whether the static decode steps are captured as CUDA graphs: on a CUDA device unless
    ``rollout.enforce_eager`` (verl's switch for vLLM's graphs, read the same way here), and never for a model whose
    parameters FSDP shards (it gathers them into new memory for every forward, which a graph cannot follow)."""
    if device.type != "cuda" or enforce_eager:
        return False
    from torch.distributed.tensor import DTensor

    return model is None or not any(isinstance(p, DTensor) for p in model.parameters())


class HFRolloutServer(RolloutServer):
    """Continuous-batching engine over ``model.forward`` with a per-row padded KV cache.

    Args:
        config: the ``RolloutConfig`` (or an OmegaConf node, mapping or ``SimpleNamespace`` of its keys, built
            into one). ``max_num_batched_tokens`` bounds one prefill forward (rows x longest prompt); admitted
            prompts beyond it are prefilled in further groups.
        model_path: Hugging Face folder to load, unless ``model`` is given.
        model: an already built causal LM to serve as is (its dtype and device are kept).
        device: where to run; defaults to CUDA when visible, else CPU.
        min_admit_chunk: admit waiting requests once this many rows are free (default max_num_seqs/8).
        pause_timeout_s: how long a ``generate`` call waits for ``resume``/``wake_up`` before failing.
        prompt_truncation: what to do with prompts over the limit: "error" (default), "left" (keep the
            last tokens) or "right" (keep the first); defaults to ``config.prompt_truncation``.
        eos_token_ids: tokens that end a request unless ``ignore_eos``; defaults to the model's.
        seed: seed of the engine's sampling generator (requests may also carry their own ``seed``).
        max_steps_per_call: decode steps the worker thread may run back to back while no row finishes
            and the loop does not need it; saves an event-loop round trip per token.
        static_decode: decode from a cache of fixed capacity (:mod:`static_batch`); None: whenever the model's
            layers all use full attention. On a CUDA device its steps are captured as CUDA graphs unless
            ``rollout.enforce_eager`` (:mod:`decode_graphs`); False keeps the growing cache (:mod:`kv_batch`).
    """

    def __init__(
        self,
        config: Any,
        model_path: str | None = None,
        *,
        model: torch.nn.Module | None = None,
        device: str | torch.device | None = None,
        min_admit_chunk: int | None = None,
        pause_timeout_s: float = 600.0,
        prompt_truncation: str | None = None,
        eos_token_ids: Iterable[int] | None = None,
        attn_implementation: str | None = "sdpa",
        seed: int | None = None,
        max_steps_per_call: int = 64,
        static_decode: bool | None = None,
    ):
        self.config = config = as_rollout_config(config)
        if model is None:
            if model_path is None:
                raise ValueError("HFRolloutServer needs model_path (model.path) or a model instance")
            from verl.utils.device import get_device_name

            target = torch.device(device or get_device_name())
            model = load_model(str(model_path), resolve_dtype(config.dtype), target, attn_implementation)
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_input_embeddings().num_embeddings)

        self.prompt_length = config.prompt_length
        self.response_length = config.response_length
        self.max_model_len = config.max_total_length
        # multi-turn prompts carry earlier turns, so only the model length bounds them
        self.max_prompt_len = self.max_model_len - 1 if config.multi_turn.enable else self.prompt_length
        self.prompt_truncation = prompt_truncation or config.prompt_truncation
        if self.prompt_truncation not in _TRUNCATIONS:
            raise ValueError(f"rollout.prompt_truncation={self.prompt_truncation!r} must be one of {_TRUNCATIONS}")
        self.policy = AdmissionPolicy(config.max_num_seqs, min_admit_chunk)
        self.pause_timeout_s = pause_timeout_s
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None else model_eos_token_ids(model))
        self.defaults = {
            "temperature": config.temperature,
            "top_p": config.top_p,
            "top_k": config.top_k,
            "do_sample": config.do_sample,
            "max_tokens": self.response_length,
            "logprobs": config.calculate_log_probs,
            "ignore_eos": config.ignore_eos,
        }
        self.generator = None
        if seed is not None:
            self.generator = torch.Generator(device=self.device).manual_seed(seed)

        self.graphs: DecodeGraphs | None = None
        self.batch = self._build_batch(static_decode)
        self._rows: list[Request] = []
        self._row_state: RowSamplingState | None = None
        self._waiting: collections.deque[Request] = collections.deque()
        self._active: set[str] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout")
        # Set from the event loop when it needs the worker thread back between two decode steps.
        self._interrupt = threading.Event()
        self.max_steps_per_call = max_steps_per_call
        self._version = 0
        # request id -> (index of its first token sampled under the new weights, version) per sync it lived through
        self._version_marks: dict[str, list[tuple[int, int]]] = {}
        self._paused = False
        self._held = False
        self._sleeping = False
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    def _build_batch(self, static_decode: bool | None) -> RunningBatch | StaticBatch:
        config = self.config
        why_not = supports_static_cache(self.model)
        if static_decode is None:
            static_decode = why_not is None
        elif static_decode and why_not:
            raise NotImplementedError(f"hf rollout: static_decode=True, but the model is {why_not}")
        if not static_decode:
            return RunningBatch(self.model, self.device, max_prefill_tokens=config.max_num_batched_tokens)
        capture = captures_graphs(self.device, config.enforce_eager, self.model)
        self.graphs = DecodeGraphs(self.device, capture=capture)
        buckets = None
        if capture:
            buckets = config.cudagraph_capture_sizes or default_batch_buckets(config.max_num_seqs)
        return StaticBatch(
            self.model,
            self.device,
            max_rows=config.max_num_seqs,
            max_model_len=self.max_model_len,
            max_prefill_tokens=config.max_num_batched_tokens,
            batch_buckets=buckets,
            window_granularity=GRAPH_WINDOW_COLUMNS if capture else 1,
            trim_columns=GRAPH_WINDOW_COLUMNS if capture else None,
            graphs=self.graphs,
        )

    # ------------------------------------------------------------------ public contract

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> TokenOutput:
        self._bind_loop()
        self._raise_if_failed()
        prompt = self._prepare_prompt(prompt_ids, request_id)
        params = SamplingParams.from_dict(sampling_params, defaults=self.defaults, request_id=request_id)
        budget = self.max_model_len - len(prompt)
        if budget < 1:
            raise ValueError(
                f"request {request_id}: prompt has {len(prompt)} tokens, leaving no room under max_model_len="
                f"{self.max_model_len}"
            )
        if params.max_tokens > budget:
            params = replace(params, max_tokens=budget)
        await self._wait_open(request_id)
        # The version current once the gate let the call through is its start version (the staleness account). A sync
        # that keeps requests (pause_generation) swaps weights under running rows: update_weights marks where each
        # row's tokens of the new version begin, and the result reports the version of every token.
        version = self._version
        if request_id in self._active:
            raise ValueError(f"request {request_id}: a request with this id is already in flight")
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self.eos_token_ids
        request = Request(
            request_id=request_id,
            prompt_ids=prompt,
            params=params,
            stop_ids=frozenset(stop_ids),
            future=self._loop.create_future(),
            log_probs=[] if params.logprobs else None,
        )
        self._active.add(request_id)
        self._waiting.append(request)
        self._wake.set()
        self._interrupt.set()  # let the worker thread hand back so the newcomer can be admitted
        try:
            out = await request.future
            token_versions = _token_versions(version, self._version_marks.get(request_id, ()), len(out.token_ids))
            out.extra.setdefault("weight_version", version)
            out.extra.setdefault("weight_version_end", token_versions[-1] if token_versions else version)
            if token_versions and token_versions[-1] != version:
                out.extra.setdefault("token_versions", token_versions)
            return out
        finally:
            self._active.discard(request_id)
            self._version_marks.pop(request_id, None)
            if not request.future.done() or request.future.cancelled():
                self._interrupt.set()  # the caller gave up: its row must leave the batch

    async def abort_all(self) -> None:
        self._bind_loop()
        self._paused = True
        self._open.clear()
        self._interrupt.set()
        async with self._lock:
            self._abort_in_flight()

    async def pause_generation(self) -> None:
        """Stop decoding between two steps, keeping every request and its KV cache (a weight sync that keeps requests:
        the push may come in several ``update_weights`` calls, and no token may be sampled from half-loaded weights).
        New requests wait at the gate; ``resume`` continues. Returns once no step is running."""
        self._bind_loop()
        self._held = True
        self._open.clear()
        self._interrupt.set()
        async with self._lock:
            pass

    async def resume(self) -> None:
        """Re-open after ``abort_all`` or ``pause_generation``."""
        self._bind_loop()
        self._paused = False
        self._held = False
        self._refresh_gate()

    async def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> dict[str, Any]:
        self._bind_loop()
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"update_weights: version must be an int, got {version!r}")
        named = list(named_tensors.items()) if isinstance(named_tensors, dict) else list(named_tensors)
        self._interrupt.set()
        async with self._lock:
            checksum = await self._loop.run_in_executor(self._executor, load_named_tensors, self.model, named)
            if version != self._version:
                self._mark_new_version(version)
            self._version = version
        return {"version": version, "checksum": checksum}

    async def sleep(self) -> None:
        """Abort what runs, drop the KV cache and, on an accelerator, move the weights to host memory."""
        self._bind_loop()
        self._sleeping = True
        self._open.clear()
        self._interrupt.set()
        async with self._lock:
            self._abort_in_flight()
            if isinstance(self.batch, StaticBatch):
                self.batch.release()
            if self.device.type != "cpu":
                self.model.to("cpu")
                getattr(torch, self.device.type).empty_cache()

    async def wake_up(self) -> None:
        self._bind_loop()
        async with self._lock:
            if self.device.type != "cpu":
                self.model.to(self.device)
            self._sleeping = False
        self._refresh_gate()

    async def get_version(self) -> int:
        return self._version

    # ------------------------------------------------------------------ introspection

    @property
    def num_running(self) -> int:
        return len(self._rows)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    # ------------------------------------------------------------------ internals

    def _bind_loop(self) -> None:
        """Create the asyncio primitives and the engine task on the running loop (rebinding if it changed)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._task is not None and not self._task.done():
            return
        if self._rows or self._waiting:
            raise RuntimeError("hf rollout server: requests in flight on another event loop")
        self._loop = loop
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._open = asyncio.Event()
        self._refresh_gate()
        self._task = spawn_logged(self._engine_loop(), owner=self, name="hf rollout engine loop")

    def _refresh_gate(self) -> None:
        if self._paused or self._held or self._sleeping:
            self._open.clear()
        else:
            self._open.set()
            self._wake.set()

    async def _wait_open(self, request_id: str) -> None:
        if self._open.is_set():
            return
        try:
            await asyncio.wait_for(self._open.wait(), timeout=self.pause_timeout_s)
        except asyncio.TimeoutError:
            state = "asleep" if self._sleeping else "paused"
            raise TimeoutError(
                f"request {request_id}: the rollout server stayed {state} for {self.pause_timeout_s}s "
                "(abort_all/pause_generation/sleep without resume/wake_up)"
            ) from None

    def _raise_if_failed(self) -> None:
        self._error = self._error or getattr(self, FAILURE_ATTR, None)
        if self._error is not None:
            raise RuntimeError(f"hf rollout server failed earlier: {self._error!r}") from self._error

    def _prepare_prompt(self, prompt_ids: Any, request_id: str) -> list[int]:
        if isinstance(prompt_ids, torch.Tensor):
            prompt_ids = prompt_ids.reshape(-1).tolist()
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError(f"request {request_id}: prompt_ids is empty")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"request {request_id}: prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})"
            )
        if len(prompt) > self.max_prompt_len:
            if self.prompt_truncation == "left":
                prompt = prompt[-self.max_prompt_len :]
            elif self.prompt_truncation == "right":
                prompt = prompt[: self.max_prompt_len]
            else:
                raise ValueError(
                    f"request {request_id}: prompt has {len(prompt)} tokens, more than rollout.prompt_length="
                    f"{self.max_prompt_len}; shorten it or set prompt_truncation to 'left' or 'right'"
                )
        return prompt

    def _mark_new_version(self, version: int) -> None:
        """Record, for every request still running or waiting, that its tokens from here on come from ``version``.
        Caller holds the lock (no step is running)."""
        for request in [*self._rows, *self._waiting]:
            if not request.future.done():
                self._version_marks.setdefault(request.request_id, []).append((len(request.token_ids), version))

    def _abort_in_flight(self) -> None:
        """Resolve every running and waiting request as aborted and drop the cache. Caller holds the lock."""
        for request in self._rows:
            request.resolve("aborted")
        while self._waiting:
            self._waiting.popleft().resolve("aborted")
        self._rows = []
        self._row_state = None
        self.batch.clear()

    async def _engine_loop(self) -> None:
        while True:
            if self._paused or self._held or self._sleeping or not (self._rows or self._waiting):
                self._wake.clear()
                await self._wake.wait()
                continue
            async with self._lock:
                if self._paused or self._held or self._sleeping:
                    continue
                while self._waiting and self._waiting[0].future.done():
                    self._waiting.popleft()  # the caller gave up before admission
                admit = self.policy.select(self._waiting, len(self._rows))
                self._interrupt.clear()
                try:
                    finished = await self._loop.run_in_executor(self._executor, self._step, admit)
                except Exception as exc:  # noqa: BLE001 - every waiter must learn about it
                    self._fail(exc, admit)
                    return
                for request in finished:
                    request.resolve()
            await asyncio.sleep(0)

    def _fail(self, exc: BaseException, admitted: list[Request]) -> None:
        logger.exception("hf rollout engine step failed; failing all in-flight requests")
        self._error = exc
        failed = {id(r): r for r in [*self._rows, *admitted, *self._waiting]}
        for request in failed.values():
            if not request.future.done():
                request.future.set_exception(
                    RuntimeError(f"request {request.request_id}: hf rollout engine step failed: {exc!r}")
                )
        self._rows, self._row_state = [], None
        self._waiting.clear()
        self.batch.clear()

    # -- runs on the worker thread

    def _step(self, admit: list[Request]) -> list[Request]:
        """Prefill ``admit``, decode all rows until one finishes (or the loop interrupts); return finished rows."""
        finished: list[Request] = []
        with torch.inference_mode():
            if self.graphs is not None:
                self.graphs.check(self.model)
            if admit:
                logits = self.batch.admit([r.prompt_ids for r in admit])
                first = len(self._rows)
                self._rows.extend(admit)
                self._row_state = None
                state = RowSamplingState([r.params for r in admit], self.device)
                tokens, log_probs = sample_next_tokens(logits, state, self.generator)
                self.batch.set_last_tokens(slice(first, None), tokens)
                self._record(admit, tokens, log_probs, finished)
                self._retire()
            for _ in range(self.max_steps_per_call):
                if not self._rows:
                    break
                if self._row_state is None:
                    self._row_state = RowSamplingState(
                        [r.params for r in self._rows], self.device, [len(r.token_ids) for r in self._rows]
                    )
                logits = self.batch.decode()
                tokens, log_probs = sample_next_tokens(logits, self._row_state, self.generator)
                self.batch.set_last_tokens(slice(None), tokens)
                self._record(self._rows, tokens, log_probs, finished)
                self._retire()
                if finished or self._interrupt.is_set():
                    break
        return finished

    @staticmethod
    def _record(rows: list[Request], tokens: torch.Tensor, log_probs: torch.Tensor | None, finished: list) -> None:
        token_list = tokens.tolist()
        lp_list = log_probs.tolist() if log_probs is not None else [None] * len(token_list)
        for request, token, lp in zip(rows, token_list, lp_list):
            if request.append(token, lp):
                finished.append(request)

    def _retire(self) -> None:
        alive = [r.stop_reason is None and not r.future.done() for r in self._rows]
        if not all(alive):
            order = self.batch.retire(alive)
            self._rows = [self._rows[i] for i in order]
            self._row_state = None


def _token_versions(start: int, marks: Iterable[tuple[int, int]], count: int) -> list[int]:
    """The weight version of each of ``count`` tokens: ``start``, then each mark's version from its token on."""
    versions = [start] * count
    for first, version in marks:
        versions[first:] = [version] * max(0, count - first)
    return versions
