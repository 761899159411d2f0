"""Offline generation over a parquet file of prompts: ``python -m verl.trainer.main_generation data.path=... ...``.

verl's older generation command (config ``verl/trainer/config/generation.yaml``: ``data.path``, ``data.prompt_key``,
``data.n_samples``, ``data.batch_size``, ``data.output_path``, ``model.path``, ``rollout.*``). Every row's chat
messages are rendered with the model's chat template and sampled ``n_samples`` times on the built-in ``hf`` engine
(:class:`~verl.workers.rollout.hf.server.HFRolloutServer`, continuous batching on one GPU or the CPU); the output
parquet is the input plus a ``responses`` column holding the ``n_samples`` texts of each row. verl 0.9.1's
server-based variant with ``actor_rollout_ref.*`` keys is :mod:`verl.trainer.main_generation_server`; both feed
``python -m verl.trainer.main_eval`` (docs/offline.md).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

__all__ = [
    "GenerationSettings",
    "check_engine",
    "generate_responses",
    "load_model_and_tokenizer",
    "main",
    "read_prompts",
    "run_generation",
    "write_responses",
]

# rollout.name values this command runs; vLLM and SGLang serve main_ppo's rollouts only
ENGINES = ("hf",)


@dataclass(frozen=True)
class GenerationSettings:
    """How each prompt is sampled; ``response_length`` is the token budget of one response."""

    n_samples: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    ignore_eos: bool = False
    prompt_length: int = 1024
    response_length: int = 512
    dtype: str = "auto"
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    prompt_truncation: str = "error"
    batch_size: int = 128
    seed: int | None = 0

    def check(self, keys: dict[str, str]) -> None:
        """Raise ValueError naming the config key (``keys`` maps a field to its key) of an inconsistent value."""
        if self.n_samples < 1:
            raise ValueError(f"{keys['n_samples']}={self.n_samples}: must be >= 1")
        if (self.temperature == 0.0 or not self.do_sample) and self.n_samples > 1:
            raise ValueError(
                f"{keys['n_samples']}={self.n_samples} with greedy decoding ({keys['temperature']}="
                f"{self.temperature}): every sample would be the same; use n_samples=1"
            )
        if self.batch_size < 1:
            raise ValueError(f"{keys['batch_size']}={self.batch_size}: must be >= 1")

    def sampling_params(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.response_length,
            "do_sample": self.do_sample,
            "ignore_eos": self.ignore_eos,
        }

    def engine_config(self) -> SimpleNamespace:
        return SimpleNamespace(
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            dtype=self.dtype,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            calculate_log_probs=False,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            do_sample=self.do_sample,
            ignore_eos=self.ignore_eos,
            prompt_truncation=self.prompt_truncation,
        )


def _as_messages(value: Any, row: int, key: str, path: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list | tuple) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return [{k: v for k, v in m.items() if v is not None} for m in value]
    raise ValueError(
        f"{key}: row {row} of {path} holds {type(value).__name__} {value!r:.80}; expected chat "
        "messages ([{'role': ..., 'content': ...}]) or a string"
    )


def read_prompts(files: str | Sequence[str], prompt_key: str, files_key: str = "data.path") -> tuple[Any, list]:
    """(the concatenated DataFrame, each row's chat messages); errors name ``files_key``/``data.prompt_key``."""
    import pandas as pd

    paths = [files] if isinstance(files, str) else list(files)
    if not paths:
        raise ValueError(f"{files_key} is empty: give a parquet file of prompts")
    frames = []
    for raw in paths:
        path = os.path.expanduser(str(raw))
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{files_key}: parquet file {path} does not exist")
        frame = pd.read_parquet(path)
        if prompt_key not in frame.columns:
            raise ValueError(
                f"data.prompt_key={prompt_key!r}: {path} has no such column; its columns are {list(frame.columns)}"
            )
        frames.append(frame)
    dataset = pd.concat(frames, ignore_index=True)
    chats = [
        _as_messages(value, row, "data.prompt_key", ", ".join(paths))
        for row, value in enumerate(dataset[prompt_key].tolist())
    ]
    return dataset, chats


def generate_responses(
    chats: list[list[dict[str, Any]]],
    model_path: str,
    tokenizer: Any,
    settings: GenerationSettings,
    *,
    log: bool = True,
) -> list[list[str]]:
    """``settings.n_samples`` decoded responses per chat, sampled on one ``hf`` engine in rounds of
    ``settings.batch_size`` chats (special tokens removed)."""
    from verl.workers.rollout.hf.server import HFRolloutServer

    prompts = [
        list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
        for chat in chats
    ]
    server = HFRolloutServer(settings.engine_config(), model_path, seed=settings.seed)
    params = settings.sampling_params()

    async def run_round(start: int, rows: list[list[int]]) -> list[list[str]]:
        outputs = await asyncio.gather(
            *[
                server.generate(ids, params, f"row{start + i}-sample{j}")
                for i, ids in enumerate(rows)
                for j in range(settings.n_samples)
            ]
        )
        texts = [tokenizer.decode(out.token_ids, skip_special_tokens=True) for out in outputs]
        return [texts[i * settings.n_samples : (i + 1) * settings.n_samples] for i in range(len(rows))]

    async def run_all() -> list[list[str]]:
        results: list[list[str]] = []
        for start in range(0, len(prompts), settings.batch_size):
            results += await run_round(start, prompts[start : start + settings.batch_size])
            if log:
                print(f"[generation] {len(results)}/{len(prompts)} prompts x {settings.n_samples} samples", flush=True)
        return results

    return asyncio.run(run_all())


def write_responses(dataset: Any, responses: list[list[str]], output_path: str) -> str:
    """Add the ``responses`` column (a list of texts per row) and write ``output_path`` (folders created)."""
    path = os.path.expanduser(str(output_path))
    dataset = dataset.copy()
    dataset["responses"] = responses
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    dataset.to_parquet(path)
    return path


def load_model_and_tokenizer(model_cfg: Any, key: str) -> tuple[str, Any]:
    """(local model folder, tokenizer) of a ``model`` group (converted to its dataclass); ``external_lib`` imported
    first."""
    import importlib

    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig
    from verl.workers.fsdp.model_loader import load_tokenizer, resolve_model_path

    model_cfg = omega_conf_to_dataclass(model_cfg, HFModelConfig, path=key.rsplit(".", 1)[0], keep_unknown=True)
    if model_cfg.external_lib:
        importlib.import_module(model_cfg.external_lib)
    model_path = resolve_model_path(model_cfg, key=key)
    return model_path, load_tokenizer(model_cfg, model_path)


def check_engine(name: str, key: str) -> None:
    if name not in ENGINES:
        raise ValueError(
            f"{key}={name!r}: offline generation runs on the built-in hf engine here; set {key}=hf "
            "(vLLM/SGLang serve main_ppo's rollouts: pip install verl[vllm] / verl[sglang])"
        )


def run_generation(config: DictConfig) -> str:
    """Generate for the legacy ``generation.yaml`` config; returns the output parquet path."""
    rollout, data = config.rollout, config.data
    check_engine(str(rollout.name), "rollout.name")
    settings = GenerationSettings(
        n_samples=int(data.n_samples),
        temperature=float(rollout.temperature),
        top_p=float(rollout.top_p),
        top_k=int(rollout.top_k),
        do_sample=bool(rollout.do_sample),
        ignore_eos=bool(rollout.ignore_eos),
        prompt_length=int(rollout.prompt_length),
        response_length=int(rollout.response_length),
        dtype=str(rollout.dtype),
        max_num_seqs=int(rollout.max_num_seqs),
        max_num_batched_tokens=rollout.max_num_batched_tokens,
        max_model_len=rollout.max_model_len,
        prompt_truncation=str(rollout.prompt_truncation),
        batch_size=int(data.batch_size),
        seed=rollout.seed,
    )
    settings.check(
        {"n_samples": "data.n_samples", "temperature": "rollout.temperature", "batch_size": "data.batch_size"}
    )
    if not data.output_path:
        raise ValueError("data.output_path is required: where to write the parquet with the responses")
    dataset, chats = read_prompts(data.path, str(data.prompt_key))
    model_path, tokenizer = load_model_and_tokenizer(config.model, "model.path")
    responses = generate_responses(chats, model_path, tokenizer, settings)
    path = write_responses(dataset, responses, data.output_path)
    print(f"[generation] wrote {len(responses)} rows x {settings.n_samples} responses to {path}", flush=True)
    return path


@hydra.main(config_path="config", config_name="generation", version_base=None)
def main(config: DictConfig) -> None:
    OmegaConf.resolve(config)
    try:
        run_generation(config)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
