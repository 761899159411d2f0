"""DataParallelPPOCritic and the value model on the tiny Llama checkpoint."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.config.critic import CriticConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.critic.value_model import load_value_model

PROMPT_LEN = 6
RESPONSE_LEN = 5


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny matmuls run ~15x slower when torch's threads fight other processes for 2 cores."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def base_critic(tiny_model_dir):
    torch.manual_seed(0)
    return load_value_model(tiny_model_dir)


@pytest.fixture
def critic_module(base_critic):
    return copy.deepcopy(base_critic)


def make_config(**overrides) -> CriticConfig:
    fields = {
        "ppo_mini_batch_size": 8,
        "ppo_micro_batch_size_per_gpu": 2,
        "forward_micro_batch_size_per_gpu": 4,
        "cliprange_value": 0.5,
        "grad_clip": 1.0,
    }
    fields.update(overrides)
    return CriticConfig(**fields)


def make_batch(vocab_size: int, n: int = 8, seed: int = 0, pad_id: int = 0) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.full((n, PROMPT_LEN), pad_id)
    responses = torch.full((n, RESPONSE_LEN), pad_id)
    prompt_mask = torch.zeros(n, PROMPT_LEN, dtype=torch.long)
    response_mask = torch.zeros(n, RESPONSE_LEN, dtype=torch.long)
    for i in range(n):
        p = int(torch.randint(1, PROMPT_LEN + 1, (1,), generator=gen))
        r = RESPONSE_LEN if i == 0 else int(torch.randint(1, RESPONSE_LEN + 1, (1,), generator=gen))
        prompts[i, PROMPT_LEN - p :] = torch.randint(1, vocab_size, (p,), generator=gen)
        responses[i, :r] = torch.randint(1, vocab_size, (r,), generator=gen)
        prompt_mask[i, PROMPT_LEN - p :] = 1
        response_mask[i, :r] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"micro_batch_size": 4})


# ---------------------------------------------------------------------------- value model


def test_value_model_keeps_the_backbone_and_adds_a_scalar_head(tiny_model_dir, base_critic):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lm_state = lm.state_dict()
    critic_state = base_critic.state_dict()
    backbone = [k for k in critic_state if k.startswith("model.")]
    assert backbone and all(torch.equal(critic_state[k], lm_state[k]) for k in backbone)
    assert "lm_head.weight" not in critic_state and critic_state["score.weight"].shape == (1, lm.config.hidden_size)
    assert base_critic.config.classifier_dropout == 0.0
    ids = torch.randint(1, lm.config.vocab_size, (2, 7))
    critic = copy.deepcopy(base_critic).train()
    out_a, out_b = critic(input_ids=ids).logits, critic(input_ids=ids).logits
    assert out_a.shape == (2, 7, 1)
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)  # no dropout in train mode either


def test_value_model_applies_overrides_and_dtype(tiny_model_dir):
    model = load_value_model(tiny_model_dir, torch_dtype=torch.bfloat16, override_config={"rms_norm_eps": 1e-3})
    assert model.config.rms_norm_eps == 1e-3 and model.config.num_labels == 1
    assert next(model.parameters()).dtype == torch.bfloat16


# ---------------------------------------------------------------------------- compute_values


def direct_values(module, data: DataProto) -> torch.Tensor:
    b = data.batch
    with torch.no_grad():
        out = module(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    return out.logits[:, PROMPT_LEN - 1 : PROMPT_LEN + RESPONSE_LEN - 1, 0] * b["response_mask"]


@pytest.mark.parametrize(
    "meta",
    [{"micro_batch_size": 1}, {"micro_batch_size": 3}, {"use_dynamic_bsz": True, "max_token_len": 22}],
)
def test_compute_values_matches_direct_forward(critic_module, meta):
    data = make_batch(critic_module.config.vocab_size)
    data.meta_info.update(meta)
    critic = DataParallelPPOCritic(make_config(), critic_module, None)
    values = critic.compute_values(data)
    assert values.shape == (8, RESPONSE_LEN)
    torch.testing.assert_close(values, direct_values(critic_module, data), atol=1e-5, rtol=0)
    assert (values[data.batch["response_mask"] == 0] == 0).all()


def test_compute_values_with_remove_padding_equals_padded(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    config = make_config(model=HFModelConfig(path="unused", use_remove_padding=True))
    packed = DataParallelPPOCritic(config, critic_module, None)
    assert packed.use_remove_padding is True
    padded = DataParallelPPOCritic(make_config(), critic_module, None)
    assert padded.use_remove_padding is False
    torch.testing.assert_close(packed.compute_values(data), padded.compute_values(data), atol=1e-5, rtol=0)


def test_compute_values_defaults_to_the_config_micro_batch(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    del data.meta_info["micro_batch_size"]
    critic = DataParallelPPOCritic(make_config(forward_micro_batch_size_per_gpu=3), critic_module, None)
    torch.testing.assert_close(critic.compute_values(data), direct_values(critic_module, data), atol=1e-5, rtol=0)
    critic = DataParallelPPOCritic(make_config(forward_micro_batch_size_per_gpu=None), critic_module, None)
    with pytest.raises(ValueError, match=r"meta_info\['micro_batch_size'\] must be a positive integer"):
        critic.compute_values(data)


# ---------------------------------------------------------------------------- update_critic


def with_targets(critic: DataParallelPPOCritic, data: DataProto, target: float = 1.0) -> DataProto:
    data.batch["values"] = critic.compute_values(data)
    data.batch["returns"] = torch.full((len(data), RESPONSE_LEN), target) * data.batch["response_mask"]
    return data


def test_value_loss_decreases_on_a_fixed_target(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    config = make_config(cliprange_value=100.0)
    critic = DataParallelPPOCritic(config, critic_module, torch.optim.SGD(critic_module.parameters(), lr=0.02))
    with_targets(critic, data)
    losses = []
    for _ in range(5):
        metrics = critic.update_critic(data)
        losses.append(sum(metrics["critic/vf_loss"]) / len(metrics["critic/vf_loss"]))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0]
    values = critic.compute_values(data)
    mask = data.batch["response_mask"].bool()
    assert (values[mask] - 1.0).abs().mean() < (data.batch["values"][mask] - 1.0).abs().mean()
    assert set(metrics) >= {
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/vpred_mean",
        "critic/grad_norm",
        "critic/step_skipped",
        "critic/lr",
    }
    assert len(metrics["critic/grad_norm"]) == 1 and len(metrics["critic/vf_loss"]) == 4


def test_value_clipping_reports_clipfrac(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    config = make_config(ppo_mini_batch_size=4, ppo_epochs=2, cliprange_value=1e-3)
    critic = DataParallelPPOCritic(config, critic_module, torch.optim.Adam(critic_module.parameters(), lr=1e-2))
    with_targets(critic, data, target=5.0)
    metrics = critic.update_critic(data)
    assert len(metrics["critic/grad_norm"]) == 4
    assert metrics["critic/vf_clipfrac"][0] == 0.0 and max(metrics["critic/vf_clipfrac"]) > 0


def test_critic_gradient_accumulation_equivalence(base_critic):
    data = make_batch(base_critic.config.vocab_size, seed=2)
    flat = []
    for overrides in (
        {"ppo_micro_batch_size_per_gpu": 1},
        {"ppo_micro_batch_size_per_gpu": 8},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 20},
    ):
        module = copy.deepcopy(base_critic)
        critic = DataParallelPPOCritic(
            make_config(grad_clip=1e6, **overrides), module, torch.optim.SGD(module.parameters(), lr=1.0)
        )
        with_targets(critic, data, target=2.0)
        critic.update_critic(data)
        flat.append(torch.cat([p.detach().flatten() for p in module.parameters()]))
    torch.testing.assert_close(flat[0], flat[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(flat[0], flat[2], atol=1e-6, rtol=0)


def test_nan_return_skips_the_critic_step(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    optimizer = torch.optim.Adam(critic_module.parameters(), lr=1e-2)
    critic = DataParallelPPOCritic(make_config(), critic_module, optimizer)
    with_targets(critic, data)
    before = [p.detach().clone() for p in critic_module.parameters()]
    bad = copy.deepcopy(data)
    bad.batch["returns"][0, 0] = float("nan")
    metrics = critic.update_critic(bad)
    assert metrics["critic/step_skipped"] == [1.0] and math.isnan(metrics["critic/grad_norm"][0])
    assert all(torch.equal(a, b) for a, b in zip(before, critic_module.parameters()))
    metrics = critic.update_critic(data)
    assert metrics["critic/step_skipped"] == [0.0]
    assert any(not torch.equal(a, b) for a, b in zip(before, critic_module.parameters()))


def test_update_critic_errors_name_the_culprit(critic_module):
    data = make_batch(critic_module.config.vocab_size)
    with pytest.raises(RuntimeError, match="no optimizer"):
        DataParallelPPOCritic(make_config(), critic_module, None).update_critic(data)
    critic = DataParallelPPOCritic(make_config(), critic_module, torch.optim.SGD(critic_module.parameters(), lr=0.1))
    data.batch["values"] = torch.zeros(8, RESPONSE_LEN)
    with pytest.raises(KeyError, match="returns"):
        critic.update_critic(data)
    data.batch["returns"] = torch.zeros(8, RESPONSE_LEN)
    critic = DataParallelPPOCritic(
        make_config(ppo_micro_batch_size_per_gpu=None),
        critic_module,
        torch.optim.SGD(critic_module.parameters(), lr=0.1),
    )
    with pytest.raises(ValueError, match="critic.ppo_micro_batch_size_per_gpu must be a positive integer"):
        critic.update_critic(data)
