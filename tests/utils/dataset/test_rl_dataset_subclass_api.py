"""verl's RLHFDataset subclass API over real parquet files and the tiny model's tokenizer: max_samples, the loading
hooks a subclass overrides, the length filter, resume, split, pickling and the refused multi-modal methods."""

import asyncio
import json
import os
import pickle
import stat

import numpy as np
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from verl.trainer.config.data_config import DataConfig
from verl.utils.dataset import RLHFDataset
from verl.utils.synthetic_tasks import make_rows, write_rows, write_task_files

ROWS = 24


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return str(write_task_files("addition", tmp_path_factory.mktemp("data"), train_size=ROWS, test_size=2)["train"])


def cfg(**overrides):
    # shuffle=false: these tests keep the first max_samples rows; a block without the key takes DataConfig's
    # default (true, verl's YAML), under which max_samples is a draw (test_a_bare_block_takes_dataconfig_defaults)
    base = {"max_prompt_length": 256, "truncation": "error", "shuffle": False}
    base.update(overrides)
    return OmegaConf.create(base)


def indices(ds):
    return [ds[i]["index"] for i in range(len(ds))]


def templated_len(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


# ------------------------------------------------------------------------------------------- constructor


UPSTREAM_NAMES = (
    "_build_messages _download _extract_audio_info _process_multi_modal_info _read_files_and_tokenize audio_key "
    "cache_dir chat_template_func filter_prompts function_tool_path image_key image_patch_size max_samples "
    "maybe_filter_out_long_prompts mm_processor_kwargs need_tools_kwargs num_workers original_data_files "
    "process_multi_modal_info process_vision_info resume_dataset_state return_multi_modal_inputs seed "
    "serialize_dataset shuffle split tool_config_path tool_schemas use_shm video_key"
).split()


def test_upstream_signature_and_attributes(tokenizer, train):
    config = cfg(
        cache_dir="~/my_cache",
        image_key="pics",
        shuffle=True,
        seed=5,
        filter_overlong_prompts_workers=3,
        tool_config_path="tools.yaml",
        mm_processor_kwargs={"fps": 2},
    )
    ds = RLHFDataset(data_files=train, tokenizer=tokenizer, config=config, processor=None, max_samples=4)
    assert [name for name in UPSTREAM_NAMES if not hasattr(ds, name)] == []
    assert ds.max_samples == 4 and len(ds) == 4
    assert ds.cache_dir == os.path.expanduser("~/my_cache")
    assert (ds.image_key, ds.video_key, ds.audio_key, ds.image_patch_size) == ("pics", "videos", "audios", 14)
    assert (ds.shuffle, ds.seed, ds.num_workers, ds.use_shm, ds.serialize_dataset) == (True, 5, 3, False, False)
    assert ds.tool_config_path == "tools.yaml" and ds.tool_schemas is None and ds.mm_processor_kwargs == {"fps": 2}
    assert ds.data_files == ds.original_data_files == [train]


def test_typed_data_config_reads_the_same_keys(tokenizer, train):
    config = DataConfig(train_files=train, max_prompt_length=64, shuffle=False, seed=9, image_patch_size=16)
    ds = RLHFDataset([train], tokenizer, config, max_samples=3)
    assert (ds.shuffle, ds.seed, ds.image_patch_size, len(ds)) == (False, 9, 16, 3)


# ------------------------------------------------------------------------------------------- max_samples


def test_max_samples_without_shuffle_keeps_the_first_rows(tokenizer, train):
    assert indices(RLHFDataset(train, tokenizer, cfg(), max_samples=5)) == [0, 1, 2, 3, 4]
    for keep_all in (-1, 0, ROWS, ROWS + 10):
        assert len(RLHFDataset(train, tokenizer, cfg(), max_samples=keep_all)) == ROWS


def test_max_samples_with_shuffle_is_a_seeded_draw(tokenizer, train):
    first = indices(RLHFDataset(train, tokenizer, cfg(shuffle=True, seed=7), max_samples=6))
    again = indices(RLHFDataset(train, tokenizer, cfg(shuffle=True, seed=7), max_samples=6))
    other = indices(RLHFDataset(train, tokenizer, cfg(shuffle=True, seed=8), max_samples=6))
    assert first == again != other
    assert len(set(first)) == 6
    # verl's draw: numpy's generator seeded with data.seed, without replacement, in drawn order
    assert first == np.random.default_rng(7).choice(ROWS, size=6, replace=False).tolist()


def test_max_samples_unseeded_draw_survives_a_re_read(tokenizer, train):
    ds = RLHFDataset(train, tokenizer, cfg(shuffle=True), max_samples=6)
    kept = indices(ds)
    assert len(set(kept)) == 6
    ds.resume_dataset_state()
    assert indices(ds) == kept


# ------------------------------------------------------------------------------------------- subclass hooks


class FirstHalf(RLHFDataset):
    """Reads the files itself, then runs the base filter, as verl subclasses do."""

    def _read_files_and_tokenize(self):
        import datasets

        frame = datasets.Dataset.from_list(pq.read_table(self.data_files[0]).to_pylist()[: ROWS // 2])
        self.dataframe = self.maybe_filter_out_long_prompts(frame.map(lambda row: {"tag": "half"}))


class WithSystemPrompt(RLHFDataset):
    SYSTEM = "You are a careful calculator. Show every step of the work before the final answer."

    def _build_messages(self, example, key=None):
        return [{"role": "system", "content": self.SYSTEM}, *super()._build_messages(example, key)]


def test_subclass_read_files_and_tokenize_takes_effect(tokenizer, train):
    ds = FirstHalf(train, tokenizer, cfg())
    assert len(ds) == ROWS // 2
    assert ds[3]["tag"] == "half" and ds[3]["index"] == 3
    assert ds.describe_row(3) == f"dataset index 3 of {train}"  # its own rows: no file row to name
    assert [part[0]["index"] for part in ds.split(3)] == [0, 4, 8]


def test_subclass_build_messages_reaches_items_and_the_length_filter(tokenizer, train):
    plain = RLHFDataset(train, tokenizer, cfg())
    custom = WithSystemPrompt(train, tokenizer, cfg())
    item = custom[2]
    assert item["raw_prompt"][0] == {"role": "system", "content": WithSystemPrompt.SYSTEM}
    assert item["raw_prompt"][1:] == plain[2]["raw_prompt"]
    assert len(item["raw_prompt_ids"]) == templated_len(tokenizer, item["raw_prompt"]) > len(plain[2]["raw_prompt_ids"])

    # a limit every plain prompt fits but no prompt with the system turn does
    limit = max(len(plain[i]["raw_prompt_ids"]) for i in range(ROWS))
    assert len(RLHFDataset(train, tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True))) == ROWS
    filtered = WithSystemPrompt(train, tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True))
    assert len(filtered) == 0 and filtered.num_filtered == ROWS


# ------------------------------------------------------------------------------------------- length filter


def test_maybe_filter_out_long_prompts(tokenizer, train):
    rows = pq.read_table(train).to_pylist()
    lens = [templated_len(tokenizer, row["prompt"]) for row in rows]
    limit = max(lens) - 1
    kept = [i for i, n in enumerate(lens) if n <= limit]
    assert 0 < len(kept) < ROWS

    ds = RLHFDataset(train, tokenizer, cfg(max_prompt_length=limit))  # filter off: the frame comes back as it is
    assert ds.maybe_filter_out_long_prompts(ds.dataframe) is ds.dataframe and ds.num_filtered == 0

    ds.filter_overlong_prompts = True
    shorter = ds.maybe_filter_out_long_prompts()  # default: self.dataframe
    assert [row["extra_info"]["index"] for row in shorter] == kept
    assert ds.num_filtered == ROWS - len(kept) and len(ds) == ROWS, "the caller decides what to keep"
    ds.dataframe = shorter
    assert indices(ds) == kept
    assert ds.describe_row(1) == f"row {kept[1]} of {train}"


def test_the_filter_runs_after_max_samples(tokenizer, train):
    lens = [templated_len(tokenizer, row["prompt"]) for row in pq.read_table(train).to_pylist()]
    limit = max(lens) - 1
    ds = RLHFDataset(train, tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True), max_samples=8)
    expected = [i for i in range(8) if lens[i] <= limit]
    assert 0 < len(expected) < 8 and indices(ds) == expected
    assert ds.num_filtered == sum(lens[i] > limit for i in range(8))


