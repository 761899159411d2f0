"""The data sets convert the config they are handed once and read it by attribute: a DictConfig, a dict and the typed
config (DataConfig, SFTDatasetConfig) give the same data set, a block without a key takes the dataclass default, a
misspelt key is named, and a recipe's own key is kept."""

from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from torch.utils.data import SequentialSampler

import verl.trainer.config as trainer_config
import verl.trainer.config.data_config as data_config_module
import verl.trainer.sft.config as sft_config
from verl.base_config import ConfigError
from verl.utils.dataset import MultiTurnSFTDataset, RLHFDataset, SFTDataset, create_rl_sampler
from verl.utils.dataset import config as dataset_config
from verl.utils.dataset.config import DataConfig, SFTDatasetConfig
from verl.utils.dataset.sampler import FixedPermutationSampler, create_val_sampler
from verl.utils.synthetic_tasks import write_rows, write_task_files

ROWS = 12


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompts")
    return str(write_task_files("addition", root, train_size=ROWS, test_size=2)["train"])


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    rows = [{"extra_info": {"qa": {"question": f"{i}+1=", "answer": str(i + 1)}}} for i in range(6)]
    return str(write_rows(rows, tmp_path_factory.mktemp("pairs") / "pairs.parquet"))


@pytest.fixture(scope="module")
def conversations(tmp_path_factory):
    rows = [
        {"conv": [{"role": "user", "content": f"{i}+1="}, {"role": "assistant", "content": str(i + 1)}]}
        for i in range(4)
    ]
    return str(write_rows(rows, tmp_path_factory.mktemp("conversations") / "conv.parquet"))


def test_the_configs_live_below_the_trainers_and_keep_their_old_import_paths():
    for name in ("DataConfig", "CustomClsConfig", "SamplerConfig"):
        ours = getattr(dataset_config, name)
        assert getattr(trainer_config, name) is ours and getattr(data_config_module, name) is ours
    assert data_config_module.TRUNCATION_MODES == dataset_config.TRUNCATION_MODES
    for name in ("SFTDataConfig", "SFTMultiturnConfig", "SFTCustomClsConfig"):
        assert getattr(sft_config, name) is getattr(dataset_config, name)
    assert sft_config.TRUNCATION_MODES == ("error", "left", "right")


# ------------------------------------------------------------------------------------------------ RLHFDataset
BLOCK = {"max_prompt_length": 48, "truncation": "left", "shuffle": False, "cache_dir": "~/rl-cache"}


@pytest.mark.parametrize(
    "make",
    [lambda: OmegaConf.create(BLOCK), lambda: dict(BLOCK), lambda: DataConfig(**BLOCK)],
    ids=["DictConfig", "dict", "DataConfig"],
)
def test_rlhf_dataset_reads_every_form_of_the_block_alike(tokenizer, prompts, make):
    config = make()
    ds = RLHFDataset(prompts, tokenizer, config, max_samples=5)
    assert ds.config is config  # verl's attribute: what the caller gave
    assert (ds.max_prompt_length, ds.truncation, ds.shuffle) == (48, "left", False)
    assert ds.cache_dir.endswith("rl-cache") and not ds.cache_dir.startswith("~")
    assert len(ds) == 5 and ds[0]["input_ids"].shape == (48,)
    reference = RLHFDataset(prompts, tokenizer, DataConfig(**BLOCK), max_samples=5)
    assert torch.equal(ds[3]["input_ids"], reference[3]["input_ids"])


@pytest.mark.parametrize("config", [None, {}], ids=["None", "empty"])
def test_a_bare_block_takes_the_dataconfig_defaults(tokenizer, prompts, config):
    ds = RLHFDataset(prompts, tokenizer, config)
    defaults = DataConfig()
    assert (ds.max_prompt_length, ds.truncation, ds.prompt_key) == (
        defaults.max_prompt_length,
        defaults.truncation,
        defaults.prompt_key,
    )
    assert (ds.shuffle, ds.seed, ds.return_raw_chat, ds.num_workers) == (True, None, True, 1)
    assert (ds.need_tools_kwargs, ds.filter_prompts, ds.chat_template_func) == (False, True, None)
    assert ds.image_patch_size == 14 and ds.cache_dir.endswith(".cache/verl/rlhf")


