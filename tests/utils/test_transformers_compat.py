"""verl.utils.transformers_compat: version ranges, the image-text auto class, vision outputs, tied keys."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import torch
import transformers

from verl.utils import transformers_compat as compat


def test_version_range():
    installed = importlib.metadata.version("transformers")
    assert compat.is_transformers_version_in_range(installed, installed)
    assert compat.is_transformers_version_in_range(min_version="4.0")
    assert not compat.is_transformers_version_in_range(max_version="1.0")
    assert not compat.is_transformers_version_in_range(min_version="99.0")


def test_image_text_auto_class_and_top_left_mask():
    assert compat.get_auto_model_for_vision2seq() is transformers.AutoModelForImageTextToText
    assert isinstance(compat.flash_attn_supports_top_left_mask(), bool)


def test_unpack_visual_output_forms():
    embeds, deep = torch.ones(2), [torch.zeros(1)]
    assert compat.unpack_visual_output(SimpleNamespace(pooler_output=embeds, deepstack_features=deep)) == (embeds, deep)
    assert compat.unpack_visual_output(SimpleNamespace(pooler_output=embeds)) == (embeds, None)
    assert compat.unpack_visual_output((embeds, deep)) == (embeds, deep)
    assert compat.unpack_visual_output(embeds) == (embeds, None)


def test_tied_alias_keys_are_dropped():
    config = transformers.LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    compat.drop_tied_target_keys(state, model, config)
    assert "model.embed_tokens.weight" in state and "lm_head.weight" not in state
    only_alias = {"lm_head.weight": torch.ones(1)}
    compat.drop_tied_target_keys(only_alias, model, config)
    assert list(only_alias) == ["lm_head.weight"]  # the canonical name is absent: the alias is kept
    untied = {"lm_head.weight": torch.ones(1), "model.embed_tokens.weight": torch.ones(1)}
    compat.drop_tied_target_keys(untied, model, SimpleNamespace(tie_word_embeddings=False))
    assert len(untied) == 2