# ------------------------------------------------------------------------------------------- resume, pickle


def test_resume_dataset_state_reads_the_original_files_again(tokenizer, train):
    ds = RLHFDataset(train, tokenizer, cfg())
    ds.dataframe = ds.dataframe.select([0])
    ds.data_files = ["/elsewhere/train.parquet"]
    ds.resume_dataset_state()
    assert len(ds) == ROWS and ds.data_files == [train] and ds.serialize_dataset is False
    assert ds.describe_row(5) == f"row 5 of {train}"


def test_pickles_leave_the_rows_out_unless_serialize_dataset(tokenizer, tmp_path):
    path = write_rows(make_rows("addition", ROWS), tmp_path / "train.parquet")
    ds = RLHFDataset(str(path), tokenizer, cfg())
    slim = pickle.dumps(ds)
    assert indices(pickle.loads(slim)) == indices(ds), "the copy reads its rows again"
    ds.serialize_dataset = True
    full = pickle.dumps(ds)
    assert len(full) > len(slim)
    os.remove(path)
    assert indices(pickle.loads(full)) == indices(ds), "a pickle with its rows needs no file"
    with pytest.raises(FileNotFoundError, match="train.parquet"):
        pickle.loads(slim)


# ------------------------------------------------------------------------------------------- split


