"""RLHFDataset over real parquet files written by the synthetic-task kit, tokenized with the tiny model's tokenizer."""

import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import SequentialSampler

from verl import DataProto
from verl.trainer.config.data_config import DataConfig
from verl.utils.dataset import RLHFDataset, collate_fn, create_rl_dataset, create_rl_sampler
from verl.utils.synthetic_tasks import make_rows, write_rows, write_task_files


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {
        "addition": write_task_files("addition", root / "addition", train_size=24, test_size=4)["train"],
        "tool_calc": write_task_files("tool_calc", root / "tool_calc", train_size=6, test_size=2)["train"],
    }


def cfg(**overrides):
    base = {"max_prompt_length": 32, "truncation": "error", "return_raw_chat": True}
    base.update(overrides)
    return OmegaConf.create(base)


def templated_ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_item_is_left_padded_templated_prompt(tokenizer, files):
    ds = RLHFDataset(files["addition"], tokenizer, cfg())
    rows = pq.read_table(files["addition"]).to_pylist()
    assert len(ds) == len(rows) == 24
    item = ds[3]
    expected = templated_ids(tokenizer, rows[3]["prompt"])
    assert item["raw_prompt_ids"] == expected
    n = len(expected)
    assert item["input_ids"].shape == (32,) and item["input_ids"].dtype == torch.long
    assert item["input_ids"][-n:].tolist() == expected
    assert (item["input_ids"][:-n] == tokenizer.pad_token_id).all()
    assert item["attention_mask"].tolist() == [0] * (32 - n) + [1] * n
    assert item["position_ids"].tolist() == [0] * (32 - n) + list(range(n))
    assert item["raw_prompt"] == rows[3]["prompt"]
    assert item["data_source"] == "synthetic/addition"
    assert item["reward_model"]["ground_truth"] == rows[3]["reward_model"]["ground_truth"]
    assert item["extra_info"] == rows[3]["extra_info"]
    assert item["index"] == rows[3]["extra_info"]["index"] == 3
    assert "uid" not in item and "prompt" not in item


def test_return_raw_chat_false_and_full_prompt(tokenizer, files):
    ds = RLHFDataset(files["addition"], tokenizer, cfg(return_raw_chat=False, return_full_prompt=True))
    item = ds[0]
    assert "raw_prompt" not in item
    assert item["full_prompts"].startswith(tokenizer.bos_token) and item["full_prompts"].endswith("<|assistant|>")


def test_several_files_concatenate_and_pass_agent_fields_through(tokenizer, files):
    ds = RLHFDataset([files["tool_calc"], files["addition"]], tokenizer, cfg(max_prompt_length=40))
    assert len(ds) == 6 + 24
    tool_item, plain_item = ds[0], ds[6]
    assert tool_item["agent_name"] == "tool_agent"
    assert (
        tool_item["tools_kwargs"]["calculator"]["create_kwargs"]["ground_truth"]
        == tool_item["reward_model"]["ground_truth"]
    )
    assert plain_item["data_source"] == "synthetic/addition"
    assert "tools_kwargs" not in plain_item


def test_typed_data_config_is_accepted(tokenizer, files):
    config = DataConfig(train_files=str(files["addition"]), max_prompt_length=16, truncation="left")
    ds = RLHFDataset(config.train_file_list, tokenizer, config)
    assert ds[0]["input_ids"].shape == (16,)


def test_missing_file_names_the_path(tokenizer, tmp_path):
    missing = tmp_path / "nope" / "train.parquet"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        RLHFDataset([str(missing)], tokenizer, cfg())


def test_row_without_prompt_key_names_row_and_file(tokenizer, tmp_path, files):
    rows = make_rows("addition", 3)
    for row in rows:
        row["question"] = row.pop("prompt")
    bad = write_rows(rows, tmp_path / "no_prompt.parquet")
    with pytest.raises(KeyError, match=r"row 0 of .*no_prompt\.parquet has no prompt key 'prompt'"):
        RLHFDataset([files["addition"], bad], tokenizer, cfg())

    rows = make_rows("addition", 4)
    table = pa.Table.from_pylist(rows)
    prompts = table.column("prompt").to_pylist()
    prompts[2] = None
    table = table.set_column(
        table.column_names.index("prompt"), "prompt", pa.array(prompts, table.schema.field("prompt").type)
    )
    pq.write_table(table, tmp_path / "null_prompt.parquet")
    with pytest.raises(KeyError, match=r"row 2 of .*null_prompt\.parquet"):
        RLHFDataset([tmp_path / "null_prompt.parquet"], tokenizer, cfg())


def lengths(tokenizer, path):
    return [len(templated_ids(tokenizer, row["prompt"])) for row in pq.read_table(path).to_pylist()]


