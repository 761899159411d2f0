"""What RLHFDataset's multi-modal methods share: finding media in chat messages, and the error that refuses them.

verl's RLHFDataset turns ``<image>``/``<video>``/``<audio>`` placeholders into structured message content and decodes
the media for the processor. This build's data path renders text prompts only, so its multi-modal methods answer for
media-free messages (there is nothing to extract) and refuse the rest, naming the method, instead of training a
vision model on prompts whose media were silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["MEDIA_TYPES", "extract_audio", "media_types", "multi_modal_refusal"]

# Structured content item types that carry media (``{"type": "image", "image": ...}`` and so on).
MEDIA_TYPES = ("image", "video", "audio")


def _content_items(messages: Iterable[dict]) -> Iterable[dict]:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from (item for item in content if isinstance(item, dict))


def media_types(messages: Iterable[dict], types: Iterable[str] = MEDIA_TYPES) -> list[str]:
    """The media types (among ``types``) that structured content items of ``messages`` carry, sorted."""
    wanted = set(types)
    return sorted({item.get("type") for item in _content_items(messages)} & wanted)


def extract_audio(messages: Iterable[dict]) -> list[Any] | None:
    """The audio payload of every audio item, in message order: its ``audio`` or ``audio_url`` value, else the item's
    other keys; ``None`` when there is none (verl's convention for "no audio")."""
    audios = []
    for item in _content_items(messages):
        if item.get("type") != "audio":
            continue
        if "audio" in item:
            audios.append(item["audio"])
        elif "audio_url" in item:
            audios.append(item["audio_url"])
        else:
            audios.append({key: value for key, value in item.items() if key != "type"})
    return audios or None


def multi_modal_refusal(method: str, found: str) -> NotImplementedError:
    """The error of a multi-modal RLHFDataset method given media: ``found`` says what was found and where."""
    return NotImplementedError(
        f"RLHFDataset.{method}: {found}, but multi-modal rows (images, videos, audio) are not supported in this "
        "build: its data sets and agent loops render text prompts only. Use text-only rows; code that prepares "
        "media itself can use verl.utils.dataset.vision_utils.process_image / process_video"
    )
