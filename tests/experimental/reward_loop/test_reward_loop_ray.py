"""The reward loop on the shared Ray cluster: RewardLoopManager's workers, and compute_reward_async."""

import numpy as np
import pytest
import ray
from _reward_batches import make_batch, scores_at_last_token
from omegaconf import OmegaConf

from verl.experimental.reward_loop import RewardLoopManager
from verl.trainer.ppo.reward import compute_reward_async, extract_reward
from verl.utils.extras import MissingExtraError
from verl.workers.reward_manager import NaiveRewardManager

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_manager_scores_a_batch_on_its_workers(ray_cluster, tiny_model_dir, tokenizer):
    config = OmegaConf.create(
        {"model": {"path": str(tiny_model_dir)}, "reward": {"reward_manager": "naive", "num_workers": 2}}
    )
    manager = RewardLoopManager(config)
    assert len(manager.reward_loop_worker_handles) == 2
    data = make_batch(tokenizer, ["1", "5", "12"], ["1", "2", "12"])  # 3 rows over 2 workers: one is padding
    out = manager.compute_rm_score(data)
    assert out.meta_info["reward_extra_keys"] == ["acc"]
    reward, extra = extract_reward(out)
    assert scores_at_last_token(reward, data) == [1.0, 0.0, 1.0]
    assert np.array_equal(extra["acc"], np.array([1.0, 0.0, 1.0], dtype=object))
    for worker in manager.reward_loop_workers:
        ray.kill(worker)


def test_served_reward_model_is_refused(ray_cluster):
    config = OmegaConf.create(
        {
            "reward": {
                "reward_model": {"enable": True, "model": {"path": "/rm"}},
                "custom_reward_function": {"path": None},
            }
        }
    )
    with pytest.raises(MissingExtraError, match="served reward model.*not part of this build"):
        RewardLoopManager(config)


def test_compute_reward_async_runs_as_a_ray_task(ray_cluster, tokenizer):
    data = make_batch(tokenizer, ["3", "4"], ["3", "3"])
    reward_fn = NaiveRewardManager(tokenizer, num_workers=0)
    reward, extra = ray.get(compute_reward_async.remote(data, reward_fn=reward_fn))
    assert scores_at_last_token(reward, data) == [1.0, 0.0] and extra == {}
    with pytest.raises(TypeError, match=r"call compute_reward_async.remote"):
        compute_reward_async(data, reward_fn=reward_fn)
