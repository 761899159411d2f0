"""Tiny-model kit: a real Hugging Face checkpoint folder built locally, without any model hub.

Tests and the demo load it with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(path)`` exactly as users load
real checkpoints, so every code path that touches a model is exercised end to end on a laptop CPU.

Design choices (the demo: docs/quickstart.md):

* Llama architecture: for Qwen2 configs ``AutoTokenizer`` forces a byte-level BPE class that drops the space token.
* Char-level ``WordLevel`` vocabulary: one token per character, so "fraction of response tokens equal to d" style
  rewards are exact, and any printable ASCII text (tool-call JSON included) round-trips through encode/decode.
* No post-processor: ``tokenizer(text)`` adds no ``<bos>``; the chat template writes ``<bos>`` itself, which is what
  the RL data path uses (``apply_chat_template`` then ``add_special_tokens=False``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path

# Sentinel for ``model.path``: "build the project's tiny demo model (this kit) and use that folder". It lets
# `python -m verl.trainer.main_ppo` run with no arguments on a machine that cannot reach a model hub.
BUILTIN_TINY_MODEL = "verl:tiny-demo"

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
# Tool markers are ordinary added tokens (not "special"), so decode(skip_special_tokens=True) keeps them and a
# tool-call parser can still find them in the decoded response.
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, *ROLE_TOKENS)
# Every printable ASCII character plus newline and tab: digits, both letter cases, space and all punctuation.
DEFAULT_CHARSET = "\n\t" + "".join(chr(c) for c in range(32, 127))
assert set(string.digits + string.ascii_letters + " =+-*/(),:.?!{}[]\"'_") <= set(DEFAULT_CHARSET)

# Bump when the files the kit writes change, so cached folders built by an older kit are not reused.
KIT_VERSION = 1

# Roles: system / user / assistant / tool. A leading system message (or a non-empty ``tools`` list) opens a system
# turn; tools are printed there, one JSON object per line. Assistant turns end with <eos>, which is the token the
# policy learns to stop on; tool calls are rendered as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
# A message without a role renders nothing, so ``apply_chat_template([{}])`` yields just the prefix (<bos>), which
# multi-turn agents use to strip the prefix off incrementally rendered turns.
CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is none -%}"
    "{%- elif content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{{- bos_token -}}"
    "{%- if messages and messages[0].role is defined and messages[0].role == 'system' -%}"
    "{%- set system_message = messages[0] -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system_message = none -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- if system_message is not none or tools -%}"
    "<|system|>"
    "{%- if system_message is not none -%}{{ render_content(system_message.content) }}{%- endif -%}"
    "{%- if tools -%}"
    "{%- if system_message is not none and system_message.content -%}{{ '\\n' }}{%- endif -%}"
    "{{- 'Tools:\\n' -}}"
    "{%- for tool in tools -%}"
    "{{- (tool.function if tool.function is defined else tool) | tojson -}}{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role is not defined -%}"
    "{%- elif message.role == 'user' -%}<|user|>{{ render_content(message.content) }}"
    "{%- elif message.role == 'system' -%}<|system|>{{ render_content(message.content) }}"
    "{%- elif message.role == 'assistant' -%}<|assistant|>{{ render_content(message.content) }}"
    "{%- if message.tool_calls is defined and message.tool_calls -%}"
    "{%- for call in message.tool_calls -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    '<tool_call>{"name": {{ fn.name | tojson }}, '
    '"arguments": {{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}}</tool_call>'
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- eos_token -}}"
    "{%- elif message.role == 'tool' -%}<|tool|><tool_response>{{ render_content(message.content) }}</tool_response>"
    "{%- else -%}{{ raise_exception('tiny model chat template: unknown role ' ~ message.role) }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def _check_charset(charset: str) -> None:
    if not charset:
        raise ValueError("charset must contain at least one character")
    seen: set[str] = set()
    for ch in charset:
        if ch in seen:
            raise ValueError(f"charset has the character {ch!r} twice")
        seen.add(ch)


def build_tokenizer(charset: str = DEFAULT_CHARSET):
    """A char-level ``PreTrainedTokenizerFast``: special + tool tokens first (ids 0..11), then one id per character.

    Characters outside ``charset`` encode to ``<unk>``.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    _check_charset(charset)
    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *TOOL_TOKENS, *charset))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Isolate every single character (newlines included), keeping spaces as tokens of their own.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse joins tokens with no separator (the WordLevel default would insert spaces between characters).
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _check_sizes(
    hidden_size: int, num_hidden_layers: int, num_attention_heads: int, num_key_value_heads: int, **others: int
) -> None:
    sizes = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        **others,
    )
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if hidden_size % num_attention_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_attention_heads={num_attention_heads}")
    if num_attention_heads % num_key_value_heads:
        raise ValueError(
            f"num_attention_heads={num_attention_heads} must be divisible by num_key_value_heads={num_key_value_heads}"
        )


