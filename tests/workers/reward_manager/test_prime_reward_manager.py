"""PrimeRewardManager (positional verifier calls, tuple scores, the acc tensor) and verl's abstract-module names."""

import pickle

import pytest
import torch
from _reward_batches import RESPONSE_LEN, make_batch, scores_at_last_token

from verl.workers.reward_manager import PrimeRewardManager, get_reward_manager_cls
from verl.workers.reward_manager.abstract import AbstractRewardManager
from verl.workers.reward_manager.base import AbstractRewardManager as BaseAbstract
from verl.workers.reward_manager.prime import prime_score_value


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def verifier(task, completion, reference, extra_info):
    """PRIME-style: positional arguments with its own names; returns (score, details) or raises."""
    if completion == "9":
        raise ValueError("unparseable")
    return (float(completion == reference), {"task": task})


@pytest.mark.parametrize(("value", "expected"), [(True, 1.0), (2, 2.0), ((0.5, "x"), 0.5), ({"score": 3}, 3.0)])
def test_prime_score_value(value, expected):
    assert prime_score_value(value) == expected


def test_prime_scores_verify_and_failures(tokenizer):
    assert get_reward_manager_cls("prime") is PrimeRewardManager
    data = make_batch(tokenizer, ["4", "5", "9"], ["4", "4", "4"])
    manager = PrimeRewardManager(tokenizer, num_examine=0, compute_score=verifier, num_workers=0)
    out = manager(data, return_dict=True)
    assert scores_at_last_token(out["reward_tensor"], data) == [1.0, 0.0, 0.0]
    assert out["reward_metrics"] == {"reward/num_failed": 1.0, "reward/num_timeout": 0.0}
    assert data.batch["acc"].tolist() == [1.0, 0.0, 0.0] and data.batch["acc"].dtype == torch.float32
    assert manager.verify(make_batch(tokenizer, ["4"], ["4"])) == [1.0]


def test_prime_defaults_and_pickling(tokenizer):
    manager = PrimeRewardManager(tokenizer, num_examine=1)
    assert manager.num_workers >= 1 and manager.timeout_s == 300.0
    data = make_batch(tokenizer, ["2"], ["2"])
    clone = pickle.loads(pickle.dumps(PrimeRewardManager(tokenizer, compute_score=verifier, num_workers=0)))
    assert scores_at_last_token(clone(data), data) == [1.0]


def test_abstract_module_and_rm_score_extraction(tokenizer):
    assert AbstractRewardManager is BaseAbstract
    data = make_batch(tokenizer, ["1"], ["1"])
    data.batch["rm_scores"] = torch.full((1, RESPONSE_LEN), 0.5)
    data.non_tensor_batch["acc"] = data.non_tensor_batch["data_source"].copy()
    data.meta_info["reward_extra_keys"] = ["acc"]
    manager = PrimeRewardManager(tokenizer, num_workers=0)
    out = manager._extract_reward_from_rm_scores(data, return_dict=True)
    assert torch.equal(out["reward_tensor"], data.batch["rm_scores"]) and list(out["reward_extra_info"]) == ["acc"]
    assert manager._extract_reward_from_rm_scores(make_batch(tokenizer, ["1"], ["1"])) is None
