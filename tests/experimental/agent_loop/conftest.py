"""Fixtures for agent-loop tests: the tiny model loaded once, in-process replicas over copies of it."""

from __future__ import annotations

import copy

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def make_replica(tiny_lm):
    """An in-process replica (real hf engine) over a private copy of the tiny model."""
    from verl.workers.rollout.hf.server import HFRolloutServer

    def build(rollout_config):
        return HFRolloutServer(rollout_config, model=copy.deepcopy(tiny_lm))

    return build