def _pin_tokenizer_class(out_dir: Path) -> None:
    """Name the generic fast-tokenizer class, which every transformers version maps to ``tokenizer.json`` as saved.

    Without it a loader may pick the model type's own tokenizer class (LlamaTokenizer), which rebuilds the vocabulary
    its own way and loses the space token.
    """
    path = out_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def build_tiny_model(
    out_dir: str | os.PathLike,
    *,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 512,
    seed: int = 0,
    charset: str = DEFAULT_CHARSET,
) -> Path:
    """Write a randomly initialised Llama checkpoint + char-level tokenizer to ``out_dir`` and return its path.

    The folder holds config.json, generation_config.json, model.safetensors (float32) and the tokenizer files
    (tokenizer.json, tokenizer_config.json, chat template). The same arguments always give byte-identical weights.
    ``charset`` narrows the vocabulary (e.g. digits only), which makes toy tasks easier to learn from scratch.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    _check_sizes(
        hidden_size,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
    )
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    tokenizer = build_tokenizer(charset)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    # A private generator state: seed the global RNG for init, then restore it so callers' randomness is untouched.
    rng_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(rng_state)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _pin_tokenizer_class(out)
    return out


def _fingerprint(build_kwargs: dict) -> str:
    blob = json.dumps({"kit_version": KIT_VERSION, **build_kwargs}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """``$VERL_CACHE_DIR/tiny_model`` when that variable is set, else ``~/.cache/verl/tiny_model``."""
    root = os.environ.get("VERL_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "verl"
    return base / "tiny_model"


def tiny_model_path(cache_dir: str | os.PathLike | None = None, **build_kwargs) -> Path:
    """Return a cached tiny-model folder, building it on first use.

    The folder is ``<cache_dir>/<fingerprint of build_kwargs>`` (``cache_dir`` defaults to ``default_cache_dir()``).
    It is built in a temporary sibling and renamed into place, so concurrent callers never see a half-written model.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / _fingerprint(build_kwargs)
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        build_tiny_model(tmp, **build_kwargs)
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process finished first; its folder is complete because it was renamed into place too.
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m verl.utils.tiny_model",
        description="Build a tiny random Llama checkpoint with a char-level tokenizer (no model hub needed).",
    )
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-hidden-layers", type=int, default=2)
    parser.add_argument("--num-attention-heads", type=int, default=4)
    parser.add_argument("--num-key-value-heads", type=int, default=2)
    parser.add_argument("--intermediate-size", type=int, default=128)
    parser.add_argument("--max-position-embeddings", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--charset", default=None, help="characters of the vocabulary (default: printable ASCII)")
    args = parser.parse_args(argv)
    extra = {} if args.charset is None else {"charset": args.charset}
    try:
        path = build_tiny_model(
            args.out,
            hidden_size=args.hidden_size,
            num_hidden_layers=args.num_hidden_layers,
            num_attention_heads=args.num_attention_heads,
            num_key_value_heads=args.num_key_value_heads,
            intermediate_size=args.intermediate_size,
            max_position_embeddings=args.max_position_embeddings,
            seed=args.seed,
            **extra,
        )
    except ValueError as err:
        parser.error(str(err))
    print(path.resolve())
    return path


if __name__ == "__main__":
    main()
