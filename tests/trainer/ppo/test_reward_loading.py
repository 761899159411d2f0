"""Building reward managers from config and loading user scoring functions by path."""

import pickle

import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.trainer.ppo.reward import CustomRewardFn, compute_reward, get_custom_reward_fn, load_reward_manager
from verl.workers.config import RewardConfig
from verl.workers.reward_manager import BatchRewardManager, DAPORewardManager, NaiveRewardManager

USER_FILE = """
def my_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    return scale * float(solution_str == ground_truth)


NOT_CALLABLE = 3
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "user_reward.py"
    path.write_text(USER_FILE)
    return str(path)


def config(**reward):
    base = {
        "reward": {
            "reward_manager": "naive",
            "reward_kwargs": {},
            "custom_reward_function": {"path": None, "name": "compute_score", "reward_kwargs": {}},
            "num_workers": 0,
            "timeout_s": 10.0,
        },
        "data": {"reward_fn_key": "data_source", "max_response_length": 16},
    }
    base["reward"].update(reward)
    return OmegaConf.create(base)


def test_no_custom_function_by_default():
    assert get_custom_reward_fn(config()) is None


def test_custom_function_loaded_with_kwargs(user_file):
    fn = get_custom_reward_fn(
        config(custom_reward_function={"path": user_file, "name": "my_score", "reward_kwargs": {"scale": 3.0}})
    )
    assert isinstance(fn, CustomRewardFn)
    assert fn("src", "42", "42") == 3.0 and fn("src", "4", "42") == 0.0
    assert fn("src", "42", "42", scale=0.5) == 0.5
    clone = pickle.loads(pickle.dumps(fn))  # travels to scoring processes as path + name
    assert clone._fn is None and clone("src", "7", "7") == 3.0


def test_custom_path_missing_names_the_path(tmp_path):
    missing = str(tmp_path / "absent_reward.py")
    with pytest.raises(FileNotFoundError, match=f"file '{missing}' does not exist"):
        get_custom_reward_fn(config(custom_reward_function={"path": missing, "name": "f"}))


def test_custom_name_missing_names_function_and_file(user_file):
    with pytest.raises(AttributeError, match=rf"reward function 'nope' not found in '{user_file}'.*my_score"):
        get_custom_reward_fn(config(custom_reward_function={"path": user_file, "name": "nope"}))
    with pytest.raises(TypeError, match="'NOT_CALLABLE'.*is not callable"):
        get_custom_reward_fn(config(custom_reward_function={"path": user_file, "name": "NOT_CALLABLE"}))


def test_legacy_top_level_custom_reward_function(user_file):
    legacy = OmegaConf.create(
        {"reward_model": {"reward_manager": "naive"}, "custom_reward_function": {"path": user_file, "name": "my_score"}}
    )
    assert get_custom_reward_fn(legacy).name == "my_score"


def test_load_reward_manager_wires_config(tiny_model_dir, user_file):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    manager = load_reward_manager(
        config(custom_reward_function={"path": user_file, "name": "my_score"}), tokenizer, num_examine=1
    )
    assert isinstance(manager, NaiveRewardManager)
    assert manager.compute_score.name == "my_score" and manager.num_examine == 1
    assert manager.num_workers == 0 and manager.timeout_s == 10.0

    batch = load_reward_manager(config(reward_manager="batch"), tokenizer)
    assert isinstance(batch, BatchRewardManager)

    dapo_cfg = {"overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 1.0, "log": False}}
    dapo = load_reward_manager(config(reward_manager="dapo", reward_kwargs=dapo_cfg), tokenizer)
    assert isinstance(dapo, DAPORewardManager) and dapo.max_resp_len == 16 and dapo.overlong_len == 4
    # Keyword arguments given to load_reward_manager win over the config.
    assert load_reward_manager(config(reward_manager="dapo"), tokenizer, max_resp_len=32).max_resp_len == 32


def test_load_reward_manager_errors(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="unknown reward manager 'mystery'.*registered"):
        load_reward_manager(config(reward_manager="mystery"), tokenizer)
    with pytest.raises(TypeError, match=r"'naive' does not accept \['overlong_buffer_cfg'\]"):
        load_reward_manager(config(reward_kwargs={"overlong_buffer_cfg": {}}), tokenizer)


def test_typed_reward_config_is_accepted(tiny_model_dir, user_file):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    typed = RewardConfig(reward_manager="batch", num_workers=1, timeout_s=5.0)
    manager = load_reward_manager(typed, tokenizer)
    assert isinstance(manager, BatchRewardManager) and manager.num_workers == 1 and manager.timeout_s == 5.0


def test_compute_reward_returns_tensor_extra_and_metrics():
    data = DataProto.from_dict(tensors={"x": torch.zeros(2, 3)})

    def manager(batch, return_dict=False):
        tensor = torch.ones(len(batch), 3)
        if not return_dict:
            return tensor
        return {
            "reward_tensor": tensor,
            "reward_extra_info": {"acc": [1, 0]},
            "reward_metrics": {"reward/num_failed": 1.0},
        }

    tensor, extra = compute_reward(data, manager)
    assert tensor.shape == (2, 3) and extra == {"acc": [1, 0]}
    _, _, metrics = compute_reward(data, manager, return_metrics=True)
    assert metrics == {"reward/num_failed": 1.0}

    def plain(batch):
        return torch.full((len(batch), 3), 2.0)

    tensor, extra = compute_reward(data, plain)
    assert (tensor == 2.0).all() and extra == {}
