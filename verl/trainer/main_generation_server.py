"""verl 0.9.1's offline generation: ``python -m verl.trainer.main_generation_server data.train_files=... ...``.

It reads the PPO trainer's config (``actor_rollout_ref.model.path``, ``actor_rollout_ref.rollout.{n, temperature,
top_p, response_length, name}``, ``data.train_files``, ``data.prompt_key``) plus ``data.output_path``, samples ``n``
responses per prompt and writes the input rows with a ``responses`` column. verl starts rollout servers and sends
chat-completion requests to them; here one built-in ``hf`` engine runs in this process, so ``trainer.n_gpus_per_node``
and ``tensor_model_parallel_size`` do not split the work. Legacy ``actor_rollout_ref.*`` keys and the flattened
``rollout.*`` / ``model.*`` keys of ``main_ppo`` are both accepted. Config: ``config/generation_server.yaml``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.main_generation import (
    GenerationSettings,
    check_engine,
    generate_responses,
    load_model_and_tokenizer,
    read_prompts,
    write_responses,
)

__all__ = ["compose_generation_config", "main", "run_generation_server"]

_CONFIG_NAME = "generation_server"


def _pick(config: DictConfig, *keys: str, default: Any = None) -> tuple[Any, str]:
    """(value, key) of the first of ``keys`` set in ``config`` (flattened or ``actor_rollout_ref`` spelling)."""
    for key in keys:
        value = OmegaConf.select(config, key, default=None)
        if value is not None:
            return value, key
    return default, keys[0]


def compose_generation_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The PPO trainer config plus ``data.output_path``, composed with ``overrides`` as ``main_ppo`` does."""
    from verl.trainer.config.compose import compose_ppo_config

    # verl's scripts pass data.output_path with or without "+": it is part of this command's own config
    normalized = [o[1:] if o.startswith("+data.output_path=") else o for o in overrides]
    config = compose_ppo_config(normalized, config_name=_CONFIG_NAME)
    OmegaConf.resolve(config)
    return config


def run_generation_server(config: DictConfig) -> str:
    """Generate for a composed config; returns the output parquet path."""
    rollout = "rollout" if OmegaConf.select(config, "rollout") is not None else "actor_rollout_ref.rollout"
    model = "model" if OmegaConf.select(config, "model.path") is not None else "actor_rollout_ref.model"

    def value(name: str, default: Any = None) -> Any:
        return _pick(config, f"{rollout}.{name}", default=default)[0]

    check_engine(str(value("name", "hf")), "actor_rollout_ref.rollout.name")
    settings = GenerationSettings(
        n_samples=int(value("n", 1)),
        temperature=float(value("temperature", 1.0)),
        top_p=float(value("top_p", 1.0)),
        top_k=int(value("top_k", -1)),
        do_sample=bool(value("do_sample", True)),
        ignore_eos=bool(value("ignore_eos", False)),
        prompt_length=int(value("prompt_length", 1024)),
        response_length=int(value("response_length", 512)),
        dtype=str(value("dtype", "auto")),
        max_num_seqs=int(value("max_num_seqs", 256)),
        max_num_batched_tokens=value("max_num_batched_tokens"),
        max_model_len=value("max_model_len"),
        prompt_truncation=str(value("prompt_truncation", "error")),
        batch_size=max(1, int(OmegaConf.select(config, "data.gen_batch_size", default=None) or 1024)),
        seed=int(OmegaConf.select(config, "trainer.seed", default=None) or 0),
    )
    settings.check(
        {
            "n_samples": "actor_rollout_ref.rollout.n",
            "temperature": "actor_rollout_ref.rollout.temperature",
            "batch_size": "data.gen_batch_size",
        }
    )
    output_path = OmegaConf.select(config, "data.output_path", default=None)
    if not output_path:
        raise ValueError("data.output_path is required: where to write the parquet with the responses")
    dataset, chats = read_prompts(config.data.train_files, str(config.data.prompt_key), "data.train_files")
    model_path, tokenizer = load_model_and_tokenizer(OmegaConf.select(config, model), "actor_rollout_ref.model.path")
    responses = generate_responses(chats, model_path, tokenizer, settings)
    path = write_responses(dataset, responses, output_path)
    print(f"[generation] wrote {len(responses)} rows x {settings.n_samples} responses to {path}", flush=True)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``key=value`` overrides, generate, and report bad input as ``error: ...`` with exit code 2."""
    from hydra.errors import HydraException

    from verl.base_config import ConfigError

    overrides = list(sys.argv[1:] if argv is None else argv)
    flags = [o for o in overrides if o.startswith("-")]
    if flags:
        print(f"error: unsupported flag(s) {flags}: pass key=value overrides only", file=sys.stderr)
        sys.exit(2)
    try:
        run_generation_server(compose_generation_config(overrides))
    except (OSError, ValueError, ConfigError, HydraException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
