"""RewardModelWorker in a 2-process worker group scores exactly like the in-process reward model."""

import pytest
import torch
from omegaconf import OmegaConf
from test_hf_reward_model import make_batch, rm_dir  # noqa: F401  (fixture reused)
from transformers import AutoTokenizer

from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.workers.reward_model import HFRewardModel, RewardModelWorker

pytestmark = pytest.mark.ray


def test_worker_group_scores_like_the_in_process_model(ray_cluster, rm_dir):  # noqa: F811
    config = OmegaConf.create(
        {
            "trainer": {"device": "cpu"},
            "reward": {"reward_model": {"enable": True, "model": {"path": str(rm_dir)}, "micro_batch_size_per_gpu": 2}},
        }
    )
    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    data, _ = make_batch(tokenizer, ["1+1=", "7=", "2,4,"], ["2", "7777", "6,8"])
    expected = HFRewardModel(rm_dir, micro_batch_size=2).compute_rm_score(data).batch["rm_scores"]

    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(RewardModelWorker, config=config))
    try:
        group.init_model()
        scores = group.compute_rm_score(data).batch["rm_scores"]
    finally:
        group.shutdown()
    assert scores.shape == expected.shape
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-6)
    assert (scores != 0).sum(-1).tolist() == [1, 1, 1]  # one score per sample, at its last response token


def test_scoring_before_init_is_a_clear_error():
    worker = RewardModelWorker.__new__(RewardModelWorker)
    worker.reward_model = None
    with pytest.raises(RuntimeError, match="call init_model first"):
        worker.compute_rm_score(None)
