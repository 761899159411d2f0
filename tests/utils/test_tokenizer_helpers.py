"""verl.utils.tokenizer: token-id normalisation, tokenizer/processor loading and the chat-template probes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.utils.tokenizer import (
    build_multimodal_processor_inputs,
    get_processor_token_id,
    hf_processor,
    hf_tokenizer,
    normalize_token_ids,
)
from verl.utils.tokenizer.chat_template import (
    apply_chat_template,
    extract_system_prompt_and_generation,
    initialize_system_prompt,
    initialize_turn_separator,
)


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        (1, 2, 3),
        [[1, 2, 3]],
        torch.tensor([1, 2, 3]),
        torch.tensor([[1, 2, 3]]),
        np.array([1, 2, 3]),
        {"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1]},
        [np.int64(1), torch.tensor(2), 3.0],
    ],
)
def test_normalize_token_ids_flattens_every_form(value):
    assert normalize_token_ids(value) == [1, 2, 3]


def test_normalize_token_ids_names_bad_values():
    with pytest.raises(TypeError, match="position 1"):
        normalize_token_ids([1, "x"])
    with pytest.raises(TypeError, match="expected token ids"):
        normalize_token_ids(5)


class _Tok:
    def convert_tokens_to_ids(self, token):
        return {"<img>": 42}.get(token)


class _Proc:
    image_token = "<img>"
    video_token_id = 7
    tokenizer = _Tok()

    class feature_extractor:  # noqa: N801 - mimics the attribute of a real processor
        sampling_rate = 16000

    def __call__(self, **kwargs):
        return kwargs


def test_get_processor_token_id():
    assert get_processor_token_id(_Proc(), "video") == 7
    assert get_processor_token_id(_Proc(), "image") == 42
    assert get_processor_token_id(_Proc(), "audio") is None
    assert get_processor_token_id(None, "image") is None


def test_build_multimodal_processor_inputs_splits_video_metadata_and_sets_audio_rate():
    out = build_multimodal_processor_inputs(
        _Proc(), text=["t"], videos=[("frames", {"fps": 2})], audio=["wave"], mm_processor_kwargs={"max_pixels": 9}
    )
    assert out["videos"] == ["frames"] and out["video_metadata"] == [{"fps": 2}]
    assert out["do_sample_frames"] is False and out["sampling_rate"] == 16000
    assert out["max_pixels"] == 9 and out["return_tensors"] == "pt" and out["audio"] == ["wave"]


def test_hf_tokenizer_and_processor_on_a_local_checkpoint(tiny_model_dir):
    tokenizer = hf_tokenizer(str(tiny_model_dir))
    assert tokenizer.pad_token_id is not None
    assert hf_processor(str(tiny_model_dir)) is None  # text-only model
    with pytest.warns(UserWarning, match="no processor loaded"):
        assert hf_processor(str(tiny_model_dir / "missing")) is None


class _TemplateTokenizer:
    """A chat template: <s> [SYS] once, then per message [ROLE] body [END] \\n; generation prompt [A]."""

    eos_token_id = 9
    ids = {"<s>": 1, "[SYS]": 2, "[user]": 3, "[assistant]": 4, "[END]": 9, "\n": 10, "[A]": 5}

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True, **kwargs):
        out = [1, 2]
        for message in messages:
            content = message["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            out += [self.ids[f"[{message['role']}]"], *(100 + ord(c) for c in text), 9, 10]
        if add_generation_prompt:
            out.append(5)
        return {"input_ids": out}


def test_chat_template_probes_find_prefix_generation_prompt_and_separator():
    tok = _TemplateTokenizer()
    assert initialize_system_prompt(tok) == [1, 2]
    assert extract_system_prompt_and_generation(tok) == ([1, 2], [5])
    assert initialize_turn_separator(tok) == [10]


def test_chat_template_probes_on_the_tiny_model(tiny_model_dir):
    tok = hf_tokenizer(str(tiny_model_dir))
    prefix = initialize_system_prompt(tok)
    full = normalize_token_ids(tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True))
    assert prefix and full[: len(prefix)] == prefix


class _NeedsUser:
    """Refuses conversations without a user message, like Qwen3.5's template."""

    def apply_chat_template(
        self, messages, tokenize=True, add_generation_prompt=True, tools=None, return_dict=False, **kwargs
    ):
        if not any(m["role"] == "user" for m in messages):
            raise ValueError("no user message")
        text = "".join(f"<{m['role']}>" for m in messages) + ("<gen>" if add_generation_prompt else "")
        return text if not tokenize else [ord(c) for c in text]


def test_apply_chat_template_renders_a_lone_tool_turn_after_a_dummy_user():
    proc = _NeedsUser()
    assert apply_chat_template(proc, [{"role": "tool", "content": "x"}], tokenize=False) == "<tool><gen>"
    ids = apply_chat_template(proc, [{"role": "tool", "content": "x"}])
    assert "".join(map(chr, ids)) == "<tool><gen>"
    assert apply_chat_template(proc, [{"role": "user", "content": "x"}], tokenize=False) == "<user><gen>"
