import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.utils import tiny_model as tm

REPO_ROOT = Path(__file__).resolve().parents[2]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_folder_is_a_llama_checkpoint(tiny_model_dir):
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        assert (tiny_model_dir / name).is_file(), name
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is False
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (64, 2, 2)
    tok_config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_model_loads_and_runs(tiny_model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer)
    ids = torch.tensor([tokenizer.encode("1+1=", add_special_tokens=False)])
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, 4, len(tokenizer))
    assert torch.isfinite(logits).all()
    out = model.generate(ids, max_new_tokens=5, do_sample=True, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] <= 9 and out.max().item() < len(tokenizer)


def test_special_token_ids(tiny_model_dir, tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    expected = [*tm.SPECIAL_TOKENS, *tm.TOOL_TOKENS]
    assert tokenizer.convert_tokens_to_ids(expected) == list(range(len(expected)))
    assert len(tokenizer) == len(expected) + len(tm.DEFAULT_CHARSET) == 109
    gen = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert (gen["eos_token_id"], gen["pad_token_id"], gen["bos_token_id"]) == (2, 0, 1)


def test_round_trip_keeps_spaces_newlines_and_punctuation(tokenizer):
    text = 'Hi there,  "x" = (3 * 4) / 2 - 1!\n\t{a: [b_c]}? it\'s ok. ~^|`@#$%&;<>\\'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)  # one token per character
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text
    space = tokenizer.convert_tokens_to_ids(" ")
    assert ids.count(space) == text.count(" ")
    assert tokenizer("a b")["input_ids"] == tokenizer.encode("a b", add_special_tokens=False)  # no implicit <bos>


def test_special_and_tool_tokens_are_single_ids(tokenizer):
    text = '<bos><|user|>7=<|assistant|><tool_call>{"a": 1}</tool_call><eos>'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids[:2] == [1, tokenizer.convert_tokens_to_ids("<|user|>")]
    assert ids[-1] == 2
    assert tokenizer.decode(ids) == text
    # Role markers and <eos> are special (dropped); tool markers stay so tool-call parsers can find them.
    assert tokenizer.decode(ids, skip_special_tokens=True) == '7=<tool_call>{"a": 1}</tool_call>'


def test_unknown_characters_become_unk(tokenizer):
    ids = tokenizer.encode("aé", add_special_tokens=False)
    assert ids == [tokenizer.convert_tokens_to_ids("a"), tokenizer.unk_token_id]


def test_chat_template_generation_prompt(tokenizer):
    messages = [{"role": "user", "content": "7="}]
    with_prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert with_prompt == "<bos><|user|>7=<|assistant|>"
    assert without == "<bos><|user|>7="
    ids = tokenizer.encode(with_prompt, add_special_tokens=False)
    assert len(ids) == 5 and ids[0] == tokenizer.bos_token_id


def test_chat_template_system_tools_and_tool_turns(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expr": "2+3"}}}],
        },
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert text.startswith("<bos><|system|>Be brief.\nTools:\n{")
    tool_line = text.split("Tools:\n")[1].split("\n")[0]
    assert json.loads(tool_line) == TOOLS[0]["function"]
    assert '<|assistant|><tool_call>{"name": "calculator", "arguments": {"expr": "2+3"}}</tool_call><eos>' in text
    assert text.endswith("<|tool|><tool_response>5</tool_response><|assistant|>5<eos>")
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_chat_template_edge_cases(tokenizer):
    # Tools without a system message still open a system turn.
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False)
    assert text.startswith("<bos><|system|>Tools:\n{") and text.endswith("<|user|>hi")
    # OpenAI-style string arguments are written as given.
    call = {"function": {"name": "calculator", "arguments": '{"expr": "1"}'}}
    text = tokenizer.apply_chat_template([{"role": "assistant", "content": None, "tool_calls": [call]}], tokenize=False)
    assert text == '<bos><|assistant|><tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call><eos>'
    # A bare tool turn with a generation prompt: what multi-turn agents append after a tool call.
    text = tokenizer.apply_chat_template([{"role": "tool", "content": "5"}], add_generation_prompt=True, tokenize=False)
    assert text == "<bos><|tool|><tool_response>5</tool_response><|assistant|>"
    # A role-less message renders only the prefix, which agents strip off incremental renders.
    assert tokenizer.apply_chat_template([{}], tokenize=False) == "<bos>"
    with pytest.raises(Exception, match="unknown role wizard"):
        tokenizer.apply_chat_template([{"role": "wizard", "content": "x"}], tokenize=False)


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    rng_before = torch.random.get_rng_state()
    a = tm.build_tiny_model(tmp_path / "a", seed=3)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's RNG is left alone
    b = tm.build_tiny_model(tmp_path / "b", seed=3)
    c = tm.build_tiny_model(tmp_path / "c", seed=4)
    weights = [(p / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]


def test_custom_sizes_and_charset(tmp_path):
    path = tm.build_tiny_model(tmp_path / "m", hidden_size=32, num_hidden_layers=1, charset="0123456789=")
    config = json.loads((path / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (32, 1, 12 + 11)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.decode(tok.encode("12=", add_special_tokens=False)) == "12="


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hidden_size": 30}, "hidden_size=30 must be divisible by num_attention_heads=4"),
        ({"num_key_value_heads": 3}, "num_attention_heads=4 must be divisible by num_key_value_heads=3"),
        ({"intermediate_size": 0}, "intermediate_size must be a positive int"),
        ({"charset": "abca"}, "charset has the character 'a' twice"),
        ({"charset": ""}, "charset must contain at least one character"),
        ({"seed": "0"}, "seed must be an int"),
    ],
)
def test_bad_arguments_name_the_culprit(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        tm.build_tiny_model(tmp_path / "bad", **kwargs)


def test_tiny_model_path_builds_once(tmp_path, monkeypatch):
    calls = []
    real_build = tm.build_tiny_model

    def counting_build(out_dir, **kwargs):
        calls.append(kwargs)
        return real_build(out_dir, **kwargs)

    monkeypatch.setattr(tm, "build_tiny_model", counting_build)
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path / "cache"))
    first = tm.tiny_model_path()
    assert first.parent == tmp_path / "cache" / "tiny_model"
    assert tm.tiny_model_path() == first
    assert len(calls) == 1
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary folder left behind
    other = tm.tiny_model_path(tmp_path / "explicit", hidden_size=32)
    assert other.parent == tmp_path / "explicit" and len(calls) == 2
    assert json.loads((other / "config.json").read_text())["hidden_size"] == 32


def test_cli_builds_and_prints_path(tmp_path):
    out = tmp_path / "cli_model"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "verl.utils.tiny_model", "--out", str(out), "--hidden-size", "32", "--seed", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 32


def test_cli_reports_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        tm.main(["--out", str(tmp_path / "x"), "--hidden-size", "30"])
    assert exc.value.code == 2
    assert "hidden_size=30 must be divisible by num_attention_heads=4" in capsys.readouterr().err
