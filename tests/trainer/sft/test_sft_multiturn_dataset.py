"""Multi-turn SFTDataset (``data.multiturn.enable``): ToolAgentLoop's token layout, loss on assistant turns only.

The equality with the loop is checked against the real ToolAgentLoop and the real CalculatorTool; the model side
there is :class:`ReplayLLM`, a TEST DOUBLE FOR THE LLM ONLY that returns the assistant turns of the conversation as
token ids, because what is under test is how SFT lays out a conversation, not how a model writes one.
"""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.calculator_tool import CalculatorTool
from verl.trainer.sft.config import SFTDataConfig, SFTMultiturnConfig, build_sft_config
from verl.trainer.sft.dataset import SFTDataError, SFTDataset, tokenize_conversation
from verl.trainer.sft.trainer import SFTTrainer
from verl.utils.synthetic_tasks import make_rows, write_rows
from verl.utils.tool_transcripts import calculator_call_text, write_tool_sft_files
from verl.workers.config import HFModelConfig, MultiTurnConfig, RolloutConfig
from verl.workers.rollout.base import TokenOutput

CALL = calculator_call_text("23*17")
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 23*17?"},
    {"role": "assistant", "content": CALL},
    {"role": "tool", "content": "391"},
    {"role": "assistant", "content": "391"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def enc(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def multiturn_config(files, **overrides) -> SFTDataConfig:
    return SFTDataConfig(train_files=files, multiturn=SFTMultiturnConfig(enable=True), **overrides)


def test_mask_covers_exactly_the_assistant_turns(tokenizer):
    ids, mask = tokenize_conversation(tokenizer, CONVERSATION)
    segments = [  # (text, learned?) as written out by hand from the tiny chat template
        ("<bos><|system|>Be brief.<|user|>What is 23*17?<|assistant|>", 0),
        (CALL + "<eos>", 1),
        ("<|tool|><tool_response>391</tool_response><|assistant|>", 0),
        ("391<eos>", 1),
    ]
    expected_ids = [t for text, _ in segments for t in enc(tokenizer, text)]
    expected_mask = [learned for text, learned in segments for _ in enc(tokenizer, text)]
    assert ids == expected_ids
    assert mask == expected_mask


def test_items_pad_and_truncate_with_the_segment_mask(tokenizer, tmp_path):
    path = write_rows([{"messages": CONVERSATION}], tmp_path / "conv.parquet")
    ids, mask = tokenize_conversation(tokenizer, CONVERSATION)
    cfg = multiturn_config(str(path), max_length=len(ids) + 5)
    item = SFTDataset(cfg.train_file_list, tokenizer, cfg)[0]
    assert item["input_ids"].tolist() == ids + [tokenizer.pad_token_id] * 5
    assert item["loss_mask"].tolist() == mask + [0] * 5
    assert item["attention_mask"].tolist() == [1] * len(ids) + [0] * 5
    assert item["position_ids"][: len(ids)].tolist() == list(range(len(ids)))

    cfg = multiturn_config(str(path), max_length=10, truncation="left")
    item = SFTDataset(cfg.train_file_list, tokenizer, cfg)[0]
    assert tokenizer.decode(item["input_ids"]) == "<tool_response>391</tool_response><|assistant|>391<eos>"
    assert item["loss_mask"].tolist() == mask[-10:]
    cfg = multiturn_config(str(path), max_length=10)
    with pytest.raises(
        SFTDataError,
        match=r"row 0: conversation \(\d+ tokens, \d+ of them assistant tokens\) is "
        r"longer than data.max_length=10",
    ):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)[0]


def test_structured_tool_calls_render_like_the_text_call(tokenizer):
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "23*17"}}}
    structured = [*CONVERSATION[:2], {"role": "assistant", "content": "", "tool_calls": [call]}, *CONVERSATION[3:]]
    assert tokenize_conversation(tokenizer, structured) == tokenize_conversation(tokenizer, CONVERSATION)


def test_messages_after_the_last_assistant_turn_are_dropped(tokenizer):
    trailing = [*CONVERSATION, {"role": "user", "content": "thanks"}]
    assert tokenize_conversation(tokenizer, trailing) == tokenize_conversation(tokenizer, CONVERSATION)


