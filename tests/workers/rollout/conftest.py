"""Fixtures for rollout tests: a float32 tiny model loaded once and fresh servers over copies of it."""

from __future__ import annotations

import copy

import pytest
import torch
from _rollout_helpers import rollout_config


@pytest.fixture(scope="session")
def tiny_causal_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def make_server(tiny_causal_lm):
    """Build an HFRolloutServer over a private copy of the tiny model."""
    from verl.workers.rollout.hf.server import HFRolloutServer

    def build(config=None, **kwargs):
        return HFRolloutServer(config or rollout_config(), model=copy.deepcopy(tiny_causal_lm), **kwargs)

    return build
