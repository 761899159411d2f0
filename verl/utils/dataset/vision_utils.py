"""Image and video loading for multimodal rows (verl's ``vision_utils``), with Pillow.

This package's RL and SFT data sets render text only; these helpers exist for recipes that prepare or inspect
multimodal rows themselves. An image is resized so that both sides are multiples of ``2 * image_patch_size`` (the
vision tower merges 2x2 patches) and its pixel count stays within ``[min_pixels, max_pixels]`` (defaults
``4`` and ``16384`` merged patches), which is the sizing Qwen-VL processors expect.
"""

from __future__ import annotations

import base64
import math
import os
from io import BytesIO
from typing import Any

import torch

from verl.utils.extras import MissingExtraError, missing_message

__all__ = ["VIDEO_FORMAT_HELP", "process_image", "process_video", "smart_resize"]

_MIN_MERGED_PATCHES = 4
_MAX_MERGED_PATCHES = 16384

VIDEO_FORMAT_HELP = (
    "a video is a dict {'type': 'video', 'video': [<frame image>, ...]} (a list of frames: paths, file:// URLs, "
    "PIL images or {'bytes': ...}); video files ('video': 'file:///clip.mp4') need qwen-vl-utils "
    "(`pip install qwen-vl-utils`). Optional keys: nframes, or fps with min_frames/max_frames."
)


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise MissingExtraError(
            missing_message("verl.utils.dataset.vision_utils", "image decoding", package="pillow")
        ) from exc
    return Image


def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """``(height, width)`` rounded to multiples of ``factor`` with ``min_pixels <= h * w <= max_pixels``, keeping
    the aspect ratio as closely as the rounding allows."""
    min_pixels = min_pixels if min_pixels is not None else _MIN_MERGED_PATCHES * factor * factor
    max_pixels = max_pixels if max_pixels is not None else _MAX_MERGED_PATCHES * factor * factor
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    return h, w


def _open(source: Any) -> Any:
    Image = _pil()
    if isinstance(source, Image.Image):
        return source
    if isinstance(source, bytes | bytearray):
        return Image.open(BytesIO(source))
    if isinstance(source, str):
        if source.startswith("data:image") and "base64," in source:
            return Image.open(BytesIO(base64.b64decode(source.split("base64,", 1)[1])))
        if source.startswith(("http://", "https://")):
            raise ValueError(f"image {source[:80]!r}: URLs are not downloaded here; pass a local path or bytes")
        path = source.removeprefix("file://")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"image file {path!r} does not exist")
        return Image.open(path)
    raise TypeError(f"cannot read an image from {type(source).__name__}")


def process_image(image: Any, image_patch_size: int = 14) -> Any:
    """A row's image as an RGB ``PIL.Image`` sized for the vision tower.

    ``image`` is a PIL image (converted only), or a dict with ``bytes`` or ``image`` (PIL image, path, ``file://``
    URL or ``data:image/...;base64,`` string) and optional ``min_pixels``, ``max_pixels``,
    ``resized_height``/``resized_width``.
    """
    Image = _pil()
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if not isinstance(image, dict):
        image = {"image": image}
    if "bytes" in image and image.get("image") is not None:
        raise ValueError("an image dict has both 'bytes' and 'image'; give one")
    picture = _open(image["bytes"] if "bytes" in image else image.get("image")).convert("RGB")
    factor = 2 * image_patch_size
    if "resized_height" in image and "resized_width" in image:  # an explicit size, only snapped to the grid
        height, width = (
            max(factor, round(int(image[k]) / factor) * factor) for k in ("resized_height", "resized_width")
        )
    else:
        height, width = smart_resize(
            picture.height, picture.width, factor, image.get("min_pixels"), image.get("max_pixels")
        )
    return picture.resize((width, height)) if (width, height) != picture.size else picture


def _frame_indices(total: int, nframes: int | None, fps: float | None, min_frames: int, max_frames: int) -> list[int]:
    if nframes is None:
        nframes = total if fps is None else round(total / 2.0 * fps)  # frame lists are taken as 2 fps material
    nframes = max(1, min(total, max(min_frames, min(max_frames, nframes))))
    if nframes == total:
        return list(range(total))
    return [round(i * (total - 1) / max(1, nframes - 1)) for i in range(nframes)]


def process_video(
    video: dict,
    image_patch_size: int = 14,
    nframes: int | None = None,
    fps: float | None = None,
    fps_min_frames: int | None = None,
    fps_max_frames: int | None = None,
    return_video_sample_fps: bool = False,
    return_video_metadata: bool = False,
) -> Any:
    """A video as a ``[n_frames, 3, H, W]`` uint8 tensor (see :data:`VIDEO_FORMAT_HELP` for the input format).

    ``nframes`` or ``fps`` (with ``fps_min_frames``/``fps_max_frames``) pick frames when the dict itself does not;
    frames are sampled evenly. A frame list is processed here; a video file is handed to ``qwen_vl_utils``.
    """
    if not isinstance(video, dict) or "video" not in video:
        raise NotImplementedError(VIDEO_FORMAT_HELP)
    if nframes is not None and fps is not None:
        raise ValueError("process_video: give nframes or fps, not both")
    spec = dict(video)
    if "nframes" not in spec and "fps" not in spec:
        if nframes is not None:
            spec["nframes"] = nframes
        elif fps is not None:
            spec["fps"] = fps
            if fps_min_frames is not None:
                spec["min_frames"] = fps_min_frames
            if fps_max_frames is not None:
                spec["max_frames"] = fps_max_frames
    if not isinstance(spec["video"], list | tuple):
        try:
            from qwen_vl_utils import fetch_video
        except ImportError as exc:
            raise MissingExtraError(
                missing_message(
                    "verl.utils.dataset.vision_utils.process_video", "decoding video files", package="qwen-vl-utils"
                )
            ) from exc
        return fetch_video(
            spec,
            image_patch_size=image_patch_size,
            return_video_sample_fps=return_video_sample_fps,
            return_video_metadata=return_video_metadata,
        )
    frames = list(spec["video"])
    if not frames:
        raise ValueError("process_video: the frame list is empty")
    picks = _frame_indices(
        len(frames),
        spec.get("nframes"),
        spec.get("fps"),
        int(spec.get("min_frames", 1)),
        int(spec.get("max_frames", len(frames))),
    )
    first = process_image(frames[picks[0]], image_patch_size)
    images = [first] + [process_image(frames[i], image_patch_size).resize(first.size) for i in picks[1:]]
    import numpy as np

    tensor = torch.from_numpy(np.stack([np.asarray(im) for im in images])).permute(0, 3, 1, 2).contiguous()
    sample_fps = float(spec["fps"]) if spec.get("fps") else 2.0 * len(picks) / len(frames)
    result: Any = tensor
    if return_video_metadata:
        metadata = {"fps": 2.0, "frames_indices": picks, "total_num_frames": len(frames), "video_backend": "frames"}
        result = (tensor, metadata)
    if return_video_sample_fps:
        return result, sample_fps
    return result
