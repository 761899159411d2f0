"""AlgoConfig (group ``algorithm``): advantage estimation, in-reward KL and rollout correction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from verl.base_config import BaseConfig, ConfigError, check
from verl.workers.config.actor import check_kl_type

__all__ = [
    "RATIO_RS_OPTIONS",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    "AlgoConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "PFPPOConfig",
    "RolloutCorrectionConfig",
    "is_two_sided",
    "parse_is_threshold",
    "parse_rs_options",
    "parse_rs_thresholds",
]

T = TypeVar("T")

ROLLOUT_CORRECTION_LOSS_TYPES = ("ppo_clip", "reinforce")
PF_PPO_REWEIGHT_METHODS = ("pow", "max_min", "max_random")


@dataclass
class KLControlConfig(BaseConfig):
    """Coefficient of the in-reward KL penalty: ``fixed`` keeps ``kl_coef``; ``adaptive`` steers the measured KL
    towards ``target_kl`` over ``horizon`` samples."""

    type: str = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1

    def __post_init__(self) -> None:
        check(self.type in ("fixed", "adaptive"), "type", f"must be 'fixed' or 'adaptive', got {self.type!r}")
        check(self.kl_coef >= 0, "kl_coef", f"must be >= 0, got {self.kl_coef}")
        check(self.horizon >= 1, "horizon", f"must be >= 1, got {self.horizon}")
        check(self.target_kl > 0, "target_kl", f"must be > 0, got {self.target_kl}")


# verl's rollout_rs options (rollout_corr_helper): the k1 options band pi_rollout / pi_train, the k2/k3 options
# reject above an upper bound, per token or on each response's sum, mean or max
SUPPORTED_ROLLOUT_RS_OPTIONS: set[str] = {
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
}
TOKEN_LEVEL_ROLLOUT_RS_OPTIONS: set[str] = {"token_k1", "token_k2", "token_k3"}
# this package's rollout_rs options: a band on r = pi_train / pi_rollout per token, on the product or the geometric mean
RATIO_RS_OPTIONS: tuple[str, ...] = ("token", "sequence", "geometric")


def _positive(value: str | float, what: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {value!r} is not a number") from exc
    if not number > 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return number


def parse_is_threshold(spec: str | float) -> tuple[float, float | None]:
    """(upper, lower or None) from ``2.0`` / ``"2.0"`` (truncate) or ``"0.5_2.0"`` (IcePop band)."""
    if isinstance(spec, bool):
        raise TypeError("rollout_is_threshold must be a number or a 'lower_upper' string, not a boolean")
    if not isinstance(spec, int | float | str):
        raise TypeError(f"rollout_is_threshold must be a number or a 'lower_upper' string, got {spec!r}")
    text = str(spec).strip()
    if not text:
        raise ValueError("rollout_is_threshold must not be empty")
    if "_" not in text:
        return _positive(text, "rollout_is_threshold"), None
    lower_text, upper_text = text.split("_", 1)
    lower = _positive(lower_text, "rollout_is_threshold lower bound")
    upper = _positive(upper_text, "rollout_is_threshold upper bound")
    if lower > upper:
        raise ValueError(f"rollout_is_threshold={spec!r}: lower bound above upper bound")
    return upper, lower


def is_two_sided(option: str) -> bool:
    """Whether a ``rollout_rs`` option bands a ratio (``lower_upper``) rather than capping a divergence."""
    return option in RATIO_RS_OPTIONS or option.endswith("k1")


def parse_rs_options(rollout_rs: str) -> list[str]:
    """The options of a comma-separated ``rollout_rs`` (duplicates dropped), each verl's or this package's."""
    options = list(dict.fromkeys(part.strip() for part in rollout_rs.split(",") if part.strip()))
    if not options:
        raise ValueError("rollout_rs must name at least one option")
    known = SUPPORTED_ROLLOUT_RS_OPTIONS | set(RATIO_RS_OPTIONS)
    unknown = [option for option in options if option not in known]
    if unknown:
        raise ValueError(f"rollout_rs options {unknown} are unknown; expected some of {sorted(known)}")
    return options


def parse_rs_thresholds(options: list[str], spec: str | float | None) -> dict[str, tuple[float | None, float]]:
    """Per option ``(lower, upper)``: ratio bounds for the two-sided options (a lone number ``u`` is ``1/u_u``),
    ``(None, upper)`` for k2/k3. ``spec`` gives one threshold per option (comma-separated) or one for all."""
    if spec is None:
        raise ValueError("rollout_rs_threshold must be set when rollout_rs is")
    if isinstance(spec, bool) or not isinstance(spec, int | float | str):
        raise TypeError(f"rollout_rs_threshold must be a number or a string, got {spec!r}")
    parts = [part.strip() for part in str(spec).split(",") if part.strip()]
    if len(parts) == 1:
        parts = parts * len(options)
    if len(parts) != len(options):
        raise ValueError(
            f"rollout_rs_threshold={spec!r}: give one threshold for all of {options} or one per option, in order"
        )
    bounds: dict[str, tuple[float | None, float]] = {}
    for option, part in zip(options, parts, strict=True):
        what = f"rollout_rs_threshold for {option!r}"
        if not is_two_sided(option):
            if "_" in part:
                raise ValueError(f"{what} takes one upper bound, got {part!r}")
            bounds[option] = (None, _positive(part, what))
            continue
        if "_" in part:
            lower_text, upper_text = part.split("_", 1)
            lower, upper = _positive(lower_text, what), _positive(upper_text, what)
        else:
            upper = _positive(part, what)
            lower = 1.0 / upper
        if lower > upper:
            raise ValueError(f"{what}: lower bound above upper bound in {part!r}")
        bounds[option] = (lower, upper)
    return bounds


@dataclass
class RolloutCorrectionConfig(BaseConfig):
    """Importance-sampling correction for samples generated by a policy other than the one being trained.

    ``rollout_is`` weights (token or sequence level): ``rollout_is_threshold`` a number (or ``"2.0"``) truncates
    them at it, a ``"lower_upper"`` string (IcePop, verl's ``rollout_corr_helper``) zeroes them outside the band.
    ``rollout_rs`` rejects samples: this package's ``token``/``sequence``/``geometric`` band the ratio within
    ``[rollout_rs_threshold_lower, rollout_rs_threshold]`` (or a ``"lower_upper"`` threshold, which is read into
    those two keys; a lone number ``u`` bands ``[1/u, u]``); verl's options (``token_k1``, ``seq_mean_k3``, ...,
    comma-separated lists with one threshold per option or one for all) keep their threshold as written. The
    trainer applies verl's spellings as verl's trainer does, through ``rollout_corr_helper``.
    ``bypass_mode`` uses the rollout's own log-probs as the old policy and skips the actor's recomputation;
    ``loss_type`` is the bypass-mode loss (``ppo_clip`` or ``reinforce``).

    verl's presets are classmethods with verl's names, arguments and field values: ``decoupled_token_is()``,
    ``decoupled_seq_is()``, ``decoupled_token_icepop()``, ``decoupled_seq_is_rs()``, ``decoupled_geo_rs()``,
    ``decoupled_geo_rs_seq_tis()``, ``decoupled_geo_rs_token_tis()``, ``decoupled_k3_rs()``,
    ``decoupled_k3_rs_seq_tis()``, ``decoupled_k3_rs_token_tis()``, ``bypass_ppo_clip()``,
    ``bypass_ppo_clip_geo_rs()``, ``bypass_ppo_clip_k3_rs()``, ``bypass_pg_is()``, ``bypass_pg_token_icepop()``,
    ``bypass_pg_geo_rs()``, ``bypass_pg_geo_rs_seq_tis()``, ``bypass_pg_geo_rs_token_tis()`` and ``disabled()``.
    """

    rollout_is: str | None = None
    rollout_is_threshold: str | float = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: str | float | None = None
    rollout_rs_threshold_lower: float | None = None
    rollout_token_veto_threshold: float | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"

    def __post_init__(self) -> None:
        check(
            self.loss_type in ROLLOUT_CORRECTION_LOSS_TYPES,
            "loss_type",
            f"must be one of {list(ROLLOUT_CORRECTION_LOSS_TYPES)}, got {self.loss_type!r}",
        )
        check(
            self.rollout_is in (None, "token", "sequence"),
            "rollout_is",
            f"must be null, 'token' or 'sequence', got {self.rollout_is!r}",
        )
        _parsed("rollout_is_threshold", parse_is_threshold, self.rollout_is_threshold)
        options = [] if self.rollout_rs is None else _parsed("rollout_rs", parse_rs_options, self.rollout_rs)
        threshold, lower = self.rollout_rs_threshold, self.rollout_rs_threshold_lower
        if options:
            check(threshold is not None, "rollout_rs_threshold", f"must be set when rollout_rs={self.rollout_rs!r}")
        if threshold is None:
            return
        if len(options) > 1 or (options and not is_two_sided(options[0])):
            _parsed("rollout_rs_threshold", parse_rs_thresholds, options, threshold)
            check(
                lower is None,
                "rollout_rs_threshold_lower",
                f"applies to one two-sided rollout_rs option; with rollout_rs={self.rollout_rs!r} give the bands in "
                "rollout_rs_threshold ('lower_upper' per option)",
            )
            return
        option = options[0] if options else RATIO_RS_OPTIONS[0]
        band_lower, upper = _parsed("rollout_rs_threshold", parse_rs_thresholds, [option], threshold)[option]
        if isinstance(threshold, str) and "_" in threshold:
            check(lower is None, "rollout_rs_threshold_lower", f"is set twice: here and in {threshold!r}")
        if option not in RATIO_RS_OPTIONS and lower is None:
            return  # one of verl's k1 options: kept as verl spells it (rollout_corr_helper reads it)
        # a band of this package's options (or none yet), or a k1 upper bound with rollout_rs_threshold_lower:
        # stored as the two numbers the trainer's own correction reads
        object.__setattr__(self, "rollout_rs_threshold", upper)
        object.__setattr__(self, "rollout_rs_threshold_lower", band_lower if lower is None else lower)

    @property
    def enabled(self) -> bool:
        return self.rollout_is is not None or self.rollout_rs is not None or self.bypass_mode

    # verl's presets (verl 0.9.1 ``RolloutCorrectionConfig``). "decoupled": the trainer recomputes the old
    # log-probs and weights the gap to the rollout; "bypass": the rollout's log-probs are the old policy.
    # Geo-RS is verl's seq_mean_k1 (the geometric mean of pi_rollout / pi_train), K3-RS its seq_mean_k3.
    @classmethod
    def decoupled_token_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Token-level truncated importance sampling (Token-TIS)."""
        return cls(rollout_is="token", rollout_is_threshold=threshold, rollout_rs=None)

    @classmethod
    def decoupled_seq_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Sequence-level truncated importance sampling (Seq-TIS)."""
        return cls(rollout_is="sequence", rollout_is_threshold=threshold, rollout_rs=None)

    @classmethod
    def decoupled_token_icepop(cls, threshold: float = 5.0, threshold_lower: float = 0.5) -> RolloutCorrectionConfig:
        """Token-level IcePop: token weights outside ``[threshold_lower, threshold]`` become zero."""
        return cls(rollout_is="token", rollout_is_threshold=f"{threshold_lower}_{threshold}", rollout_rs=None)

    @classmethod
    def decoupled_seq_is_rs(
        cls, is_threshold: float = 2.0, rs_threshold: str | float | None = "0.5_2.0"
    ) -> RolloutCorrectionConfig:
        """Seq-TIS with sequence-level rejection (``seq_sum_k1``) (Seq-MIS)."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_sum_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_geo_rs(cls, rs_threshold: str | float | None = "0.999_1.001") -> RolloutCorrectionConfig:
        """Geo-RS: reject responses whose geometric-mean ratio leaves the band; no weights."""
        return cls(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold=rs_threshold)

    @classmethod
    def bypass_ppo_clip(cls) -> RolloutCorrectionConfig:
        """Bypass mode, PPO-clip loss on pi / pi_rollout (the clip bounds the step; no weights)."""
        return cls(rollout_is=None, rollout_rs=None, bypass_mode=True, loss_type="ppo_clip")

    @classmethod
    def bypass_ppo_clip_geo_rs(cls, rs_threshold: str | float | None = "0.999_1.001") -> RolloutCorrectionConfig:
        """Bypass mode, PPO-clip loss and Geo-RS."""
        return cls(
            rollout_is=None,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="ppo_clip",
        )

    @classmethod
    def bypass_ppo_clip_k3_rs(cls, rs_threshold: float = 0.01) -> RolloutCorrectionConfig:
        """Bypass mode, PPO-clip loss and K3-RS (rejects responses whose mean k3 exceeds ``rs_threshold``)."""
        return cls(
            rollout_is=None,
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="ppo_clip",
        )

    @classmethod
    def bypass_pg_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Bypass mode, REINFORCE loss with Seq-TIS weights."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=threshold,
            rollout_rs=None,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_token_icepop(cls, threshold: float = 5.0, threshold_lower: float = 0.5) -> RolloutCorrectionConfig:
        """Bypass mode, REINFORCE loss with token-level IcePop weights."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=f"{threshold_lower}_{threshold}",
            rollout_rs=None,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_geo_rs(cls, rs_threshold: str | float | None = "0.999_1.001") -> RolloutCorrectionConfig:
        """Bypass mode, REINFORCE loss and Geo-RS; no weights."""
        return cls(
            rollout_is=None,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def decoupled_geo_rs_seq_tis(
        cls, is_threshold: float = 2.0, rs_threshold: str | float | None = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Geo-RS with Seq-TIS weights."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_geo_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: str | float | None = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Geo-RS with Token-TIS weights."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def bypass_pg_geo_rs_seq_tis(
        cls, is_threshold: float = 2.0, rs_threshold: str | float | None = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass mode, REINFORCE loss, Geo-RS and Seq-TIS weights."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_geo_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: str | float | None = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass mode, REINFORCE loss, Geo-RS and Token-TIS weights."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def decoupled_k3_rs(cls, rs_threshold: float = 0.01) -> RolloutCorrectionConfig:
        """K3-RS: reject responses whose mean k3 (r - 1 - log r) exceeds ``rs_threshold``; no weights."""
        return cls(rollout_is=None, rollout_rs="seq_mean_k3", rollout_rs_threshold=rs_threshold)

    @classmethod
    def decoupled_k3_rs_seq_tis(cls, is_threshold: float = 2.0, rs_threshold: float = 0.01) -> RolloutCorrectionConfig:
        """K3-RS with Seq-TIS weights."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_k3_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: float = 0.01
    ) -> RolloutCorrectionConfig:
        """K3-RS with Token-TIS weights."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def disabled(cls) -> RolloutCorrectionConfig:
        """No correction: the mismatch metrics only."""
        return cls(rollout_is=None, rollout_rs=None)


def _parsed(key: str, parse: Callable[..., T], *args: Any) -> T:
    """``parse(*args)``, its ValueError or TypeError as a :class:`ConfigError` naming ``key``."""
    try:
        return parse(*args)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc), key=key) from None


@dataclass
class PFPPOConfig(BaseConfig):
    """PF-PPO resampling (``algorithm.use_pf_ppo``): rows are redrawn with weights from their scores."""

    reweight_method: str = "pow"
    weight_pow: float = 2.0

    def __post_init__(self) -> None:
        check(
            self.reweight_method in PF_PPO_REWEIGHT_METHODS,
            "reweight_method",
            f"must be one of {list(PF_PPO_REWEIGHT_METHODS)}, got {self.reweight_method!r}",
        )


@dataclass
class FilterGroupsConfig(BaseConfig):
    """verl's dynamic sampling (DAPO's filtering of groups whose rewards all agree;
    ``verl.trainer.ppo.dynamic_sampling``). ``max_inflight_gen_batches`` has no effect (``inert_keys.py``)."""

    enable: bool = False
    metric: str | None = "reward"
    max_num_gen_batches: int = 0
    max_inflight_gen_batches: int = 1


@dataclass
class AlgoConfig(BaseConfig):
    """Advantage estimator and reward shaping. ``adv_estimator`` names a registered estimator (gae, grpo, rloo,
    reinforce_plus_plus, remax, gdpo, ...); it is checked against the registry when the trainer starts.
    ``use_pf_ppo`` resamples the batch as ``pf_ppo`` says; ``gdpo_reward_keys``/``gdpo_reward_weights`` name the
    reward components of the gdpo estimator. ``filter_groups`` turns on dynamic sampling."""

    gamma: float = 1.0
    lam: float = 1.0
    # null: the recipe computes its own advantages (its fit never calls compute_advantage, which then names this key)
    adv_estimator: str | None = "gae"
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    gdpo_reward_keys: list[str] | None = None
    gdpo_reward_weights: list[float] | None = None

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "gamma", f"must be in [0, 1], got {self.gamma}")
        check(0.0 <= self.lam <= 1.0, "lam", f"must be in [0, 1], got {self.lam}")
        check(self.adv_estimator is None or bool(self.adv_estimator), "adv_estimator", "must name an estimator")
        check_kl_type("kl_penalty", self.kl_penalty)
        keys, weights = self.gdpo_reward_keys, self.gdpo_reward_weights
        check(
            weights is None or (keys is not None and len(weights) == len(keys)),
            "gdpo_reward_weights",
            f"needs one weight per entry of gdpo_reward_keys ({keys}), got {weights}",
        )