def test_filter_overlong_prompts_drops_and_logs(tokenizer, files, caplog):
    lens = lengths(tokenizer, files["addition"])
    limit = max(lens) - 1
    expected_dropped = sum(n > limit for n in lens)
    assert 0 < expected_dropped < len(lens)
    with caplog.at_level(logging.INFO, logger="verl.utils.dataset.rl_dataset"):
        ds = RLHFDataset(files["addition"], tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True))
    assert ds.num_filtered == expected_dropped
    assert len(ds) == len(lens) - expected_dropped
    assert all(len(ds[i]["raw_prompt_ids"]) <= limit for i in range(len(ds)))
    assert f"dropped {expected_dropped} of {len(lens)}" in caplog.text
    # Kept rows keep their original order and identity.
    kept = [i for i, n in enumerate(lens) if n <= limit]
    assert [ds[i]["index"] for i in range(len(ds))] == kept


class PidRecordingRenderer:
    """A chat renderer that writes the id of each process it renders in (picklable, so worker processes get one)."""

    def __init__(self, tokenizer, record_dir):
        self.tokenizer = tokenizer
        self.record_dir = record_dir

    def apply_chat_template(self, messages, **kwargs):
        (self.record_dir / str(os.getpid())).touch()
        return self.tokenizer.apply_chat_template(messages, **kwargs)


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory):
    return write_rows(make_rows("addition", 4400, seed=3), tmp_path_factory.mktemp("many") / "train.parquet")


def test_filter_overlong_prompts_workers_split_rows_over_processes(tokenizer, many_rows, tmp_path):
    lens = lengths(tokenizer, many_rows)
    limit = max(lens) - 1
    kept = [i for i, n in enumerate(lens) if n <= limit]
    assert 0 < len(kept) < len(lens)
    single = RLHFDataset(many_rows, tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True))
    assert [single[i]["index"] for i in range(len(single))] == kept

    pids = tmp_path / "pids"
    pids.mkdir()
    config = cfg(max_prompt_length=limit, filter_overlong_prompts=True, filter_overlong_prompts_workers=2)
    parallel = RLHFDataset(many_rows, tokenizer, config, processor=PidRecordingRenderer(tokenizer, pids))
    assert parallel.num_filtered == len(lens) - len(kept)
    assert [parallel[i]["index"] for i in range(len(parallel))] == kept
    # the filter ran in two worker processes; later reads render in this one
    assert len({p.name for p in pids.iterdir()} - {str(os.getpid())}) == 2


