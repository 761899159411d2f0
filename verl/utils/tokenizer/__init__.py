"""Tokenizer and processor helpers (verl's ``verl.utils.tokenizer``): loading, token-id normalisation, chat
templates. transformers is imported only when a function that needs it is called."""

from verl.utils.tokenizer.tokenizer import (
    build_multimodal_processor_inputs,
    get_processor_token_id,
    hf_processor,
    hf_tokenizer,
    normalize_token_ids,
    set_pad_token_id,
)

__all__ = [
    "build_multimodal_processor_inputs",
    "get_processor_token_id",
    "hf_processor",
    "hf_tokenizer",
    "normalize_token_ids",
    "set_pad_token_id",
]
