"""Fixtures for checkpoint-engine tests: the tiny model loaded once in float32."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
