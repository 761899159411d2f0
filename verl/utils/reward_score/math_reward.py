"""verl 0.6+'s name for the MATH checker (``math_reward``): the same functions as :mod:`.math`, which keeps the
name older releases used. ``compute_score`` gives 1.0 when the last ``\\boxed{}`` equals the ground truth."""

from verl.utils.reward_score.math import (
    compute_score,
    is_equiv,
    last_boxed_only_string,
    normalize_answer,
    remove_boxed,
    strip_string,
)

__all__ = ["compute_score", "is_equiv", "last_boxed_only_string", "normalize_answer", "remove_boxed", "strip_string"]