def test_split_gives_equal_consecutive_parts(tokenizer, train, caplog):
    ds = WithSystemPrompt(train, tokenizer, cfg(), max_samples=ROWS - 1)
    parts = ds.split(5)
    assert "dropping the last 3 of 23 rows" in caplog.text
    assert [len(part) for part in parts] == [4] * 5
    assert [indices(part) for part in parts] == [list(range(i, i + 4)) for i in range(0, 20, 4)]
    assert all(type(part) is WithSystemPrompt for part in parts)
    assert parts[1][0]["raw_prompt"][0]["role"] == "system"
    assert parts[2].describe_row(1) == f"row 9 of {train}"
    assert len(ds) == ROWS - 1 and ds.describe_row(9) == f"row 9 of {train}", "the whole set is unchanged"
    # a part read again (resume, unpickling) is the same part
    parts[3].resume_dataset_state()
    assert indices(parts[3]) == [12, 13, 14, 15]
    assert indices(pickle.loads(pickle.dumps(parts[4].split(2)[1]))) == [18, 19]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_split_refuses_a_bad_count(tokenizer, train, bad):
    with pytest.raises(ValueError, match="num_splits must be a positive integer"):
        RLHFDataset(train, tokenizer, cfg()).split(bad)


def test_split_refuses_an_empty_set(tokenizer, train):
    ds = RLHFDataset(train, tokenizer, cfg(max_prompt_length=2, filter_overlong_prompts=True))
    assert len(ds) == 0
    with pytest.raises(ValueError, match="cannot split an empty data set"):
        ds.split(2)


# ------------------------------------------------------------------------------------------- files


