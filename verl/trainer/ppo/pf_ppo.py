"""PF-PPO (policy filtration): resample a batch towards the responses whose reward is most trustworthy.

A learned reward model is most reliable at the extremes of its range, so PF-PPO trains on a batch
resampled (with replacement, same size) with weights that favour those responses
(``algorithm.pf_ppo.reweight_method``):

- ``pow``: |score| ** ``weight_pow``
- ``max_min``: only the highest- and lowest-scoring responses
- ``max_random``: the highest-scoring ones four times as likely as the others
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["REWEIGHT_METHODS", "compute_pf_ppo_reweight_data"]

REWEIGHT_METHODS = ("pow", "max_min", "max_random")


@torch.no_grad()
def _sampling_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    if reweight_method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif reweight_method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).to(scores.dtype)
    elif reweight_method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1).to(scores.dtype)
    else:
        raise ValueError(
            f"Unknown algorithm.pf_ppo.reweight_method {reweight_method!r}; valid: {list(REWEIGHT_METHODS)}"
        )
    return (weights + 1e-8).clamp(min=1e-8)  # every row keeps a (tiny) chance; all-zero weights stay valid


def compute_pf_ppo_reweight_data(data: Any, reweight_method: str = "pow", weight_pow: float = 2.0) -> Any:
    """A DataProto of the same size, rows drawn with replacement by their sequence score's weight.

    Scores are ``token_level_scores`` summed per row. Tensors and non-tensor columns follow the
    drawn rows; ``meta_info`` lists with one entry per row are resampled too, other entries are kept.
    """
    if "token_level_scores" not in data.batch.keys():
        raise KeyError(
            "compute_pf_ppo_reweight_data needs data.batch['token_level_scores']; present keys: "
            f"{sorted(data.batch.keys())}"
        )
    scores = data.batch["token_level_scores"].sum(dim=-1)
    weights = _sampling_weights(scores, reweight_method, weight_pow)
    rows = torch.multinomial(weights.float().cpu(), len(scores), replacement=True)
    resampled = data.select_idxs(rows)
    picked = rows.tolist()
    resampled.meta_info = {
        key: [value[i] for i in picked] if isinstance(value, list) and len(value) == len(picked) else value
        for key, value in data.meta_info.items()
    }
    return resampled
