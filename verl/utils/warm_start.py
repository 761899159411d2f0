"""A warm-start checkpoint: a short supervised run of the tiny model on a synthetic task's warm-start answers.

Some tasks are meant to be learned by RL from a checkpoint that already knows their format: ``long_tail_digit``'s
warm start learns when to stop (so the policy's lengths are long-tailed from the first RL step) but not which digit
to write. The run is a plain next-token loss on the answer tokens and EOS, with the prompt rendered by the chat
template exactly as the RL data path renders it. It is built once under the cache folder, keyed by its settings, so
every trainer of a comparison starts from the same weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from verl.utils.tiny_model import default_cache_dir, tiny_model_path

__all__ = ["WarmStartConfig", "train_warm_start", "warm_start_path"]


@dataclass(frozen=True)
class WarmStartConfig:
    task: str
    charset: str  # the tiny model's vocabulary (the base checkpoint is ``tiny_model_path(charset=...)``)
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0


def _encode_pair(tokenizer, question: str, answer: str) -> tuple[list[int], list[int]]:
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    return prompt_ids, tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]


def train_warm_start(config: WarmStartConfig, out_dir: str | os.PathLike) -> Path:
    """Fine-tune the tiny checkpoint of ``config.charset`` on the task's warm-start pairs; write it to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.synthetic_tasks import make_warm_start_pairs

    base = tiny_model_path(charset=config.charset)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    pairs = make_warm_start_pairs(config.task, config.steps * config.batch_size, seed=config.seed)
    order = random.Random(config.seed)
    order.shuffle(pairs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    model.train()
    for step in range(config.steps):
        batch = [
            _encode_pair(tokenizer, q, a) for q, a in pairs[step * config.batch_size : (step + 1) * config.batch_size]
        ]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (prompt, answer) in enumerate(batch):
            end = len(prompt) + len(answer)
            ids[row, :end] = torch.tensor(prompt + answer)
            mask[row, :end] = 1
            labels[row, len(prompt) : end] = torch.tensor(answer)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    shutil.copy(base / "tokenizer_config.json", out / "tokenizer_config.json")  # keeps the pinned tokenizer class
    (out / "warm_start.json").write_text(json.dumps(asdict(config), indent=2, sort_keys=True) + "\n")
    return out


def warm_start_path(config: WarmStartConfig, cache_dir: str | os.PathLike | None = None) -> Path:
    """The cached warm-start folder of ``config`` (``<cache>/warm_start/<fingerprint>``), trained on first use and
    renamed into place, so concurrent callers never read a half-written checkpoint."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir().parent / "warm_start"
    fingerprint = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:12]
    target = root / f"{config.task}-{fingerprint}"
    if (target / "warm_start.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        train_warm_start(config, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "warm_start.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
