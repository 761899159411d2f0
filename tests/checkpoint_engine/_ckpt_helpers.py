"""Plain helpers for checkpoint-engine tests: a trainer stand-in that exposes the worker-side protocol."""

from __future__ import annotations

from typing import Any

import torch

from verl.checkpoint_engine import send_weights
from verl.workers.config import RolloutConfig


def rollout_config(**overrides: Any) -> RolloutConfig:
    values = dict(
        name="hf",
        prompt_length=16,
        response_length=16,
        max_num_seqs=4,
        calculate_log_probs=False,
        dtype="float32",
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=False,
        ignore_eos=True,
        max_model_len=None,
    )
    values.update(overrides)
    return RolloutConfig(**values)


@torch.no_grad()
def perturb(model: torch.nn.Module, seed: int) -> None:
    """Move every weight by a seeded random amount, large enough to change greedy outputs."""
    gen = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.add_(torch.randn(param.shape, generator=gen) * 0.5)


@torch.no_grad()
def reference_greedy(model: torch.nn.Module, prompt: list[int], max_tokens: int) -> list[int]:
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(torch.argmax(model(torch.tensor([ids])).logits[0, -1])))
    return ids[len(prompt) :]


class LocalTrainer:
    """One trainer rank holding a model (and, for naive, the engines in its process)."""

    def __init__(self, model: torch.nn.Module, local_replicas: list[Any] | None = None):
        self.model = model
        self.local_replicas = local_replicas

    def send_weights(self, request):
        return send_weights(self.model, request, rank=0, local_replicas=self.local_replicas)


class TrainerActor:
    """Body of a Ray actor playing trainer rank 0 with a perturbed copy of the tiny model."""

    def __init__(self, model_path: str):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    def perturb(self, seed: int) -> None:
        perturb(self.model, seed)

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}

    def send_weights(self, request):
        return send_weights(self.model, request, rank=0)
