"""model.use_shm / data.use_shm: copies in shared memory, made once per content and read like the originals."""

from __future__ import annotations

import os
import shutil

import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf

from verl.utils.dataset import RLHFDataset
from verl.utils.shm import maybe_shm_copy, shm_copy, shm_root
from verl.utils.synthetic_tasks import write_task_files
from verl.workers.config import HFModelConfig
from verl.workers.fsdp.model_loader import resolve_model_path


@pytest.fixture
def shm_dir(monkeypatch, tmp_path):
    """A private root under the real /dev/shm (removed afterwards), so tests neither see nor leave other copies."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    root = f"/dev/shm/verl-test-{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv("VERL_SHM_DIR", root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_folder_is_copied_once_per_content(shm_dir, tmp_path):
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "config.json").write_text('{"a": 1}')
    (source / "weights.bin").write_bytes(b"\x01" * 1000)
    first = shm_copy(source)
    assert str(first).startswith(shm_dir) and first.name == "ckpt"
    assert (first / "weights.bin").read_bytes() == b"\x01" * 1000
    copied_at = (first / "config.json").stat().st_mtime_ns
    assert shm_copy(source) == first  # unchanged source: the same copy, not copied again
    assert (first / "config.json").stat().st_mtime_ns == copied_at
    (source / "weights.bin").write_bytes(b"\x02" * 1000)
    second = shm_copy(source)
    assert second != first and (second / "weights.bin").read_bytes() == b"\x02" * 1000
    assert not [p for p in shm_root().rglob("*.partial")]


def test_disabled_or_unavailable_reads_in_place(monkeypatch, tmp_path, caplog):
    path = tmp_path / "f.parquet"
    path.write_bytes(b"x")
    assert maybe_shm_copy(path, False, "data.use_shm") == str(path)
    monkeypatch.setenv("VERL_SHM_DIR", str(tmp_path / "no_such_dir" / "verl"))
    assert maybe_shm_copy(path, True, "data.use_shm") == str(path)
    assert "data.use_shm=true but" in caplog.text
    with pytest.raises(FileNotFoundError, match="use_shm: .*missing"):
        shm_copy(tmp_path / "missing")


def test_model_use_shm_loads_the_same_checkpoint_from_shared_memory(shm_dir, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(HFModelConfig(path=str(tiny_model_dir), use_shm=True))
    assert path.startswith(shm_dir)
    assert resolve_model_path(HFModelConfig(path=str(tiny_model_dir))) == str(tiny_model_dir)
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    copy = AutoModelForCausalLM.from_pretrained(path)
    for (name, a), (_, b) in zip(original.state_dict().items(), copy.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_data_use_shm_reads_the_copy_and_names_the_original(shm_dir, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    train = write_task_files("addition", tmp_path / "data", train_size=6, test_size=2)["train"]
    ds = RLHFDataset(train, tokenizer, OmegaConf.create({"max_prompt_length": 32, "use_shm": True}))
    copies = list(shm_root().rglob("train.parquet"))
    assert len(copies) == 1 and pq.read_table(copies[0]).equals(pq.read_table(train))
    assert ds.data_files == [str(train)] and ds.describe_row(0) == f"row 0 of {train}"
    assert ds[0]["raw_prompt"] == pq.read_table(train).to_pylist()[0]["prompt"]
