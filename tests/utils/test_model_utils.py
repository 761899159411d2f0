"""verl.utils.model: config overrides, generation configs, auto classes, random masks, weight-key conversion,
LoRA target matching and multi-modal batching."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from peft import LoraConfig
from tensordict import NonTensorData
from transformers import LlamaConfig, Qwen2VLConfig

from verl.utils import model as model_utils
from verl.utils.extras import MissingExtraError


def test_update_model_config_recurses_into_sub_configs():
    config = Qwen2VLConfig()
    model_utils.update_model_config(config, {"vision_config": {"depth": 3}, "tie_word_embeddings": True})
    assert config.vision_config.depth == 3 and config.tie_word_embeddings is True


def test_generation_config_from_file_or_model_config(tiny_model_dir, tmp_path):
    assert model_utils.get_generation_config(str(tiny_model_dir)) is not None
    LlamaConfig(bos_token_id=5, eos_token_id=6).save_pretrained(tmp_path)  # no generation_config.json
    derived = model_utils.get_generation_config(str(tmp_path))
    assert (derived.bos_token_id, derived.eos_token_id) == (5, 6)
    assert model_utils.get_generation_config(str(tmp_path / "absent")) is None


def test_actor_and_critic_built_from_the_architecture(tiny_model_dir):
    actor = model_utils.create_huggingface_actor(str(tiny_model_dir), {"num_hidden_layers": 1})
    assert actor.config.num_hidden_layers == 1
    critic = model_utils.create_huggingface_critic(str(tiny_model_dir), {"num_hidden_layers": 1})
    ids = torch.tensor([[1, 2, 3]])
    assert critic(input_ids=ids).logits.shape == (1, 3)
    count, scale = model_utils.get_model_size(actor)
    assert scale == "K" and count == pytest.approx(sum(p.numel() for p in actor.parameters()) / 1e3)
    with pytest.raises(ValueError, match="unknown scale"):
        model_utils.get_model_size(actor, scale="T")


def test_random_mask_respects_the_ratios():
    np.random.seed(0)
    ids = torch.zeros(64, 20, dtype=torch.long)
    mask = model_utils.create_random_mask(
        ids, max_ratio_of_valid_token=0.5, max_ratio_of_left_padding=0.25, min_ratio_of_valid_token=0.2
    )
    valid = mask.sum(-1)
    assert valid.min() >= 4 and valid.max() <= 10
    left = (mask.cumsum(-1) == 0).sum(-1)
    assert left.max() <= 5 and left.min() == 0
    assert bool(((mask[:, 1:] - mask[:, :-1]) != 0).sum(-1).le(2).all())  # one contiguous block per row
    assert torch.equal(model_utils.compute_position_id_with_mask(torch.tensor([[0, 1, 1]])), torch.tensor([[0, 0, 1]]))
    with pytest.raises(ValueError, match="cannot hold"):
        model_utils.create_random_mask(ids, 0.9, 0.5)


def test_convert_weight_keys_reverses_the_loading_conversion():
    mapping = {"^visual": "model.visual", "^model(?!\\.visual)": "model.language_model"}
    model = SimpleNamespace(_checkpoint_conversion_mapping=mapping)
    state = {"model.visual.patch.weight": 1, "model.language_model.layers.0.weight": 2, "lm_head.weight": 3}
    assert model_utils.convert_weight_keys(state, model) == {
        "visual.patch.weight": 1,
        "model.layers.0.weight": 2,
        "lm_head.weight": 3,
    }
    assert model_utils.convert_weight_keys(state, object()) is state


def test_lora_target_and_exclude_matching():
    config = LoraConfig(target_modules=["q_proj"], layers_to_transform=[1], exclude_modules=["lm_head"])
    assert model_utils.check_target_modules(config, "model.layers.1.self_attn.q_proj")
    assert not model_utils.check_target_modules(config, "model.layers.0.self_attn.q_proj")
    assert not model_utils.check_target_modules(config, "model.layers.1.self_attn.k_proj")
    assert model_utils.check_exclude_modules(config, "lm_head")
    assert model_utils.check_exclude_modules(config, "x.lm_head")
    regex = LoraConfig(target_modules=r".*\.(q|v)_proj")
    assert model_utils.check_target_modules(regex, "model.layers.0.self_attn.v_proj")
    assert not model_utils.check_exclude_modules(regex, "anything")


def test_auto_model_class_by_architecture():
    assert (
        model_utils.get_hf_auto_model_class(LlamaConfig(architectures=["LlamaForCausalLM"]))
        is transformers.AutoModelForCausalLM
    )
    assert (
        model_utils.get_hf_auto_model_class(Qwen2VLConfig(architectures=["Qwen2VLForConditionalGeneration"]))
        is transformers.AutoModelForImageTextToText
    )
    assert (
        model_utils.get_hf_auto_model_class(LlamaConfig(architectures=["LlamaForSequenceClassification"]))
        is transformers.AutoModelForSequenceClassification
    )
    remote = LlamaConfig(architectures=["MyForCausalLM"], auto_map={"AutoModelForCausalLM": "my.MyForCausalLM"})
    assert model_utils.get_hf_auto_model_class(remote) is transformers.AutoModelForCausalLM
    assert model_utils.get_hf_auto_model_class(LlamaConfig(architectures=["LlamaModel"])) is transformers.AutoModel


def test_multi_modal_inputs_are_merged_per_key():
    rows = [
        {"pixel_values": torch.ones(2, 3), "input_features": torch.ones(1, 2, 3)},
        None,
        NonTensorData({"pixel_values": torch.zeros(1, 3), "input_features": torch.ones(1, 2, 5)}),
    ]
    merged = model_utils.extract_multi_modal_inputs(rows)
    assert merged["pixel_values"].shape == (3, 3)
    assert merged["input_features"].shape == (2, 2, 5) and merged["input_features"][0, :, 3:].abs().sum() == 0
    assert model_utils.extract_multi_modal_inputs(rows, indices=[2, 7])["pixel_values"].shape == (1, 3)
    bounded = model_utils.extract_multi_modal_inputs([{"image_bound": torch.ones(1), "x": torch.ones(2)}])
    assert isinstance(bounded["x"], list)
    with pytest.raises(RuntimeError, match="'pixel_values'"):
        model_utils.extract_multi_modal_inputs([{"pixel_values": torch.ones(1, 2)}, {"pixel_values": torch.ones(1, 3)}])


def test_lora_rank_from_adapter(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 16}))
    assert model_utils.get_lora_rank_from_adapter(tmp_path) == 16
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        model_utils.get_lora_rank_from_adapter(tmp_path / "..")
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="no LoRA rank"):
        model_utils.get_lora_rank_from_adapter(tmp_path)


def test_megatron_model_builders_name_the_extra():
    with pytest.raises(MissingExtraError, match=r"verl\[megatron\]"):
        model_utils.get_parallel_model_from_config(None, None)
