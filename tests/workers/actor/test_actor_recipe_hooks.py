"""The hooks recipes override on verl's actor and critic (``_forward_micro_batch``, ``_optimizer_step``) are what
``compute_log_prob`` / ``update_policy`` and ``compute_values`` / ``update_critic`` run, called and read as verl's
loops call them; results the loops cannot use fail naming the recipe's class and hook."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config.actor import ActorConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.critic.value_model import load_value_model

PROMPT_LEN, RESPONSE_LEN, ROWS = 6, 5, 8
FORWARD_KEYS = {"responses", "input_ids", "attention_mask", "position_ids"}


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()


def make_batch(vocab_size: int, seed: int = 0) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1, vocab_size, (ROWS, PROMPT_LEN), generator=gen)
    responses = torch.randint(1, vocab_size, (ROWS, RESPONSE_LEN), generator=gen)
    response_mask = torch.ones(ROWS, RESPONSE_LEN, dtype=torch.long)
    response_mask[1, -2:] = 0
    responses = responses * response_mask
    attention_mask = torch.cat([torch.ones(ROWS, PROMPT_LEN, dtype=torch.long), response_mask], dim=1)
    tensors = {
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        "advantages": torch.randn(ROWS, RESPONSE_LEN, generator=gen) * response_mask,
        "returns": torch.randn(ROWS, RESPONSE_LEN, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 0.8, "micro_batch_size": 4})


def actor_config(**overrides) -> ActorConfig:
    fields = {"ppo_mini_batch_size": ROWS, "ppo_micro_batch_size_per_gpu": 4, "grad_clip": 1.0, "entropy_coeff": 0.0}
    return ActorConfig(**{**fields, **overrides})


class RecordingActor(DataParallelPPOActor):
    """Records how the loops call the hooks; shifts log-probs so its outputs are recognisable."""

    SHIFT = -0.25

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_calls: list[tuple[type, set[str], dict]] = []
        self.step_norms: list[float] = []

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        self.forward_calls.append(
            (type(micro_batch), set(micro_batch), {"temperature": temperature, "calculate_entropy": calculate_entropy})
        )
        entropy, log_prob = super()._forward_micro_batch(
            micro_batch, temperature=temperature, calculate_entropy=calculate_entropy
        )
        return entropy, log_prob + self.SHIFT

    def _optimizer_step(self):
        grad_norm = super()._optimizer_step()
        self.step_norms.append(float(grad_norm))
        return grad_norm * 0 + 123.0  # what update_policy reports must be this hook's value


def test_compute_log_prob_goes_through_the_override_with_verls_call(base_model):
    data = make_batch(base_model.config.vocab_size)
    plain = DataParallelPPOActor(actor_config(), copy.deepcopy(base_model))
    recording = RecordingActor(actor_config(), copy.deepcopy(base_model))
    log_prob, entropy = plain.compute_log_prob(data, calculate_entropy=True)
    shifted, same_entropy = recording.compute_log_prob(data, calculate_entropy=True)
    torch.testing.assert_close(shifted, log_prob + RecordingActor.SHIFT)
    torch.testing.assert_close(same_entropy, entropy)
    assert len(recording.forward_calls) == 2  # 8 rows in micro-batches of 4
    for kind, keys, kwargs in recording.forward_calls:
        assert kind is dict and keys == FORWARD_KEYS
        assert kwargs == {"temperature": 0.8, "calculate_entropy": True}
    # the default hook itself: verl's keyword call and (entropy, log_prob) order, entropy None when not asked
    micro = {key: data.batch[key][:3] for key in FORWARD_KEYS}
    none_entropy, first_rows = plain._forward_micro_batch(micro, temperature=0.8)
    assert none_entropy is None and first_rows.shape == (3, RESPONSE_LEN)
    torch.testing.assert_close(
        first_rows * data.batch["response_mask"][:3], log_prob[:3] * data.batch["response_mask"][:3]
    )


def test_update_policy_runs_both_overrides(base_model):
    data = make_batch(base_model.config.vocab_size)
    actor_module = copy.deepcopy(base_model)
    recording = RecordingActor(
        actor_config(ppo_mini_batch_size=4, ppo_epochs=2), actor_module, torch.optim.AdamW(actor_module.parameters())
    )
    data.batch["old_log_probs"] = recording.compute_log_prob(data)[0]
    recording.forward_calls.clear()
    metrics = recording.update_policy(data)
    assert len(recording.step_norms) == 4  # 2 epochs x 2 mini-batches, each step taken by the override
    assert metrics["actor/grad_norm"] == [123.0] * 4
    assert len(recording.forward_calls) == 4  # one micro-batch of 4 rows per mini-batch
    for kind, keys, kwargs in recording.forward_calls:
        assert kind is dict and {"advantages", "response_mask", "old_log_probs"} <= keys and FORWARD_KEYS <= keys
        assert kwargs == {"temperature": 0.8, "calculate_entropy": True}


class EntropyBonus(DataParallelPPOActor):
    """A recipe's log-prob with an entropy term: its gradient must reach the model through the entropy."""

    detach = False

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        entropy, log_prob = super()._forward_micro_batch(micro_batch, temperature, calculate_entropy=True)
        bonus = entropy.detach() if self.detach else entropy
        return entropy, log_prob + 0.5 * bonus