def test_download_copies_hdfs_files_into_the_cache_dir(tokenizer, train, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "hdfs"  # a stand-in for Hadoop's CLI that serves hdfs://data/train.parquet
    script.write_text(f'#!/bin/sh\n[ "$2" = -get ] && [ "$3" = hdfs://data/train.parquet ] && cp "{train}" "$4"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    ds = RLHFDataset("hdfs://data/train.parquet", tokenizer, cfg(cache_dir=str(tmp_path / "cache")), max_samples=2)
    assert ds.original_data_files == ["hdfs://data/train.parquet"]
    assert ds.data_files[0].startswith(str(tmp_path / "cache")) and os.path.isfile(ds.data_files[0])
    assert indices(ds) == [0, 1]


def test_json_and_jsonl_files(tokenizer, tmp_path):
    rows = make_rows("addition", 4)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    ds = RLHFDataset([str(tmp_path / "rows.json"), str(tmp_path / "rows.jsonl")], tokenizer, cfg())
    assert indices(ds) == [0, 1, 2, 3] * 2
    assert ds[5]["raw_prompt"] == rows[1]["prompt"]
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"cannot read the rows of .*bad\.json"):
        RLHFDataset(str(tmp_path / "bad.json"), tokenizer, cfg())


# ------------------------------------------------------------------------------------------- multi-modal

IMAGE_MESSAGES = [{"role": "user", "content": [{"type": "image", "image": "cat.png"}, {"type": "text", "text": "?"}]}]
AUDIO_MESSAGES = [
    {"role": "user", "content": [{"type": "audio", "audio": "a.wav"}, {"type": "audio", "audio_url": "b.wav"}]},
    {"role": "user", "content": [{"type": "audio", "path": "c.wav"}, {"type": "text", "text": "transcribe"}]},
]
TEXT_MESSAGES = [{"role": "user", "content": "What is 1+1?"}]


def test_multi_modal_methods_answer_for_text_messages():
    assert RLHFDataset._process_multi_modal_info(TEXT_MESSAGES, 14, None) == (None, None, None)
    assert asyncio.run(RLHFDataset.process_multi_modal_info(TEXT_MESSAGES, image_patch_size=14, config=None)) == (
        None,
        None,
        None,
    )
    assert asyncio.run(RLHFDataset.process_vision_info(TEXT_MESSAGES, 14, None)) == (None, None)
    assert RLHFDataset._extract_audio_info(TEXT_MESSAGES) is None
    assert RLHFDataset._extract_audio_info(AUDIO_MESSAGES) == ["a.wav", "b.wav", {"path": "c.wav"}]


@pytest.mark.parametrize(
    "method, call",
    [
        ("_process_multi_modal_info", lambda: RLHFDataset._process_multi_modal_info(IMAGE_MESSAGES, 14, None)),
        ("_process_multi_modal_info", lambda: RLHFDataset._process_multi_modal_info(AUDIO_MESSAGES, 14, None)),
        # the async form runs the one above, as verl's does
        ("_process_multi_modal_info", lambda: asyncio.run(RLHFDataset.process_multi_modal_info(IMAGE_MESSAGES))),
        ("process_vision_info", lambda: asyncio.run(RLHFDataset.process_vision_info(IMAGE_MESSAGES, 14, None))),
    ],
)
def test_multi_modal_methods_refuse_media(method, call):
    with pytest.raises(NotImplementedError, match=rf"^RLHFDataset\.{method}: .*not supported in this build"):
        call()


def test_rows_with_images_are_refused_by_build_messages(tokenizer, tmp_path):
    rows = make_rows("addition", 3)
    rows[1]["images"] = [{"bytes": b"\x89PNG"}]
    rows[0]["images"] = rows[2]["images"] = []
    ds = RLHFDataset(str(write_rows(rows, tmp_path / "mm.parquet")), tokenizer, cfg())
    assert ds[0]["images"] == [] and ds[2]["index"] == 2  # an empty media column is a text row
    with pytest.raises(NotImplementedError, match=r"RLHFDataset\._build_messages: .*\['images'\].*not supported"):
        ds[1]
    with pytest.raises(NotImplementedError, match=r"_build_messages"):
        RLHFDataset(str(tmp_path / "mm.parquet"), tokenizer, cfg(filter_overlong_prompts=True))
