"""RMDataset (preference pairs), the SFT tensor collator and the Pillow image/video helpers."""

from __future__ import annotations

import base64
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl.utils.dataset import RMDataset
from verl.utils.dataset.dataset_utils import DatasetPadMode, SFTTensorCollator
from verl.utils.dataset.vision_utils import process_image, process_video, smart_resize

Image = pytest.importorskip("PIL.Image")


class _CharTokenizer:
    eos_token_id = 2

    def __call__(self, text):
        return {"input_ids": [ord(c) for c in text]}


def _write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_rm_dataset_pairs_chosen_first_with_eos_and_padding(tmp_path):
    path = _write(
        tmp_path / "rm.parquet",
        [{"prompt": "ab", "chosen": "c", "rejected": "dd"}, {"prompt": "x", "chosen": "yyyyyyyy", "rejected": "z"}],
    )
    data = RMDataset(path, _CharTokenizer(), max_length=5)
    assert len(data) == 2
    item = data[0]
    assert item["input_ids"].shape == (2, 5)
    assert item["input_ids"][0].tolist() == [97, 98, 99, 2, 0]
    assert item["input_ids"][1].tolist() == [97, 98, 100, 100, 2]
    assert item["attention_mask"][0].tolist() == [1, 1, 1, 1, 0]
    assert data[1]["attention_mask"][0].tolist() == [1] * 5  # cut to max_length


def test_rm_dataset_sampling_and_missing_columns(tmp_path):
    rows = [{"prompt": str(i), "chosen": "a", "rejected": "b"} for i in range(10)]
    path = _write(tmp_path / "rm.parquet", rows)
    assert RMDataset(path, _CharTokenizer(), max_samples=3).prompts == ["0", "1", "2"]
    picked = RMDataset([path], _CharTokenizer(), max_samples=3, shuffle=True, seed=0).prompts
    assert (
        len(set(picked)) == 3
        and picked == RMDataset(path, _CharTokenizer(), max_samples=3, shuffle=True, seed=0).prompts
    )
    bad = _write(tmp_path / "bad.parquet", [{"prompt": "a", "good": "b"}])
    with pytest.raises(KeyError, match="bad.parquet.*'chosen'"):
        RMDataset(bad, _CharTokenizer())


def test_sft_collator_stacks_or_nests():
    batch = [{"input_ids": torch.arange(3), "tag": "a"}, {"input_ids": torch.arange(5), "tag": "b"}]
    nested = SFTTensorCollator(DatasetPadMode.NO_PADDING)(batch)
    assert nested["input_ids"].is_nested and nested["input_ids"].offsets().tolist() == [0, 3, 8]
    assert nested["tag"].tolist() == ["a", "b"]
    padded = SFTTensorCollator("right")([{"input_ids": torch.arange(3)}, {"input_ids": torch.arange(3)}])
    assert padded["input_ids"].shape == (2, 3)
    with pytest.raises(ValueError):
        SFTTensorCollator("diagonal")


def _png(size=(100, 50), color=(255, 0, 0)):
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_smart_resize_keeps_multiples_and_bounds():
    assert smart_resize(50, 100, factor=28) == (56, 112)
    h, w = smart_resize(4000, 4000, factor=28, max_pixels=28 * 28 * 100)
    assert h % 28 == w % 28 == 0 and h * w <= 28 * 28 * 100
    h, w = smart_resize(10, 10, factor=28, min_pixels=28 * 28 * 4)
    assert h * w >= 28 * 28 * 4


def test_process_image_from_every_source(tmp_path):
    raw = _png()
    path = tmp_path / "img.png"
    path.write_bytes(raw)
    for source in (
        {"bytes": raw},
        {"image": str(path)},
        {"image": f"file://{path}"},
        {"image": "data:image/png;base64," + base64.b64encode(raw).decode()},
        str(path),
    ):
        image = process_image(source)
        assert image.mode == "RGB" and image.size == (112, 56)
    assert process_image(Image.new("L", (3, 3))).mode == "RGB"
    assert process_image({"bytes": raw, "resized_height": 30, "resized_width": 30}).size == (28, 28)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        process_image({"image": str(tmp_path / "none.png")})
    with pytest.raises(ValueError, match="both 'bytes' and 'image'"):
        process_image({"bytes": raw, "image": str(path)})


def test_process_video_from_frames():
    frames = [{"bytes": _png(color=(i * 40, 0, 0))} for i in range(5)]
    video = process_video({"type": "video", "video": frames}, nframes=3)
    assert video.shape == (3, 3, 56, 112) and video.dtype == torch.uint8
    assert video[:, 0, 0, 0].tolist() == [0, 80, 160]  # evenly sampled frames
    with pytest.raises(NotImplementedError, match="a video is a dict"):
        process_video(["not", "a", "dict"])


def test_video_files_need_qwen_vl_utils():
    try:
        import qwen_vl_utils  # noqa: F401
    except ImportError:
        from verl.utils.extras import MissingExtraError

        with pytest.raises(MissingExtraError, match="qwen-vl-utils"):
            process_video({"type": "video", "video": "file:///clip.mp4"})
    else:
        pytest.skip("qwen-vl-utils is installed")