class ReplayLLM:
    """TEST DOUBLE FOR THE LLM: the n-th generate call returns the n-th scripted turn's token ids (the server
    manager needs nothing but ``generate`` from a replica)."""

    def __init__(self, turns: list[list[int]]):
        self.turns = turns
        self.calls = 0

    async def generate(self, prompt_ids, sampling_params, request_id):
        tokens = self.turns[self.calls]
        self.calls += 1
        return TokenOutput(token_ids=list(tokens), log_probs=[-1.0] * len(tokens), stop_reason="stop")


def run_tool_agent(tokenizer, tool_config: str, raw_prompt, turns: list[list[int]], extra_info=None):
    config = {
        "rollout": RolloutConfig(
            name="hf",
            prompt_length=512,
            response_length=256,
            calculate_log_probs=True,
            multi_turn=MultiTurnConfig(enable=True, tool_config_path=tool_config, max_assistant_turns=4),
        ),
        "model": HFModelConfig(path="unused"),
    }
    server = ReplayLLM(turns)
    loop = ToolAgentLoop(config, AsyncLLMServerManager([server]), tokenizer)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": 256}
    out = asyncio.run(loop.run(params, raw_prompt=raw_prompt, extra_info=extra_info or {}))
    assert server.calls == len(turns), "the loop asked for exactly the scripted assistant turns"
    return out


@pytest.mark.parametrize("tool_fraction", [1.0, 0.0])
def test_transcript_rows_tokenize_exactly_as_the_tool_agent_loop_runs_them(tokenizer, tmp_path, tool_fraction):
    """SFT rows from tool_transcripts vs. the same conversation played through ToolAgentLoop + CalculatorTool."""
    tool_config = tmp_path / "tools.yaml"
    tool_config.write_text("tools:\n  - class_name: calculator\n    config: {timeout_s: 5}\n")
    paths = write_tool_sft_files(tmp_path, 4, 1, seed=5, tool_config_path=tool_config, tool_fraction=tool_fraction)
    cfg = multiturn_config(str(paths["train"]), max_length=512)
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    for index, row in enumerate(pq.read_table(paths["train"]).to_pylist()):
        ids, mask = ds.tokenize_messages(index)
        info = row["extra_info"]
        # what a model following the transcript writes, built from the row's facts, not from the dataset
        turns = [enc(tokenizer, info["answer"] + "<eos>")]
        if info["uses_tool"]:
            turns.insert(0, enc(tokenizer, calculator_call_text(info["expression"]) + "<eos>"))
        rl_row = make_rows("tool_calc", 1)[0]
        rl_row["extra_info"]["tools_kwargs"]["calculator"]["create_kwargs"]["ground_truth"] = info["answer"]
        out = run_tool_agent(
            tokenizer, str(tool_config), [{"role": "user", "content": info["question"]}], turns, rl_row["extra_info"]
        )
        assert ids == out.prompt_ids + out.response_ids
        assert mask == [0] * len(out.prompt_ids) + out.response_mask
        if info["uses_tool"]:
            assert out.extra_fields["tool_final_rewards"] == {"calculator": 1.0}  # the real tool agreed
        else:
            assert out.extra_fields["tool_call_counts"]["tool_calls"] == 0
        assert json.loads(row["tools"]) == [CalculatorTool.default_schema]


def test_two_rounds_of_tool_calls_match_the_loop(tokenizer, tmp_path):
    tool_config = tmp_path / "tools.yaml"
    tool_config.write_text("tools:\n  - class_name: calculator\n")
    conversation = [
        {"role": "user", "content": "What is (23*17)+4?"},
        {"role": "assistant", "content": "First " + CALL},
        {"role": "tool", "content": "391"},
        {"role": "assistant", "content": calculator_call_text("391+4")},
        {"role": "tool", "content": "395"},
        {"role": "assistant", "content": "It is 395."},
    ]
    schemas = [CalculatorTool.default_schema]
    ids, mask = tokenize_conversation(tokenizer, conversation, schemas)
    turns = [enc(tokenizer, m["content"] + "<eos>") for m in conversation if m["role"] == "assistant"]
    out = run_tool_agent(tokenizer, str(tool_config), conversation[:1], turns)
    assert ids == out.prompt_ids + out.response_ids
    assert mask == [0] * len(out.prompt_ids) + out.response_mask
    assert sum(mask) == sum(len(t) for t in turns)


