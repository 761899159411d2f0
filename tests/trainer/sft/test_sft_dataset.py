"""SFTDataset: chat-template prompt + response + eos, loss mask on the response only, padding and truncation."""

import pytest
import torch
from transformers import AutoTokenizer

from verl.trainer.sft.config import SFTDataConfig
from verl.trainer.sft.dataset import SFTDataError, SFTDataset
from verl.utils.synthetic_tasks import write_rows


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _config(files, **overrides):
    return SFTDataConfig(train_files=files, **overrides)


def test_item_layout_mask_and_padding(tokenizer, arith_seq_files):
    cfg = _config(str(arith_seq_files["train"]), max_length=32)
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    assert len(ds) == 4096
    item = ds[0]
    assert {k: v.shape for k, v in item.items()} == {
        k: torch.Size([32]) for k in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    }
    question, answer = ds.prompts[0][0]["content"], ds.responses[0]
    n_real = int(item["attention_mask"].sum())
    text = tokenizer.decode(item["input_ids"][:n_real])
    assert text == f"<bos><|user|>{question}<|assistant|>{answer}<eos>"
    # The loss mask covers exactly the response characters plus eos.
    response_ids = item["input_ids"][item["loss_mask"].bool()]
    assert tokenizer.decode(response_ids) == answer + "<eos>"
    assert int(item["loss_mask"].sum()) == len(answer) + 1
    # Right padding with the pad id; positions count real tokens from 0.
    assert item["attention_mask"][:n_real].all() and not item["attention_mask"][n_real:].any()
    assert (item["input_ids"][n_real:] == tokenizer.pad_token_id).all()
    assert not item["loss_mask"][n_real:].any()
    assert item["position_ids"][:n_real].tolist() == list(range(n_real))


def test_prompt_matches_the_generation_prefix(tokenizer, arith_seq_files):
    """The prompt part is what a rollout engine feeds the policy: the chat template with the generation prompt."""
    cfg = _config(str(arith_seq_files["train"]), max_length=32)
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    prompt_ids, response_ids = ds.tokenize(3)
    expected = tokenizer.apply_chat_template(ds.prompts[3], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(prompt_ids) == expected
    assert response_ids[-1] == tokenizer.eos_token_id


def test_plain_string_prompt_and_response_column(tokenizer, plain_rows_file):
    cfg = _config(str(plain_rows_file), prompt_key="question", response_key="response", max_length=16)
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    item = ds[1]
    n_real = int(item["attention_mask"].sum())
    assert tokenizer.decode(item["input_ids"][:n_real]) == "<bos><|user|>10+5=<|assistant|>15<eos>"
    assert tokenizer.decode(item["input_ids"][item["loss_mask"].bool()]) == "15<eos>"


def test_several_files_are_concatenated(tokenizer, plain_rows_file):
    cfg = _config([str(plain_rows_file), str(plain_rows_file)], prompt_key="question", response_key="response")
    assert len(SFTDataset(cfg.train_file_list, tokenizer, cfg)) == 4


@pytest.mark.parametrize("mode", ["left", "right"])
def test_truncation_modes(tokenizer, plain_rows_file, mode):
    # Full row 1 is <bos><|user|>10+5=<|assistant|>15<eos> = 11 tokens.
    cfg = _config(str(plain_rows_file), prompt_key="question", response_key="response", max_length=6, truncation=mode)
    item = SFTDataset(cfg.train_file_list, tokenizer, cfg)[1]
    assert int(item["attention_mask"].sum()) == 6
    text = tokenizer.decode(item["input_ids"])
    if mode == "left":
        assert text == "5=<|assistant|>15<eos>"
        assert int(item["loss_mask"].sum()) == 3
    else:
        assert text == "<bos><|user|>10+5"
        assert int(item["loss_mask"].sum()) == 0


def test_too_long_row_errors_by_default(tokenizer, plain_rows_file):
    cfg = _config(str(plain_rows_file), prompt_key="question", response_key="response", max_length=6)
    with pytest.raises(SFTDataError, match=r"row 1: .*data.max_length=6.*data.truncation"):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)[1]


def test_missing_file_is_named(tokenizer, tmp_path):
    missing = tmp_path / "nope.parquet"
    cfg = _config(str(missing))
    with pytest.raises(FileNotFoundError, match=r"data.train_files: parquet file .*nope.parquet does not exist"):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)


def test_missing_column_names_file_and_columns(tokenizer, plain_rows_file):
    cfg = _config(str(plain_rows_file), prompt_key="question", response_key="answer")
    with pytest.raises(
        SFTDataError,
        match=r"data.response_key='answer': parquet file .*plain.parquet has no column "
        r"'answer'; its columns are \['question', 'response'\]",
    ):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)
    cfg = _config(str(plain_rows_file), prompt_key="prompt", response_key="response")
    with pytest.raises(SFTDataError, match=r"data.prompt_key='prompt'.* no column 'prompt'"):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)


def test_missing_nested_field_names_row_and_path(tokenizer, arith_seq_files):
    cfg = _config(str(arith_seq_files["train"]), response_key="reward_model.answer")
    with pytest.raises(
        SFTDataError,
        match=r"row 0 of .*train.parquet has no field 'answer' under 'reward_model' "
        r"\(found \['ground_truth', 'style'\]\)",
    ):
        SFTDataset(cfg.train_file_list, tokenizer, cfg)


def test_extra_info_answer_path_works(tokenizer, arith_seq_files):
    cfg = _config(str(arith_seq_files["train"]), response_key="extra_info.answer", max_length=32)
    by_extra_info = SFTDataset(cfg.train_file_list, tokenizer, cfg).responses
    by_ground_truth = SFTDataset(cfg.train_file_list, tokenizer, _config(str(arith_seq_files["train"]))).responses
    assert by_extra_info == by_ground_truth and all(isinstance(r, str) and r for r in by_extra_info)


def test_bad_row_types_name_the_row(tokenizer, tmp_path):
    path = write_rows([{"prompt": "a", "response": "b"}, {"prompt": "c", "response": None}], tmp_path / "bad.parquet")
    cfg = _config(str(path), response_key="response")
    ds = SFTDataset(cfg.train_file_list, tokenizer, cfg)
    ds[0]
    with pytest.raises(SFTDataError, match=r"data.response_key='response': row 1 holds NoneType"):
        ds[1]


def test_empty_file_list_is_rejected_by_config():
    from verl.base_config import ConfigError

    with pytest.raises(ConfigError, match="train_files: is required"):
        SFTDataConfig(train_files=[])
