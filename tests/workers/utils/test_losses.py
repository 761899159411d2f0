"""verl.workers.utils.losses: the engine loss functions agree with the PPO algorithms applied to padded tensors,
and micro-batch losses with the global counts add up to the mini-batch loss."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.trainer.ppo.core_algos import agg_loss, compute_value_loss, get_policy_loss_fn, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import ActorConfig, CriticConfig
from verl.workers.utils.losses import ppo_loss, sft_loss, value_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

P, R = 3, 4


def batch(rows: int = 4) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    attention_mask = torch.ones(rows, P + R, dtype=torch.long)
    attention_mask[0, 0] = 0
    attention_mask[1, -2:] = 0
    response_mask = attention_mask[:, P:].clone()
    td = TensorDict(
        {
            "prompts": torch.randint(2, 9, (rows, P), generator=gen),
            "responses": torch.randint(2, 9, (rows, R), generator=gen),
            "attention_mask": attention_mask,
            "position_ids": torch.clamp(attention_mask.cumsum(-1) - 1, min=0),
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(rows, R, generator=gen),
            "ref_log_prob": -torch.rand(rows, R, generator=gen),
            "advantages": torch.randn(rows, R, generator=gen),
            "values": torch.randn(rows, R, generator=gen),
            "returns": torch.randn(rows, R, generator=gen),
        },
        batch_size=[rows],
    )
    td.set("input_ids", torch.cat([td["prompts"], td["responses"]], 1))
    return left_right_2_no_padding(td)


def model_output(data: TensorDict, seed: int = 1) -> dict[str, torch.Tensor]:
    lengths = data["input_ids"].offsets().diff()
    gen = torch.Generator().manual_seed(seed)
    flat = -torch.rand(int(lengths.sum()), generator=gen)
    offsets = data["input_ids"].offsets()
    return {
        "log_probs": torch.nested.nested_tensor_from_jagged(flat, offsets=offsets),
        "entropy": torch.nested.nested_tensor_from_jagged(flat.abs() * 3, offsets=offsets),
        "values": torch.nested.nested_tensor_from_jagged(flat * 2, offsets=offsets),
    }


def test_ppo_loss_matches_the_algorithms_on_padded_tensors():
    config = ActorConfig(ppo_mini_batch_size=4, entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.1)
    data = batch()
    output = model_output(data)
    loss, metrics = ppo_loss(config, output, data)
    log_prob = no_padding_2_padding(output["log_probs"], data)
    entropy = no_padding_2_padding(output["entropy"], data)
    mask = data["response_mask"].bool()
    pg, _ = get_policy_loss_fn("vanilla")(
        data["old_log_probs"], log_prob, data["advantages"], mask, loss_agg_mode="token-mean", config=config
    )
    kl = agg_loss(kl_penalty(log_prob, data["ref_log_prob"], config.kl_loss_type), mask, "token-mean")
    expected = pg - 0.01 * agg_loss(entropy, mask, "token-mean") + 0.1 * kl
    torch.testing.assert_close(loss, expected)
    assert isinstance(metrics["actor/pg_loss"], Metric)
    assert metrics["actor/pg_loss"].aggregation is AggregationType.MEAN  # no global counts: a per-batch mean
    assert metrics["kl_coef"] == 0.1


def test_micro_batch_losses_with_global_counts_add_up_to_the_batch_loss():
    config = ActorConfig(ppo_mini_batch_size=4, entropy_coeff=0.0)
    data = batch()
    output = model_output(data)
    full, _ = ppo_loss(config, output, data)
    tokens = int(data["loss_mask"].sum())
    parts = []
    for rows in ([0, 1], [2, 3]):
        micro = tu.index_select_tensor_dict(data, rows)
        tu.assign_non_tensor(micro, batch_num_tokens=tokens, dp_size=1, global_batch_size=4)
        micro_output = {
            k: torch.nested.as_nested_tensor([v.unbind()[i] for i in rows], layout=torch.jagged)
            for k, v in output.items()
        }
        loss, metrics = ppo_loss(config, micro_output, micro)
        assert metrics["actor/pg_loss"].aggregation is AggregationType.SUM
        parts.append(loss)
    torch.testing.assert_close(parts[0] + parts[1], full)


def test_value_loss_matches_compute_value_loss():
    config = CriticConfig(ppo_mini_batch_size=4, cliprange_value=0.2)
    data = batch()
    output = model_output(data)
    loss, metrics = value_loss(config, output, data)
    vpreds = no_padding_2_padding(output["values"], data)
    expected, clipfrac = compute_value_loss(
        vpreds, data["returns"], data["values"], data["response_mask"].bool(), 0.2, config.loss_agg_mode
    )
    torch.testing.assert_close(loss, expected)
    assert metrics["critic/vf_clipfrac"] == clipfrac.item()


def test_sft_loss_is_the_mean_nll_of_loss_masked_next_tokens():
    lengths = [3, 2]
    offsets = torch.tensor([0, 3, 5])
    log_probs = torch.nested.nested_tensor_from_jagged(torch.tensor([-1.0, -2.0, -3.0, -4.0, -5.0]), offsets)
    # loss_mask marks the tokens to learn; the log-prob of token t + 1 sits at position t
    loss_mask = torch.nested.nested_tensor_from_jagged(torch.tensor([0, 1, 1, 0, 1]), offsets)
    data = TensorDict({"loss_mask": loss_mask, "input_ids": log_probs}, batch_size=[len(lengths)])
    loss, _ = sft_loss(None, {"log_probs": log_probs}, data)
    torch.testing.assert_close(loss, torch.tensor((1.0 + 2.0 + 4.0) / 3))
