"""A reward-loop manager registered the verl way is what main_ppo scores with; verl's class resolution and helpers."""

import pytest
import torch
from _reward_batches import make_batch, scores_at_last_token
from omegaconf import OmegaConf

from verl import DataProto
from verl.experimental.reward_loop.adapter import RewardLoopAdapter
from verl.experimental.reward_loop.reward_manager import REWARD_LOOP_MANAGER_REGISTRY, NaiveRewardManager
from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.ppo.reward import (
    build_reward_loop_manager,
    compute_reward,
    extract_reward,
    load_reward_manager,
    resolve_reward_manager_cls,
)
from verl.workers.reward_manager import NaiveRewardManager as BatchNaive

# A user file as a verl recipe writes it: the manager and the scoring function side by side.
USER_FILE = """
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase


def exact(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return float(solution_str == ground_truth) + bonus


@register("{name}")
class LengthAware(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score, scale=1.0):
        super().__init__(config, tokenizer, compute_score)
        self.scale = scale

    async def run_single(self, data):
        sample = await self.read_sample(data)
        base = await self.call_compute_score(sample)
        return {{"reward_score": self.scale * base - 0.1 * sample.response_length,
                 "reward_extra_info": {{"base": base}}}}
"""


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def user_file(tmp_path, request):
    name = f"length_aware_{request.node.name[-12:].strip('[]_')}"
    path = tmp_path / "my_reward.py"
    path.write_text(USER_FILE.format(name=name))
    yield str(path), name
    REWARD_LOOP_MANAGER_REGISTRY.pop(name, None)


def test_main_ppo_config_scores_with_a_registered_loop_manager(tokenizer, user_file):
    path, name = user_file
    # verl's command-line keys, translated by this package's config layer as main_ppo does
    config = compose_ppo_config(
        [
            f"reward_model.reward_manager={name}",
            f"custom_reward_function.path={path}",
            "custom_reward_function.name=exact",
            "+custom_reward_function.reward_kwargs.bonus=1.0",
        ]
    )
    reward_fn = load_reward_manager(config, tokenizer, num_examine=0)
    assert isinstance(reward_fn, RewardLoopAdapter) and type(reward_fn.manager).__name__ == "LengthAware"
    data = make_batch(tokenizer, ["12", "3"], ["12", "4"])
    assert data.batch["attention_mask"][:, 8:].sum(-1).tolist() == [3, 2]  # response tokens with <eos>
    reward, extra, metrics = compute_reward(data, reward_fn, return_metrics=True)
    assert scores_at_last_token(reward, data) == pytest.approx([2.0 - 0.3, 1.0 - 0.2])
    assert extra == {"base": [2.0, 1.0]} and metrics["reward/num_failed"] == 0.0


def test_reward_kwargs_given_to_load_reward_manager_reach_the_loop_manager(tokenizer, user_file):
    path, name = user_file
    config = OmegaConf.create(
        {"reward": {"reward_manager": name, "custom_reward_function": {"path": path, "name": "exact"}}}
    )
    reward_fn = load_reward_manager(config, tokenizer, scale=10.0)
    assert reward_fn.manager.scale == 10.0 and reward_fn.timeout_s == 300.0
    assert reward_fn.manager.loop is not None


def test_batch_managers_keep_their_names(tokenizer):
    config = OmegaConf.create({"reward": {"reward_manager": "naive", "num_workers": 0}})
    assert isinstance(load_reward_manager(config, tokenizer), BatchNaive)


def test_resolve_reward_manager_cls_register_and_importlib(tmp_path, user_file):
    path, name = user_file
    assert resolve_reward_manager_cls(OmegaConf.create({"reward": {"reward_manager": "naive"}})) is NaiveRewardManager
    verl_layout = {
        "reward": {"reward_manager": {"source": "importlib", "name": "LengthAware", "module": {"path": path}}}
    }
    cls = resolve_reward_manager_cls(OmegaConf.create(verl_layout))
    assert cls.__name__ == "LengthAware"
    registered = {"reward": {"reward_manager": {"source": "register", "name": "dapo", "module": {"path": None}}}}
    assert resolve_reward_manager_cls(OmegaConf.create(registered)).__module__.endswith("reward_manager.dapo")
    with pytest.raises(ValueError, match="'batch' .*a batch manager"):
        resolve_reward_manager_cls(OmegaConf.create({"reward": {"reward_manager": "batch"}}))
    with pytest.raises(ValueError, match="needs reward.reward_manager.module.path"):
        resolve_reward_manager_cls(
            OmegaConf.create({"reward": {"reward_manager": {"source": "importlib", "name": "X"}}})
        )


def test_importlib_source_runs_in_the_trainer(tokenizer, user_file):
    path, _ = user_file
    config = OmegaConf.create(
        {
            "reward": {
                "reward_manager": {"source": "importlib", "name": "LengthAware", "module": {"path": path}},
                "custom_reward_function": {"path": path, "name": "exact"},
            }
        }
    )
    data = make_batch(tokenizer, ["7"], ["7"])
    reward, _ = compute_reward(data, load_reward_manager(config, tokenizer))
    assert scores_at_last_token(reward, data) == pytest.approx([1.0 - 0.2])


def test_build_reward_loop_manager_defaults_to_default_compute_score(tokenizer):
    manager = build_reward_loop_manager(OmegaConf.create({"reward": {"reward_manager": "naive"}}), tokenizer)
    assert isinstance(manager, NaiveRewardManager)
    data = make_batch(tokenizer, ["2", "5"], ["2", "2"])
    assert scores_at_last_token(manager(data), data) == [1.0, 0.0]


def test_extract_reward_reads_the_reward_loop_columns():
    rm_scores = torch.arange(6, dtype=torch.float32).view(2, 3)
    batch = DataProto.from_dict(
        tensors={"rm_scores": rm_scores},
        non_tensors={"acc": [1.0, 0.0], "other": ["a", "b"]},
        meta_info={"reward_extra_keys": ["acc"]},
    )
    tensor, extra = extract_reward(batch)
    assert tensor is rm_scores and list(extra) == ["acc"] and list(extra["acc"]) == [1.0, 0.0]
    with pytest.raises(KeyError, match="no 'rm_scores'"):
        extract_reward(DataProto.from_dict(tensors={"x": rm_scores}))
    batch.meta_info["reward_extra_keys"] = ["missing"]
    with pytest.raises(KeyError, match=r"\['missing'\]"):
        extract_reward(batch)
