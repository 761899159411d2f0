"""model.use_liger: Liger's kernels swapped into the loaded model, or an error that says what is missing."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl.workers.config import HFModelConfig
from verl.workers.fsdp.model_loader import load_causal_lm

HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None


@pytest.mark.skipif(HAS_LIGER, reason="liger-kernel is installed here")
def test_missing_package_names_the_key_and_the_extra(tiny_model_dir):
    config = HFModelConfig(path=str(tiny_model_dir), use_liger=True)
    with pytest.raises(ImportError, match=r"model.use_liger=true needs the 'liger-kernel' package.*verl\[liger\]"):
        load_causal_lm(config, str(tiny_model_dir), torch.float32)


@pytest.mark.skipif(not HAS_LIGER or torch.cuda.is_available(), reason="needs liger-kernel on a machine without CUDA")
def test_cpu_is_refused_by_name(tiny_model_dir):
    config = HFModelConfig(path=str(tiny_model_dir), use_liger=True)
    with pytest.raises(RuntimeError, match="model.use_liger=true needs a CUDA GPU"):
        load_causal_lm(config, str(tiny_model_dir), torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_LIGER, reason="needs liger-kernel")
def test_liger_model_gives_the_same_logits_and_log_probs(tiny_model_dir):
    plain = load_causal_lm(HFModelConfig(path=str(tiny_model_dir)), str(tiny_model_dir), torch.float32).cuda()
    liger = load_causal_lm(
        HFModelConfig(path=str(tiny_model_dir), use_liger=True), str(tiny_model_dir), torch.float32
    ).cuda()
    # Liger rebinds the forward of the modules it patches (norms, MLPs) to its own
    assert any(getattr(m.forward, "__module__", "").startswith("liger_kernel") for m in liger.modules())
    ids = torch.randint(3, plain.config.vocab_size, (2, 16), device="cuda")
    torch.testing.assert_close(liger(ids).logits, plain(ids).logits, atol=1e-4, rtol=1e-4)
