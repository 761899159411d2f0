"""verl.utils.logger (rank-aware logging), verl.utils.logging_utils and verl.utils.debug.metrics."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from verl.protocol import DataProto
from verl.utils.debug.metrics import calculate_debug_metrics, calculate_token_list_diff
from verl.utils.logger import DecoratorLoggerBase, LocalLogger, log_with_rank, print_with_rank
from verl.utils.logging_utils import configure_verl_logging


def test_log_with_rank_prefixes_and_filters(caplog):
    logger = logging.getLogger("test.rank")
    with caplog.at_level(logging.INFO, logger="test.rank"):
        log_with_rank("hello", rank=3, logger=logger)
        log_with_rank("hidden", rank=3, logger=logger, log_only_rank_0=True)
        log_with_rank("shown", rank=0, logger=logger, log_only_rank_0=True)
    assert [r.getMessage() for r in caplog.records] == ["[Rank 3] hello", "[Rank 0] shown"]


def test_print_helpers(capsys):
    print_with_rank("x", rank=2)
    print_with_rank("y", rank=2, log_only_rank_0=True)
    LocalLogger().log({"loss": 0.5, "name": "skip me"}, step=4)
    DecoratorLoggerBase("actor", rank=1).log_by_print("not on rank 1")
    assert capsys.readouterr().out.splitlines() == ["[Rank 2] x", "step:4 - loss:0.5"]


def test_configure_verl_logging_isolates_the_verl_logger(monkeypatch):
    verl_logger = logging.getLogger("verl")
    saved = verl_logger.handlers[:], verl_logger.level, verl_logger.propagate
    monkeypatch.setenv("VERL_LOGGING_LEVEL", "warning")
    try:
        configure_verl_logging()
        assert verl_logger.level == logging.WARNING and not verl_logger.propagate and len(verl_logger.handlers) == 1
    finally:  # other tests capture verl's records through the root logger
        verl_logger.handlers, verl_logger.propagate = saved[0], saved[2]
        verl_logger.setLevel(saved[1])


def _batch(rollout, actor, mask):
    return DataProto.from_dict(
        tensors={
            "rollout_log_probs": rollout,
            "old_log_probs": actor,
            "responses": torch.zeros_like(rollout, dtype=torch.long),
            "response_mask": mask,
        }
    )


def test_debug_metrics_compare_rollout_and_actor_probabilities():
    actor = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.2, 0.4, 0.9]]))
    rollout = torch.log(torch.tensor([[0.5, 0.7, 0.1], [0.2, 0.6, 0.1]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    metrics = calculate_debug_metrics(_batch(rollout, actor, mask))
    assert metrics["training/rollout_probs_diff_valid"] == 1
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(0.2)
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(0.1)  # masked tokens ignored
    assert metrics["training/rollout_actor_probs_pearson_corr"] == pytest.approx(
        torch.corrcoef(torch.tensor([[0.5, 0.5, 0.2, 0.4], [0.5, 0.7, 0.2, 0.6]]))[0, 1].item(), abs=1e-5
    )
    empty = calculate_debug_metrics(_batch(rollout, actor, torch.zeros_like(mask)))
    assert empty["training/rollout_probs_diff_valid"] == 0 and math.isnan(empty["training/rollout_probs_diff_max"])


def test_token_list_diff_counts_masked_differences():
    a, b = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[1, 0, 0], [4, 5, 0]])
    assert calculate_token_list_diff(a, b, torch.tensor([[1, 1, 0], [1, 1, 1]])).tolist() == [1, 1]