def test_truncation_error_names_row_and_length(tokenizer, files):
    lens = lengths(tokenizer, files["addition"])
    limit = min(lens)
    first_long = next(i for i, n in enumerate(lens) if n > limit)
    ds = RLHFDataset(files["addition"], tokenizer, cfg(max_prompt_length=limit))
    with pytest.raises(ValueError, match=rf"row {first_long} of .*train\.parquet.* has {lens[first_long]} tokens"):
        ds[first_long]


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes(tokenizer, files, mode):
    rows = pq.read_table(files["addition"]).to_pylist()
    full = templated_ids(tokenizer, rows[0]["prompt"])
    limit = len(full) - 3
    ds = RLHFDataset(files["addition"], tokenizer, cfg(max_prompt_length=limit, truncation=mode))
    item = ds[0]
    expected = {
        "left": full[-limit:],
        "right": full[:limit],
        "middle": full[: limit // 2] + full[len(full) - (limit - limit // 2) :],
    }[mode]
    assert item["raw_prompt_ids"] == expected
    assert item["input_ids"].tolist() == expected and item["attention_mask"].all()


def test_return_raw_input_ids_adds_the_unpadded_templated_ids(tokenizer, files):
    rows = pq.read_table(files["addition"]).to_pylist()
    ds = RLHFDataset(
        files["addition"],
        tokenizer,
        DataConfig(train_files=str(files["addition"]), max_prompt_length=32, return_raw_input_ids=True),
    )
    item = ds[5]
    assert item["raw_input_ids"] == templated_ids(tokenizer, rows[5]["prompt"])
    assert item["raw_input_ids"] == item["input_ids"][item["attention_mask"].bool()].tolist()
    assert len(item["raw_input_ids"]) < 32, "the row is padded, the column is not"
    assert item["raw_input_ids"] is not item["raw_prompt_ids"]
    # through the collate function into a batch, one list per row
    data = DataProto.from_single_dict(collate_fn([ds[0], ds[1]]))
    assert data.non_tensor_batch["raw_input_ids"][1] == templated_ids(tokenizer, rows[1]["prompt"])
    assert "raw_input_ids" not in RLHFDataset(files["addition"], tokenizer, cfg())[5]
    assert "raw_input_ids" not in RLHFDataset(files["addition"], tokenizer, cfg(return_raw_input_ids=False))[5]


def test_raw_input_ids_follow_truncation(tokenizer, files):
    rows = pq.read_table(files["addition"]).to_pylist()
    full = templated_ids(tokenizer, rows[0]["prompt"])
    ds = RLHFDataset(
        files["addition"], tokenizer, cfg(max_prompt_length=len(full) - 2, truncation="left", return_raw_input_ids=True)
    )
    assert ds[0]["raw_input_ids"] == full[2:] == ds[0]["input_ids"].tolist()


def test_collate_makes_a_dataproto(tokenizer, files):
    ds = RLHFDataset(files["addition"], tokenizer, cfg(max_prompt_length=16))
    # Same-length id lists must still become a 1-D object array, one list per sample.
    items = [ds[0], ds[0], ds[1]]
    batch = collate_fn(items)
    assert batch["input_ids"].shape == (3, 16)
    assert batch["raw_prompt_ids"].shape == (3,) and batch["raw_prompt_ids"].dtype == object
    assert batch["raw_prompt_ids"][0] == items[0]["raw_prompt_ids"]
    assert isinstance(batch["reward_model"][2], dict)
    data = DataProto.from_single_dict(batch)
    assert len(data) == 3 and data.non_tensor_batch["data_source"].tolist() == ["synthetic/addition"] * 3
    with pytest.raises(ValueError, match="empty"):
        collate_fn([])


def test_collate_rejects_mixed_tensor_key():
    with pytest.raises(ValueError, match="'x' is a tensor in some items"):
        collate_fn([{"x": torch.zeros(2)}, {"x": [0, 0]}])


CUSTOM_DATASET = """
from torch.utils.data import Dataset
from verl.utils.dataset import RLHFDataset


class TaggedDataset(RLHFDataset):
    def __getitem__(self, index):
        item = super().__getitem__(index)
        item["tag"] = "custom"
        return item


class NotADataset:
    pass
"""


def test_custom_dataset_class(tokenizer, files, tmp_path):
    path = tmp_path / "my_dataset.py"
    path.write_text(CUSTOM_DATASET)
    config = cfg(custom_cls={"path": str(path), "name": "TaggedDataset"})
    ds = create_rl_dataset(str(files["addition"]), config, tokenizer)
    assert type(ds).__name__ == "TaggedDataset" and ds[0]["tag"] == "custom"

    with pytest.raises(TypeError, match="NotADataset.*must be a subclass of torch.utils.data.Dataset"):
        create_rl_dataset(str(files["addition"]), cfg(custom_cls={"path": str(path), "name": "NotADataset"}), tokenizer)
    with pytest.raises(AttributeError, match=r"dataset class 'Missing' not found in .*my_dataset\.py"):
        create_rl_dataset(str(files["addition"]), cfg(custom_cls={"path": str(path), "name": "Missing"}), tokenizer)
    missing = str(tmp_path / "absent.py")
    with pytest.raises(FileNotFoundError, match=missing):
        create_rl_dataset(str(files["addition"]), cfg(custom_cls={"path": missing, "name": "X"}), tokenizer)


def test_default_factory_builds_rlhf_dataset(tokenizer, files):
    ds = create_rl_dataset([str(files["addition"])], cfg(), tokenizer, is_train=False)
    assert type(ds) is RLHFDataset


CUSTOM_SAMPLER = """
from torch.utils.data import Sampler


class ReverseSampler(Sampler):
    def __init__(self, data_source, data_config):
        self.n = len(data_source)

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))

    def __len__(self):
        return self.n
"""


def test_samplers(tmp_path):
    data = list(range(20))
    first = list(create_rl_sampler(cfg(shuffle=True, seed=7), data))
    again = list(create_rl_sampler(cfg(shuffle=True, seed=7), data))
    other = list(create_rl_sampler(cfg(shuffle=True, seed=8), data))
    assert sorted(first) == data and first == again and first != other
    assert list(create_rl_sampler(cfg(shuffle=True, seed=7), data, seed=8)) == other
    assert isinstance(create_rl_sampler(cfg(shuffle=False), data), SequentialSampler)
    # torchdata's sampler saves its generator state, which is what makes resumes exact across epochs.
    assert type(create_rl_sampler(cfg(shuffle=True), data)).__module__.startswith("torchdata")

    path = tmp_path / "my_sampler.py"
    path.write_text(CUSTOM_SAMPLER)
    sampler = create_rl_sampler(cfg(sampler={"class_path": str(path), "class_name": "ReverseSampler"}), data)
    assert list(sampler) == data[::-1]
    with pytest.raises(AttributeError, match="sampler class 'Nope' not found"):
        create_rl_sampler(cfg(sampler={"class_path": str(path), "class_name": "Nope"}), data)


def test_object_arrays_hold_lists_not_matrices():
    batch = collate_fn([{"ids": [1, 2]}, {"ids": [3, 4]}])
    assert batch["ids"].shape == (2,) and batch["ids"][1] == [3, 4]
    assert isinstance(batch["ids"], np.ndarray)
