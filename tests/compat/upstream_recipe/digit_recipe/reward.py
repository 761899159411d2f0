"""The recipe's reward: the share of answer characters that repeat the prompt's digit, position by position.

Returned as a dict, as verl reward functions may: ``score`` is the reward, the other keys travel with each sample
(``reward_extra_info``) into the generation dumps."""

from __future__ import annotations


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    hits = sum(1 for got, want in zip(solution_str, ground_truth) if got == want)
    return {"score": hits / len(ground_truth), "recipe_hits": hits}