def test_single_response_rows_are_unchanged_when_multiturn_is_off(tokenizer, tmp_path):
    paths = write_tool_sft_files(tmp_path, 2, 1, seed=0)
    cfg = SFTDataConfig(train_files=str(paths["train"]), response_key="response", max_length=512)
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    prompt_ids, response_ids = ds.tokenize(0)
    assert tokenizer.decode(response_ids).startswith("<tool_call>")
    assert "<|tool|>" in tokenizer.decode(response_ids)  # one response string: the tool turn is learned too
    with pytest.raises(TypeError, match="needs data.multiturn.enable=true"):
        ds.tokenize_messages(0)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"messages": "hello"}],
            r"data.multiturn.messages_key='messages': row 0 of .*bad.parquet holds str "
            r"'hello'; expected a non-empty list of chat messages",
        ),
        (
            [{"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]}],
            r"row 0 of .*bad.parquet: message 1 has role 'bot'; expected one of \['system', 'user', 'assistant', "
            r"'tool'\]",
        ),
        ([{"messages": [{"role": "user", "content": "q"}]}], r"row 0 of .*bad.parquet has no assistant message"),
        ([{"messages": [{"role": "assistant", "content": "a"}]}], r"row 0 of .*bad.parquet starts with an assistant"),
        (
            [{"messages": CONVERSATION, "tools": "[not json"}],
            r"data.multiturn.tools_key='tools': row 0 of .*bad.parquet is not valid JSON",
        ),
        (
            [{"messages": CONVERSATION, "tools": '{"name": "calc"}'}],
            r"data.multiturn.tools_key='tools': row 0 of .*bad.parquet holds .*expected a list of tool schemas",
        ),
    ],
)
def test_bad_rows_name_file_row_and_key(tokenizer, tmp_path, rows, message):
    # a good file first: the row number counts within the named file, not across files
    good = write_rows([{"messages": CONVERSATION}], tmp_path / "good.parquet")
    bad = write_rows(rows, tmp_path / "bad.parquet")
    cfg = multiturn_config([str(good), str(bad)])
    with pytest.raises(SFTDataError, match=message):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)


def test_missing_messages_column_names_the_key_and_file(tokenizer, tmp_path):
    path = write_rows([{"prompt": "q", "response": "a"}], tmp_path / "plain.parquet")
    cfg = SFTDataConfig(train_files=str(path), multiturn=SFTMultiturnConfig(enable=True, messages_key="conversation"))
    with pytest.raises(
        SFTDataError,
        match=r"data.multiturn.messages_key='conversation': parquet file "
        r".*plain.parquet has no column 'conversation'",
    ):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)


def test_template_that_rewrites_history_is_refused(tokenizer, tmp_path):
    odd = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    # the generation prompt says <|assistant|> but a finished assistant turn is written under <|system|>
    odd.chat_template = (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'assistant' %}<|system|>"
        "{{ m.content }}{{ eos_token }}{% elif m.role %}<|user|>{{ m.content }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    path = write_rows([{"messages": CONVERSATION}], tmp_path / "conv.parquet")
    cfg = multiturn_config(str(path))
    with pytest.raises(
        SFTDataError,
        match=r"row 0 of .*conv.parquet: the chat template renders assistant message 2 "
        r"in a way that changes the tokens before it",
    ):
        SFTDataset(cfg.train_file_list, odd, cfg)[0]


def test_trainer_learns_only_assistant_tokens_from_multiturn_rows(tiny_model_dir, tmp_path):
    """Two SFT steps through the real trainer: the loss is a token mean over the assistant tokens."""
    paths = write_tool_sft_files(tmp_path / "data", 16, 4, seed=0, tool_fraction=0.5)
    cfg = build_sft_config(
        {
            "data": {
                "train_files": str(paths["train"]),
                "val_files": str(paths["test"]),
                "max_length": 400,
                "train_batch_size": 8,
                "micro_batch_size_per_gpu": 4,
                "multiturn": {"enable": True},
            },
            "model": {"path": str(tiny_model_dir)},
            "optim": {"lr": 1e-3},
            "trainer": {
                "total_training_steps": 2,
                "default_local_dir": str(tmp_path / "out"),
                "logger": [],
                "device": "cpu",
            },
        }
    )
    trainer = SFTTrainer(cfg)
    batch = next(iter(trainer.train_loader))
    learned = batch["input_ids"][batch["loss_mask"].bool()]
    tool_tokens = set(trainer.tokenizer.convert_tokens_to_ids(["<|tool|>", "<tool_response>", "<|user|>"]))
    assert not tool_tokens & set(learned.tolist())
    final = trainer.fit()
    assert (final / "config.json").is_file()
    assert all(torch.isfinite(torch.tensor(h["train/loss"])) for h in trainer.history)
    assert "val/loss" in trainer.history[-1]
