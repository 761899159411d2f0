"""RolloutConfig (group ``rollout``) with SamplingConfig, MultiTurnConfig, AgentLoopConfig, CheckpointEngineConfig.

``nnodes == 0`` means the rollout shares the actor's processes (colocated hybrid engine); ``nnodes > 0`` gives it a
resource pool of its own with ``n_gpus_per_node`` processes per node (standalone, as the async recipes use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.workers.config.inert_blocks import inert_block

__all__ = [
    "CHECKPOINT_ENGINE_BACKENDS",
    "ROLLOUT_DTYPES",
    "AgentLoopConfig",
    "CheckpointEngineConfig",
    "CustomAsyncServerConfig",
    "MultiTurnConfig",
    "PrometheusConfig",
    "RolloutConfig",
    "SamplingConfig",
    "ServerConfig",
    "TraceConfig",
]

CHECKPOINT_ENGINE_BACKENDS = ("naive", "ray", "collective")
# "auto": bfloat16 on CUDA, float32 on CPU (CPU bf16 matmuls are slow and change results).
ROLLOUT_DTYPES = ("auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16")


def _check_sampling(temperature: float, top_k: int, top_p: float, n: int) -> None:
    check(temperature >= 0, "temperature", f"must be >= 0, got {temperature}")
    check(top_k == -1 or top_k >= 1, "top_k", f"must be -1 (off) or >= 1, got {top_k}")
    check(0 < top_p <= 1, "top_p", f"must be in (0, 1], got {top_p}")
    check(n >= 1, "n", f"must be >= 1, got {n}")


@dataclass
class SamplingConfig(BaseConfig):
    """Sampling parameters used for validation (``rollout.val_kwargs``); greedy by default. ``max_in_flight``
    bounds the validation trajectories in flight at once (null: ``data.train_batch_size x rollout.n``)."""

    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    n: int = 1
    do_sample: bool = False
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        _check_sampling(self.temperature, self.top_k, self.top_p, self.n)
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError(f"rollout.val_kwargs.max_in_flight must be >= 1 or null, got {self.max_in_flight}")


@dataclass
class MultiTurnConfig(BaseConfig):
    """Tool-calling / multi-turn agent loop settings. ``None`` turn limits mean "up to the response length".

    ``tokenization_sanity_check_mode`` compares every tool/user turn the loop appends with the chat template's
    rendering of the whole conversation, because a policy trained on sequences that differ from what inference feeds
    it is trained off its own distribution: ``strict`` warns on any difference, ``ignore_strippable`` only on more
    than whitespace, ``disable`` skips the check. It never changes the trajectory.

    ``use_inference_chat_template``: ``false`` (default) builds the trajectory by appending tokens, every model turn
    kept as generated (the training view). ``true`` prompts each later model turn with the chat template's rendering
    of the conversation, as an inference server would (templates may rewrite earlier turns, e.g. drop their
    reasoning); where that rendering differs from the tokens so far, the trajectory takes the rendering from the
    first difference on with mask 0, so trained tokens were always sampled after exactly the tokens before them.
    It needs the samples' chat messages (``data.return_raw_chat``).
    """

    enable: bool = False
    max_assistant_turns: int | None = None
    max_user_turns: int | None = None
    max_parallel_calls: int = 1
    max_tool_response_length: int = 256
    tool_response_truncate_side: str = "middle"
    tool_config_path: str | None = None
    function_tool_path: str | None = None  # a .py file whose @function_tool functions are tools too
    interaction_config_path: str | None = None
    use_inference_chat_template: bool = False
    tokenization_sanity_check_mode: str = "strict"
    format: str = "hermes"
    num_repeat_rollouts: int | None = None

    def __post_init__(self) -> None:
        for key in ("max_assistant_turns", "max_user_turns"):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(self.max_parallel_calls >= 1, "max_parallel_calls", f"must be >= 1, got {self.max_parallel_calls}")
        check(
            self.tool_response_truncate_side in ("left", "right", "middle"),
            "tool_response_truncate_side",
            f"must be left, right or middle, got {self.tool_response_truncate_side!r}",
        )
        check(
            self.tokenization_sanity_check_mode in ("strict", "ignore_strippable", "disable"),
            "tokenization_sanity_check_mode",
            f"must be strict, ignore_strippable or disable, got {self.tokenization_sanity_check_mode!r}",
        )


@dataclass
class CustomAsyncServerConfig(BaseConfig):
    """A user-provided rollout server class: ``path`` to a .py file or module, ``name`` of the class."""

    path: str | None = None
    name: str | None = None


@dataclass
class AgentLoopConfig(BaseConfig):
    """How many agent-loop workers drive the rollout servers and which loop a sample uses by default."""

    num_workers: int = 2
    default_agent_loop: str = "single_turn_agent"
    agent_loop_config_path: str | None = None
    agent_loop_manager_class: str | None = None
    custom_async_server: CustomAsyncServerConfig = field(default_factory=CustomAsyncServerConfig)

    def __post_init__(self) -> None:
        check(self.num_workers >= 1, "num_workers", f"must be >= 1, got {self.num_workers}")


@dataclass
class TraceConfig(BaseConfig):
    """verl's rollout tracing (``backend`` weave or mlflow, at most ``max_samples_per_step_per_worker`` per step,
    ``token2text`` decoding). Not implemented here: ``rollout.trace`` has no effect."""

    project_name: str | None = None
    experiment_name: str | None = None
    backend: str | None = None
    token2text: bool = False
    max_samples_per_step_per_worker: int | None = None

    def __post_init__(self) -> None:
        value = self.max_samples_per_step_per_worker
        check(value is None or value >= 0, "max_samples_per_step_per_worker", f"must be >= 0 or null, got {value}")


@dataclass
class ServerConfig(BaseConfig):
    """verl's HTTP client settings for a rollout engine run as a server (timeouts, retries, connections). The
    rollout servers here are called in process through Ray, so these have no effect."""

    timeout: float = 60.0
    max_attempts: int = 3
    retry_delay: float = 2.0
    max_connections: int = 1000
    max_start_wait_time: float = 300.0


@dataclass
class PrometheusConfig(BaseConfig):
    """verl's Prometheus export of the rollout servers' metrics. Not implemented here: ``rollout.prometheus`` has
    no effect."""

    enable: bool = False
    port: int = 9090
    file: str = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    served_model_name: str | None = None


@dataclass
class CheckpointEngineConfig(BaseConfig):
    """Trainer -> rollout weight transfer: ``naive`` (same process), ``ray`` (object store), ``collective``.

    ``update_weights_bucket_megabytes`` (verl's name of ``bucket_megabytes``, whose YAML key is translated) reads
    ``bucket_megabytes``. ``engine_kwargs`` has no effect, and a ``custom_backend_module`` is refused (the backends
    are the three above)."""

    backend: str = "naive"
    bucket_megabytes: int = 512
    timeout_s: float = 600.0
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    custom_backend_module: str | None = None

    @property
    def update_weights_bucket_megabytes(self) -> int:
        return self.bucket_megabytes

    def __post_init__(self) -> None:
        check(
            self.backend in CHECKPOINT_ENGINE_BACKENDS,
            "backend",
            f"must be one of {list(CHECKPOINT_ENGINE_BACKENDS)}, got {self.backend!r}",
        )
        check(self.bucket_megabytes >= 1, "bucket_megabytes", f"must be >= 1, got {self.bucket_megabytes}")
        check(self.timeout_s > 0, "timeout_s", f"must be > 0, got {self.timeout_s}")
        check(
            self.custom_backend_module is None,
            "custom_backend_module",
            f"({self.custom_backend_module!r}) cannot be loaded: weight transfer uses one of the built-in backends "
            f"{list(CHECKPOINT_ENGINE_BACKENDS)} (rollout.checkpoint_engine.backend)",
        )


@dataclass
class RolloutConfig(BaseConfig):
    """The generation engine and its sampling parameters.

    ``name`` picks the engine (``hf`` embedded default, ``vllm``, ``sglang``); ``prompt_length`` and
    ``response_length`` default to the data group's limits through interpolation in the YAML. ``seed`` gives row
    ``i`` of step ``k`` its own sampling seed derived from (seed, k, i), so a run draws the same responses however
    its requests share engine batches; ``None`` takes ``trainer.seed``, so sampling is seeded by default.
    ``data_parallel_size`` is vLLM's ``data_parallel_size`` / SGLang's ``dp_size``: engine copies inside one replica,
    which then spans ``tensor_model_parallel_size x data_parallel_size`` GPUs (the ``hf`` engine refuses values > 1).
    The fields after ``checkpoint_engine`` are verl's engine keys without effect here (``inert_keys.py`` says why for
    each; engine arguments that vLLM or SGLang should see go in ``engine_kwargs.vllm`` / ``engine_kwargs.sglang``),
    but for these:

    - ``log_prob_*``: verl keeps the old-log-prob batch keys here; this build computes old log-probs in the actor,
      whose ``actor.log_prob_*`` keys decide. The packaged YAML has these read them back, and
      ``actor.log_prob_micro_batch_size`` (the deprecated size over all processes) follows
      ``rollout.log_prob_micro_batch_size`` when that is set.
    - ``custom``: free-form settings for a recipe's own rollout code; nothing here reads them.
    - ``repetition_penalty``: only 1.0 (none) is accepted; the rollout's requests carry no penalty.
    """

    name: str = "hf"
    mode: str = "async"
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    n: int = 1
    prompt_length: int = 512
    response_length: int = 512
    # a prompt longer than prompt_length: "error" names the request, "left"/"right" drop tokens from that side
    prompt_truncation: str = "error"
    dtype: str = "auto"
    gpu_memory_utilization: float = 0.5
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    enforce_eager: bool = False
    calculate_log_probs: bool = False
    ignore_eos: bool = False
    free_cache_engine: bool = True
    tensor_model_parallel_size: int = 1
    data_parallel_size: int = 1
    nnodes: int = 0
    n_gpus_per_node: int = 1
    # fully-async recipe: prompts the rollouter generates in total (None: the dataloader's epochs)
    total_rollout_steps: int | None = None
    # per-request sampling seeds (row i of step k uses a seed derived from seed, k and i); None: trainer.seed
    seed: int | None = None
    update_weights_bucket_megabytes: int = 512
    engine_kwargs: dict[str, Any] = field(default_factory=lambda: {"vllm": {}, "sglang": {}, "trtllm": {}})
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    full_determinism: bool = False
    cudagraph_capture_sizes: list[int] | None = None
    expert_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    logprobs_mode: str = "processed_logprobs"
    scheduling_policy: str = "fcfs"
    load_format: str = "dummy"
    layered_summon: bool = False
    disable_log_stats: bool = True
    over_sample_rate: float = 0.0
    multi_stage_wake_up: bool = False
    router_config_path: str | None = None
    skip_tokenizer_init: bool = True
    enable_rollout_routing_replay: bool = False
    moe_load_balance_metrics_interval: int = 0
    quantization: str | None = None
    quantization_config_file: str | None = None
    mtp: Any = None
    qat: Any = None
    profiler: dict[str, Any] = field(default_factory=lambda: inert_block("profiler"))
    trace: dict[str, Any] = field(default_factory=lambda: inert_block("trace"))
    prometheus: dict[str, Any] = field(default_factory=lambda: inert_block("prometheus"))
    disaggregation: dict[str, Any] = field(default_factory=lambda: inert_block("disaggregation"))
    log_prob_micro_batch_size: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    custom: dict[str, Any] | None = None
    repetition_penalty: float = 1.0
    standalone_gpu_memory_utilization: float | None = None
    moe_tensor_parallel_size: int = 1
    server: ServerConfig = field(default_factory=ServerConfig)
    checkpoint_manager_class: str | None = None
    layer_name_map: dict[str, Any] = field(default_factory=dict)
    sglang_engine_mode: str = "local"
    limit_images: int | None = None
    enable_sleep_mode: bool = True

    def __post_init__(self) -> None:
        check(bool(self.name), "name", "must name a rollout engine (hf, vllm, sglang)")
        check(self.mode in ("async", "sync"), "mode", f"must be 'async' (or legacy 'sync'), got {self.mode!r}")
        _check_sampling(self.temperature, self.top_k, self.top_p, self.n)
        check(self.prompt_length >= 1, "prompt_length", f"must be >= 1, got {self.prompt_length}")
        check(self.response_length >= 1, "response_length", f"must be >= 1, got {self.response_length}")
        check(
            self.prompt_truncation in ("error", "left", "right"),
            "prompt_truncation",
            f"must be error, left or right, got {self.prompt_truncation!r}",
        )
        check(self.dtype in ROLLOUT_DTYPES, "dtype", f"must be one of {list(ROLLOUT_DTYPES)}, got {self.dtype!r}")
        check(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            f"must be in (0, 1], got {self.gpu_memory_utilization}",
        )
        check(self.max_num_seqs >= 1, "max_num_seqs", f"must be >= 1, got {self.max_num_seqs}")
        check(
            self.max_num_batched_tokens >= 1,
            "max_num_batched_tokens",
            f"must be >= 1, got {self.max_num_batched_tokens}",
        )
        check(
            self.max_model_len is None or self.max_model_len >= self.prompt_length + 1,
            "max_model_len",
            f"must exceed prompt_length ({self.prompt_length}), got {self.max_model_len}",
        )
        check(
            self.tensor_model_parallel_size >= 1,
            "tensor_model_parallel_size",
            f"must be >= 1, got {self.tensor_model_parallel_size}",
        )
        check(self.data_parallel_size >= 1, "data_parallel_size", f"must be >= 1, got {self.data_parallel_size}")
        check(
            self.data_parallel_size == 1 or self.name != "hf" or bool(self.agent.custom_async_server.path),
            "data_parallel_size",
            f"is {self.data_parallel_size}, but the hf engine serves one model copy per rollout process and has no "
            "data parallelism: keep it at 1 and get more replicas from more rollout processes "
            "(trainer.n_gpus_per_node / trainer.nnodes when colocated, rollout.n_gpus_per_node / rollout.nnodes "
            "when standalone), or use rollout.name=vllm|sglang",
        )
        check(self.nnodes >= 0, "nnodes", f"must be >= 0 (0 = share the actor's processes), got {self.nnodes}")
        check(self.n_gpus_per_node >= 1, "n_gpus_per_node", f"must be >= 1, got {self.n_gpus_per_node}")
        for key in ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(
            self.log_prob_max_token_len_per_gpu >= 1,
            "log_prob_max_token_len_per_gpu",
            f"must be >= 1, got {self.log_prob_max_token_len_per_gpu}",
        )
        check(
            self.repetition_penalty == 1.0,
            "repetition_penalty",
            f"is {self.repetition_penalty}, but the rollout's requests carry no repetition penalty here (only 1.0)",
        )
        check(
            self.update_weights_bucket_megabytes >= 1,
            "update_weights_bucket_megabytes",
            f"must be >= 1, got {self.update_weights_bucket_megabytes}",
        )

    @property
    def standalone(self) -> bool:
        """True when the rollout has its own resource pool (``nnodes > 0``)."""
        return self.nnodes > 0

    @property
    def max_total_length(self) -> int:
        """Longest sequence a rollout produces: prompt plus response (or ``max_model_len`` when set)."""
        return self.max_model_len or self.prompt_length + self.response_length
