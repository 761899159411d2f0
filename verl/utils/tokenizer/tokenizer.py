"""Loading Hugging Face tokenizers/processors the way verl's workers expect them, and flattening token-id outputs.

Recipes call :func:`hf_tokenizer` instead of ``AutoTokenizer.from_pretrained`` because RL code needs a pad token
(left-padding prompts) and Gemma-2's ambiguous EOS fixed. :func:`normalize_token_ids` exists because
``apply_chat_template(tokenize=True)`` returns a plain list, a nested list or a ``BatchEncoding`` depending on the
transformers version; every caller wants a flat ``list[int]``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = [
    "build_multimodal_processor_inputs",
    "get_processor_token_id",
    "hf_processor",
    "hf_tokenizer",
    "normalize_token_ids",
    "set_pad_token_id",
]

logger = logging.getLogger(__name__)

# Gemma-2-2b-it declares <eos> as EOS but ends its turns with <end_of_turn> (id 107): generation would never stop.
_GEMMA2_MARKER = "gemma-2-2b-it"
_GEMMA2_EOS = ("<end_of_turn>", 107)


def normalize_token_ids(tokenized_output: Any) -> list[int]:
    """A flat ``list[int]`` from a list, tuple, tensor/array, a batch of one, or a mapping/encoding with
    ``input_ids``. Raises :class:`TypeError` naming the offending value otherwise."""
    ids = tokenized_output
    if isinstance(ids, Mapping):
        ids = ids.get("input_ids", ids)
    elif hasattr(ids, "input_ids"):
        ids = ids.input_ids
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, tuple):
        ids = list(ids)
    if isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], list | tuple):
        ids = list(ids[0])  # a batch holding one sequence
    if not isinstance(ids, list):
        raise TypeError(f"expected token ids (a list of ints), got {type(ids).__name__}: {ids!r}")
    out: list[int] = []
    for position, value in enumerate(ids):
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise TypeError(f"token id at position {position} is not an integer: {type(value).__name__} {value!r}")
        out.append(int(value))
    return out


def get_processor_token_id(processor: Any, token_name: str) -> int | None:
    """The id of a processor's special token ``token_name`` (``"image"``, ``"video"``, ``"audio"``): its
    ``<name>_token_id`` attribute, else its ``<name>_token`` string converted by the wrapped tokenizer; None when
    there is no processor or no such token."""
    if processor is None:
        return None
    direct = getattr(processor, f"{token_name}_token_id", None)
    if direct is not None:
        return int(direct)
    token = getattr(processor, f"{token_name}_token", None)
    tokenizer = getattr(processor, "tokenizer", None)
    if token is None or tokenizer is None:
        return None
    converted = tokenizer.convert_tokens_to_ids(token)
    return None if converted is None else int(converted)


def _videos_and_metadata(videos: Any) -> tuple[list | None, list | None]:
    """Videos may come as ``(frames, metadata)`` pairs (what :func:`process_video` returns with metadata)."""
    if videos is None:
        return None, None
    videos = list(videos)
    if videos and isinstance(videos[0], tuple):
        return [v[0] for v in videos], [v[1] for v in videos]
    return videos, None


def build_multimodal_processor_inputs(
    processor: Any,
    *,
    text: Any,
    images: Any = None,
    videos: Any = None,
    audio: Any = None,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
    return_tensors: str = "pt",
) -> Any:
    """Call ``processor`` on text plus media with the keyword arguments each modality needs.

    ``mm_processor_kwargs`` (``data.mm_processor_kwargs``) are passed through; audio gets the feature extractor's
    ``sampling_rate`` unless given; videos given with metadata switch the processor's own frame sampling off (the
    frames were sampled already).
    """
    kwargs = dict(mm_processor_kwargs or {})
    kwargs.setdefault("return_tensors", return_tensors)
    if audio is not None and "sampling_rate" not in kwargs:
        rate = getattr(getattr(processor, "feature_extractor", None), "sampling_rate", None)
        if rate is not None:
            kwargs["sampling_rate"] = int(rate)
    videos, metadata = _videos_and_metadata(videos)
    if metadata is not None:
        kwargs.setdefault("video_metadata", metadata)
        kwargs.setdefault("do_sample_frames", False)
    inputs: dict[str, Any] = {"text": text, "images": images, "videos": videos, **kwargs}
    if audio is not None:
        inputs["audio"] = audio
    return processor(**inputs)


def set_pad_token_id(tokenizer: Any) -> None:
    """Use EOS as the pad token when the tokenizer has none (RL batches are padded; most base models lack one)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
        warnings.warn(f"tokenizer has no pad_token_id; using eos_token_id={tokenizer.eos_token_id}", stacklevel=2)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        warnings.warn(f"tokenizer has no pad_token; using eos_token={tokenizer.eos_token!r}", stacklevel=2)


def hf_tokenizer(name_or_path: Any, correct_pad_token: bool = True, correct_gemma2: bool = True, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(name_or_path, **kwargs)`` with a pad token guaranteed
    (``correct_pad_token``) and Gemma-2-2b-it's EOS set to ``<end_of_turn>`` (``correct_gemma2``)."""
    from transformers import AutoTokenizer

    if correct_gemma2 and isinstance(name_or_path, str) and _GEMMA2_MARKER in name_or_path:
        warnings.warn(
            f"{name_or_path}: using eos_token={_GEMMA2_EOS[0]!r} (id {_GEMMA2_EOS[1]}) as Gemma-2's EOS", stacklevel=2
        )
        kwargs["eos_token"], kwargs["eos_token_id"] = _GEMMA2_EOS
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if correct_pad_token:
        set_pad_token_id(tokenizer)
    return tokenizer


def hf_processor(name_or_path: Any, **kwargs: Any) -> Any:
    """The multimodal processor of a model, or None for a text-only model.

    Recent transformers fall back to the tokenizer when a model has no processor; that is reported as None, so
    callers use :func:`hf_tokenizer` for text. A processor that fails to load is also None, with a warning naming
    the path (verl treats processors as optional). Note that this package's RL and SFT data sets render text only.
    """
    from transformers import AutoProcessor, PreTrainedTokenizerBase

    try:
        processor = AutoProcessor.from_pretrained(name_or_path, **kwargs)
    except Exception as exc:  # processors are optional: a missing/broken one must not stop text training
        warnings.warn(f"no processor loaded from {name_or_path!r}: {exc}", stacklevel=2)
        return None
    if isinstance(processor, PreTrainedTokenizerBase) or "Processor" not in type(processor).__name__:
        return None
    return processor