class DetachedEntropyBonus(EntropyBonus):
    detach = True


def _updated_weights(base_model, cls, data) -> list[torch.Tensor]:
    module = copy.deepcopy(base_model)
    actor = cls(actor_config(), module, torch.optim.SGD(module.parameters(), lr=1.0))
    actor.update_policy(data)
    return [p.detach().clone() for p in module.parameters()]


def test_an_override_building_on_the_entropy_trains_through_it(base_model):
    """entropy_coeff is 0, so the built-in loss needs no entropy gradient; an override that uses it gets one."""
    data = make_batch(base_model.config.vocab_size)
    plain = _updated_weights(base_model, DataParallelPPOActor, data)
    detached = _updated_weights(base_model, DetachedEntropyBonus, data)
    with_entropy = _updated_weights(base_model, EntropyBonus, data)
    for a, b in zip(plain, detached):  # on-policy, a constant per-token shift leaves the gradient unchanged
        torch.testing.assert_close(a, b)
    assert any(not torch.allclose(a, b) for a, b in zip(plain, with_entropy))


class MappingForward(DataParallelPPOActor):
    """Later verl releases return a mapping; it is read the same way."""

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        entropy, log_prob = super()._forward_micro_batch(micro_batch, temperature, calculate_entropy)
        return {"log_probs": log_prob, "entropys": entropy}


def test_mapping_results_are_accepted(base_model):
    data = make_batch(base_model.config.vocab_size)
    expected = DataParallelPPOActor(actor_config(), copy.deepcopy(base_model)).compute_log_prob(data, True)
    got = MappingForward(actor_config(), copy.deepcopy(base_model)).compute_log_prob(data, True)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


class LogProbOnly(DataParallelPPOActor):
    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        return super()._forward_micro_batch(micro_batch, temperature, calculate_entropy)[1]


class WrongShape(DataParallelPPOActor):
    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        entropy, log_prob = super()._forward_micro_batch(micro_batch, temperature, calculate_entropy)
        return entropy, log_prob[:, :-1]


class NoEntropy(DataParallelPPOActor):
    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        return None, super()._forward_micro_batch(micro_batch, temperature, calculate_entropy)[1]


class NoNorm(DataParallelPPOActor):
    def _optimizer_step(self):
        super()._optimizer_step()


@pytest.mark.parametrize(
    ("cls", "error", "message"),
    [
        (LogProbOnly, TypeError, r"LogProbOnly\._forward_micro_batch returned a tensor .*\(entropy, log_prob\)"),
        (WrongShape, ValueError, r"WrongShape\._forward_micro_batch returned log_prob of shape \(4, 4\)"),
        (NoEntropy, ValueError, r"NoEntropy\._forward_micro_batch returned no entropy"),
    ],
)
def test_unusable_forward_results_fail_naming_the_hook(base_model, cls, error, message):
    data = make_batch(base_model.config.vocab_size)
    with pytest.raises(error, match=message):
        cls(actor_config(), copy.deepcopy(base_model)).compute_log_prob(data, calculate_entropy=True)


def test_an_optimizer_step_without_a_norm_fails_naming_the_hook(base_model):
    module = copy.deepcopy(base_model)
    actor = NoNorm(actor_config(), module, torch.optim.SGD(module.parameters(), lr=0.1))
    with pytest.raises(TypeError, match=r"NoNorm\._optimizer_step returned NoneType None; it must return"):
        actor.update_policy(make_batch(base_model.config.vocab_size))


# ---------------------------------------------------------------------------- critic


class ShiftedCritic(DataParallelPPOCritic):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_inputs: list[set[str]] = []
        self.steps = 0

    def _forward_micro_batch(self, micro_batch):
        self.forward_inputs.append(set(micro_batch))
        return super()._forward_micro_batch(micro_batch) + 1.0

    def _optimizer_step(self):
        self.steps += 1
        return super()._optimizer_step()


def test_critic_loops_go_through_its_hooks(tiny_model_dir):
    torch.manual_seed(0)
    base = load_value_model(tiny_model_dir)
    data = make_batch(base.config.vocab_size)
    config = CriticConfig(
        ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4, forward_micro_batch_size_per_gpu=4, cliprange_value=0.5
    )
    plain = DataParallelPPOCritic(config, copy.deepcopy(base), None)
    module = copy.deepcopy(base)
    shifted = ShiftedCritic(config, module, torch.optim.AdamW(module.parameters()))
    values = plain.compute_values(data)
    torch.testing.assert_close(shifted.compute_values(data), (values + 1.0) * data.batch["response_mask"])
    data.batch["values"] = values
    metrics = shifted.update_critic(data)
    assert shifted.steps == 2 and len(metrics["critic/grad_norm"]) == 2
    assert all({"values", "returns", "response_mask"} <= keys for keys in shifted.forward_inputs[2:])