def test_a_misspelt_key_is_named_and_a_recipe_key_is_kept(tokenizer, prompts):
    with pytest.raises(ConfigError, match=r"^data\.max_promt_length: unknown key for DataConfig \(did you mean"):
        RLHFDataset(prompts, tokenizer, {"max_promt_length": 64})
    nested = OmegaConf.create({"data": {"truncaton": "left"}})
    with pytest.raises(ConfigError, match=r"^data\.truncaton: unknown key for DataConfig"):
        RLHFDataset(prompts, tokenizer, nested.data)
    with pytest.raises(ConfigError, match=r"^data\.truncation: must be one of"):
        RLHFDataset(prompts, tokenizer, {"truncation": "cut"})
    ds = RLHFDataset(prompts, tokenizer, OmegaConf.create({"max_prompt_length": 64, "my_curriculum_level": 3}))
    assert ds.config.my_curriculum_level == 3 and ds.max_prompt_length == 64


@pytest.mark.parametrize(
    "make",
    [lambda b: OmegaConf.create(b), dict, lambda b: DataConfig(**b)],
    ids=["DictConfig", "dict", "DataConfig"],
)
def test_samplers_read_every_form_of_the_block_alike(make):
    source = list(range(10))
    assert isinstance(create_rl_sampler(make({"shuffle": False}), source), SequentialSampler)
    first = list(create_rl_sampler(make({"shuffle": True, "seed": 4}), source))
    assert first == list(create_rl_sampler(DataConfig(seed=4), source)) and sorted(first) == source
    assert create_val_sampler(make({"validation_shuffle": False}), source) is None
    assert isinstance(
        create_val_sampler(make({"validation_shuffle": True, "seed": 4}), source), FixedPermutationSampler
    )
    with pytest.raises(ConfigError, match=r"^data\.sampler\.class_name: must be set when class_path is set"):
        create_rl_sampler({"sampler": {"class_path": "my_sampler.py"}}, source)


# ------------------------------------------------------------------------------------------------ SFT data sets
PAIRS_BLOCK = {
    "prompt_key": "extra_info",
    "prompt_dict_keys": ["qa", "question"],
    "response_key": "extra_info",
    "response_dict_keys": ["qa", "answer"],
    "max_length": 24,
}


@pytest.mark.parametrize(
    "make",
    [lambda: OmegaConf.create(PAIRS_BLOCK), lambda: dict(PAIRS_BLOCK), lambda: SFTDatasetConfig(**PAIRS_BLOCK)],
    ids=["DictConfig", "dict", "SFTDatasetConfig"],
)
def test_sft_dataset_reads_every_form_of_the_block_alike(tokenizer, pairs, make):
    ds = SFTDataset(pairs, tokenizer, make())
    assert (ds.prompt_key, ds.response_key, ds.max_length) == ("extra_info.qa.question", "extra_info.qa.answer", 24)
    assert ds.prompts[2] == "2+1=" and ds.responses[2] == "3" and ds[2]["input_ids"].shape == (24,)


def test_sft_blocks_of_verl_trainers_convert_and_misspelt_keys_are_named(tokenizer, conversations):
    # the data block of verl's older fsdp_sft_trainer (sft_trainer_legacy.yaml): multi-turn keys under multiturn
    legacy = yaml.safe_load((Path(trainer_config.__file__).parent / "sft_trainer_legacy.yaml").read_text())["data"]
    block = dict(legacy, multiturn={**legacy["multiturn"], "messages_key": "conv"}, max_length=64)
    ds = MultiTurnSFTDataset(conversations, tokenizer, OmegaConf.create(block))
    assert len(ds) == 4 and ds[0]["input_ids"].shape == (64,)
    # verl 0.9.1's sft_trainer_engine.yaml: flat multi-turn keys, enable_thinking_default spelt "none"
    engine = {
        "train_batch_size": 256,
        "micro_batch_size_per_gpu": 4,
        "max_token_len_per_gpu": 8192,
        "use_dynamic_bsz": True,
        "messages_key": "conv",
        "enable_thinking_default": "none",
        "pad_mode": "no_padding",
        "max_length": 64,
        "num_workers": 8,
        "ignore_input_ids_mismatch": False,
    }
    packed = MultiTurnSFTDataset(conversations, tokenizer, engine)
    assert packed.enable_thinking == [None] * 4 and set(packed[0]) == {"input_ids", "position_ids", "loss_mask"}
    with pytest.raises(ConfigError, match=r"^data\.messages_kye: unknown key for SFTDatasetConfig"):
        MultiTurnSFTDataset(conversations, tokenizer, {"messages_kye": "conv"})
    with pytest.raises(ConfigError, match=r"^data\.enable_thinking_default: must be true, false or none"):
        MultiTurnSFTDataset(conversations, tokenizer, {"messages_key": "conv", "enable_thinking_default": "maybe"})
