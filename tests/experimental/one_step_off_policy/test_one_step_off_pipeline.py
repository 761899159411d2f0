"""The one-step-off pipeline under verl's names, without workers: ``_create_continuous_iterator`` feeds
``_async_gen_next_batch``, whose result (a recipe's override included) is what ``_fit_generate`` hands the step,
generated under the version before the last update; the next generation starts as the step begins."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.experimental.one_step_off_policy.ray_trainer import NEXT_GENERATED, OneStepOffRayTrainer
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import StopTraining

N = 2  # rollout.n


def _config(total_epochs: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        rollout=SimpleNamespace(n=N, seed=3),
        trainer=SimpleNamespace(total_epochs=total_epochs, seed=1, balance_batch=False),
    )


def test_continuous_iterator_walks_the_data_epoch_after_epoch():
    trainer = object.__new__(OneStepOffRayTrainer)
    trainer.ppo_config, trainer.train_dataloader = _config(total_epochs=2), ["a", "b"]
    pairs = list(trainer._create_continuous_iterator())
    assert pairs[:4] == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert [epoch for epoch, _ in pairs] == sorted(epoch for epoch, _ in pairs)


def test_async_gen_next_batch_joins_prompts_and_responses_and_ends_with_the_data():
    trainer = object.__new__(OneStepOffRayTrainer)
    trainer.ppo_config, trainer._generation_step = _config(), 4
    submitted: list[DataProto] = []

    async def generated(rows: int) -> DataProto:
        responses = torch.full((rows, 3), 7)
        return DataProto.from_dict(
            {
                "prompts": torch.ones(rows, 2, dtype=torch.long),
                "responses": responses,
                "input_ids": torch.ones(rows, 5, dtype=torch.long),
                "attention_mask": torch.ones(rows, 5, dtype=torch.long),
                "position_ids": torch.arange(5).repeat(rows, 1),
            },
            meta_info={"timing": {"generate_sequences": 0.25}},
        )

    def submit(gen_batch: DataProto):
        submitted.append(gen_batch)
        return generated(len(gen_batch) * N)

    trainer._submit = submit
    prompts = {
        "input_ids": torch.ones(2, 2, dtype=torch.long),
        "attention_mask": torch.ones(2, 2, dtype=torch.long),
        "position_ids": torch.arange(2).repeat(2, 1),
        "data_source": np.array(["digits", "digits"], dtype=object),
    }
    metrics, timing, epoch, batch, future_reward = asyncio.run(trainer._async_gen_next_batch(iter([(2, prompts)])))
    assert epoch == 2 and future_reward is None and metrics == {}
    assert timing["generate_sequences"] == 0.25 and "generate_async" in timing
    assert submitted[0].meta_info["global_steps"] == 4  # the step the batch is for: its seeds and trace
    assert len(batch) == 2 * N and batch.batch["response_mask"].shape == (2 * N, 3)
    assert list(batch.non_tensor_batch["data_source"]) == ["digits"] * (2 * N)
    assert asyncio.run(trainer._async_gen_next_batch(iter([]))) is None


class _Recipe(OneStepOffRayTrainer):
    """A recipe that overrides the background generation: the pipeline must train on what it returns."""

    def __init__(self, results: list) -> None:
        self.results, self.requested = list(results), []
        self.ppo_config = _config()
        self.generate_timeout_s, self._executor, self._pending = 30.0, None, None
        self._continuous_iterator, self._unpublished_updates = iter([]), 0
        self.generation_versions, self.weight_version, self.published = {}, 0, []

    async def _async_gen_next_batch(self, continuous_iterator):
        self.requested.append(self._generation_step)
        return self.results.pop(0)

    def _push_weights(self, metrics: dict) -> None:
        self.weight_version += 1
        self.published.append(self.weight_version)

    def step(self, step: int, total: int) -> DataProto:
        self.global_steps, self.total_training_steps = step, total
        self.metrics, self.timing_raw = {}, {}
        assert self._fit_get_batch(NEXT_GENERATED) is None  # the prompts come with their generation
        batch = self._fit_generate(None)
        self._unpublished_updates += 1  # the step's actor update, published when the rollout is idle next
        return batch


def _result(tag: int, future_reward=None) -> tuple:
    batch = DataProto.from_dict({"x": torch.full((1, 1), tag)})
    return {"gen/tag": float(tag)}, {"gen_s": 0.1}, 0, batch, future_reward


def test_fit_generate_trains_on_the_background_result_one_update_behind():
    trainer = _Recipe([_result(1), _result(2), _result(3)])
    try:
        for step in (1, 2, 3):
            assert trainer.step(step, total=3).batch["x"].item() == step
            assert trainer.metrics["gen/tag"] == step and trainer.timing_raw["gen_s"] == 0.1
        assert trainer.requested == [1, 2, 3]  # generation k+1 started during step k; none after the last
        assert trainer.generation_versions == {1: 0, 2: 0, 3: 1}
        assert trainer.metrics["one_step_off/policy_lag"] == 1.0
        assert trainer.published == [1, 2]  # each before the next generation started
    finally:
        trainer._fit_finish(None)


def test_fit_generate_stops_when_the_data_runs_out_and_refuses_a_reward_future():
    trainer = _Recipe([None])
    with pytest.raises(StopTraining, match="data ran out"):
        trainer.step(1, total=5)
    trainer = _Recipe([_result(1, future_reward=object())])
    with pytest.raises(NotImplementedError, match="future_reward"):
        trainer.step(1, total=5)
    trainer._fit_finish(None)
