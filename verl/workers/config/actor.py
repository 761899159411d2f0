"""ActorConfig / FSDPActorConfig (groups ``actor`` and ``ref``), with PolicyLossConfig and CheckpointConfig.

Batch-size units follow verl: ``ppo_mini_batch_size`` counts prompts (each expands to ``rollout_n`` samples),
``*_micro_batch_size_per_gpu`` counts samples per process. The worker normalises ``ppo_mini_batch_size`` to samples
per rank once it knows the data-parallel size; that is why the batch sizes are the mutable fields here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
from verl.utils.checkpoint.config import CHECKPOINT_CONTENTS, CheckpointConfig
from verl.workers.config.engine import FSDPEngineConfig, check_strategy
from verl.workers.config.engine_common import RouterReplayConfig
from verl.workers.config.inert_blocks import inert_block
from verl.workers.config.model import RUNTIME_FIELD
from verl.workers.config.optimizer import OptimizerConfig

__all__ = [
    "CHECKPOINT_CONTENTS",
    "KL_LOSS_TYPES",
    "LOSS_AGG_MODES",
    "ActorConfig",
    "CheckpointConfig",
    "FSDPActorConfig",
    "PolicyLossConfig",
    "RouterReplayConfig",
]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# "k1+"-style names (a trailing "+") ask for the straight-through estimator of the same penalty.
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


def check_kl_type(key: str, value: str) -> None:
    """Shared by ``actor.kl_loss_type`` and ``algorithm.kl_penalty``."""
    check(
        value.rstrip("+") in KL_LOSS_TYPES,
        key,
        f"must be one of {list(KL_LOSS_TYPES)} (optionally with a trailing '+'), got {value!r}",
    )


def check_loss_agg_mode(key: str, value: str) -> None:
    check(value in LOSS_AGG_MODES, key, f"must be one of {list(LOSS_AGG_MODES)}, got {value!r}")


@dataclass
class PolicyLossConfig(BaseConfig):
    """Which registered policy loss to use (``loss_mode``) and the knobs of the losses that need extra ones."""

    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: float | None = None  # strength of the DRO loss's quadratic log-ratio penalty (loss_mode=dro)
    # the rollout-correction settings loss_mode=bypass_mode applies (the trainer copies algorithm.rollout_correction)
    rollout_correction: dict | None = None

    def __post_init__(self) -> None:
        check(bool(self.loss_mode), "loss_mode", "must name a registered policy loss")


@dataclass
class ActorConfig(BaseConfig):
    """The policy's training knobs, independent of the parallel backend.

    ``clip_ratio_low`` / ``clip_ratio_high`` default to ``clip_ratio`` (asymmetric clipping when set, as in DAPO);
    ``clip_ratio_c`` is the dual-clip bound for negative advantages and must exceed 1.
    ``ppo_micro_batch_size_per_gpu=None`` means one micro-batch per mini-batch (no gradient accumulation);
    ``log_prob_micro_batch_size_per_gpu=None`` means the whole per-rank batch in one forward pass.
    ``skip_on_policy_log_prob``: when the update is on-policy (one epoch over one mini-batch), the trainer skips the
    separate old log-prob pass, because the update's own forward gives the same values (the PPO ratio is 1), and
    applies ``rollout_is`` weights from that forward too; the pass still runs when something else reads
    ``old_log_probs`` first (KL in the reward; rollout rejection, token veto or batch-normalised weights).
    ``use_torch_compile`` runs the per-chunk log-prob and entropy kernels through ``torch.compile`` (dynamic shapes;
    compiled once per process on first use).
    ``log_prob_micro_batch_size`` is verl's deprecated size over all processes; composing the config turns it into
    ``log_prob_micro_batch_size_per_gpu``. ``tau_pos``/``tau_neg`` are the gate temperatures of ``loss_mode=sapo``;
    ``loss_scale_factor`` divides the summed loss by a constant instead of the token count.
    The fields after ``rollout_n`` are verl's keys without effect here (``inert_keys.py`` says why for each), except
    the run-time objects verl's workers attach: ``model_config`` and ``global_batch_info`` (None: the update loop
    supplies each micro-batch's counts to the loss). ``engine`` is the backend block (e.g. ``fsdp_config``).
    """

    _mutable_fields = frozenset(
        {
            "ppo_mini_batch_size",
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "log_prob_micro_batch_size_per_gpu",
            "ppo_infer_micro_batch_size_per_gpu",
            "engine",
            "model_config",
        }
    )

    strategy: str = "fsdp"
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size: int | None = None  # deprecated global size; prefer ppo_micro_batch_size_per_gpu
    ppo_micro_batch_size_per_gpu: int | None = 8
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    shuffle: bool = False
    data_loader_seed: int | None = 42
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    use_torch_compile: bool = False
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log_prob_micro_batch_size_per_gpu: int | None = 16
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    skip_on_policy_log_prob: bool = True
    rollout_n: int = 1
    log_prob_micro_batch_size: int | None = None
    loss_scale_factor: float | None = None
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    freeze_vision_tower: bool = False
    calculate_entropy: bool = False
    calculate_sum_pi_squared: bool = False
    use_prefix_grouper: bool = False
    use_fused_kernels: bool = False
    use_remove_padding: bool = False
    profiler: dict[str, Any] = field(default_factory=lambda: inert_block("profiler"))
    ppo_infer_micro_batch_size_per_gpu: int | None = None
    ppo_infer_max_token_len_per_gpu: int = 16384
    use_rollout_log_probs: bool = False
    qat: dict[str, Any] = field(default_factory=lambda: inert_block("qat"))
    # Any: a round trip through to_dict() hands it back as a plain dict
    model_config: Any = field(default=None, compare=False, repr=False, metadata=RUNTIME_FIELD)
    global_batch_info: dict[str, Any] | None = field(default=None, compare=False, metadata=RUNTIME_FIELD)

    def __post_init__(self) -> None:
        # verl's name of the backend block (fsdp_config, megatron, ...), which each subclass sets: an attribute, not
        # a field, so that neither the YAML nor to_dict() repeats the block
        object.__setattr__(self, "engine", None)
        check(bool(self.strategy), "strategy", "must not be empty")
        check(self.ppo_mini_batch_size >= 1, "ppo_mini_batch_size", f"must be >= 1, got {self.ppo_mini_batch_size}")
        check(
            self.ppo_micro_batch_size is None or self.ppo_micro_batch_size_per_gpu is None,
            "ppo_micro_batch_size",
            "set only one of ppo_micro_batch_size (deprecated) and ppo_micro_batch_size_per_gpu",
        )
        for key in (
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "log_prob_micro_batch_size_per_gpu",
            "log_prob_micro_batch_size",
            "ppo_infer_micro_batch_size_per_gpu",
        ):
            value = getattr(self, key)
            check(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        check(
            self.loss_scale_factor is None or self.loss_scale_factor > 0,
            "loss_scale_factor",
            f"must be > 0 or null, got {self.loss_scale_factor}",
        )
        for key in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu", "ppo_infer_max_token_len_per_gpu"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check(self.ppo_epochs >= 1, "ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        check(self.clip_ratio > 0, "clip_ratio", f"must be > 0, got {self.clip_ratio}")
        low = self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low
        high = self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high
        object.__setattr__(self, "clip_ratio_low", low)
        object.__setattr__(self, "clip_ratio_high", high)
        check(low >= 0, "clip_ratio_low", f"must be >= 0, got {low}")
        check(high >= 0, "clip_ratio_high", f"must be >= 0, got {high}")
        check(
            self.clip_ratio_c > 1.0,
            "clip_ratio_c",
            f"must be > 1 (dual-clip bound on the ratio for negative advantages), got {self.clip_ratio_c}",
        )
        check_loss_agg_mode("loss_agg_mode", self.loss_agg_mode)
        check_kl_type("kl_loss_type", self.kl_loss_type)
        check(self.kl_loss_coef >= 0, "kl_loss_coef", f"must be >= 0, got {self.kl_loss_coef}")
        check(self.grad_clip > 0, "grad_clip", f"must be > 0, got {self.grad_clip}")
        check(self.rollout_n >= 1, "rollout_n", f"must be >= 1, got {self.rollout_n}")

    # -- derived sizes (pure; the batch plan and the workers share them) ------------------------------------------
    def mini_batch_samples(self) -> int:
        """Samples in one mini-batch over all ranks: ``ppo_mini_batch_size * rollout_n``."""
        return self.ppo_mini_batch_size * self.rollout_n

    def micro_batch_size_per_gpu(self, world_size: int) -> int | None:
        """Per-rank micro-batch size, translating the deprecated global ``ppo_micro_batch_size`` if used."""
        if self.ppo_micro_batch_size is not None:
            return max(1, self.ppo_micro_batch_size // world_size)
        return self.ppo_micro_batch_size_per_gpu


@dataclass
class FSDPActorConfig(ActorConfig):
    """ActorConfig for the FSDP/FSDP2 backend: adds sharding, offload and sequence-parallel knobs.

    ``entropy_checkpointing`` recomputes the entropy in backward when it is trained (``entropy_coeff != 0``)
    instead of storing what its forward saved: with verl's entropy kernel that is only 3 numbers per token.
    """

    strategy: str = "fsdp"
    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    entropy_from_logits_chunk_size: int = 2048
    pad_to_length: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_strategy("strategy", self.strategy)
        object.__setattr__(self, "engine", self.fsdp_config)
        check(
            self.ulysses_sequence_parallel_size >= 1,
            "ulysses_sequence_parallel_size",
            f"must be >= 1, got {self.ulysses_sequence_parallel_size}",
        )
