"""verl.workers.engine_workers.TrainingWorker over a registered toy engine (a one-weight regression), in-process:
train_batch / train_mini_batch / infer_batch semantics, metrics and the LR schedule. No Ray, no distributed."""

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.config import CheckpointConfig
from verl.workers.config import EngineConfig, HFModelConfig, TrainingWorkerConfig
from verl.workers.engine import BaseEngine, EngineRegistry
from verl.workers.engine_workers import TrainingWorker


@EngineRegistry.register(model_type="language_model", backend="toy", device=["cpu", "cuda"])
class ToyEngine(BaseEngine):
    def __init__(self, model_config, engine_config, optimizer_config=None, checkpoint_config=None, **kwargs):
        self.engine_config = engine_config
        self.module = None

    def initialize(self):
        torch.manual_seed(0)
        self.module = torch.nn.Linear(1, 1, bias=False)
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=0.1)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)

    def train_mode(self, **kwargs):
        return nullcontext()

    def eval_mode(self, **kwargs):
        return nullcontext()

    def optimizer_zero_grad(self):
        self.optimizer.zero_grad()

    def optimizer_step(self):
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1e9)
        self.optimizer.step()
        return float(norm)

    def lr_scheduler_step(self):
        self.scheduler.step()
        return self.scheduler.get_last_lr()[0]

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        pred = self.module(data["x"].unsqueeze(-1)).squeeze(-1)
        loss, metrics = (
            loss_function(model_output={"pred": pred}, data=data, dp_group=None)
            if loss_function is not None
            else (torch.zeros(()), {})
        )
        if not forward_only:
            loss.backward()
        return {"model_output": {"pred": pred.detach()}, "loss": [float(loss)], "metrics": metrics}

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_size(self):
        return 1

    def get_data_parallel_group(self):
        return None

    def is_mp_src_rank_with_outputs(self):
        return True


def mse(model_output, data, dp_group):
    loss = ((model_output["pred"] - data["y"]) ** 2).mean()
    return loss, {"abs_err": [float((model_output["pred"] - data["y"]).detach().abs().mean())]}


def batch(n=4, **meta):
    x = torch.arange(1.0, n + 1)
    return tu.get_tensordict({"x": x, "y": 3 * x}, non_tensor_dict=meta)


@pytest.fixture
def worker():
    config = TrainingWorkerConfig(
        model_type="language_model",
        model_config=HFModelConfig(),
        engine_config=EngineConfig(strategy="toy", micro_batch_size_per_gpu=4),
    )
    worker = TrainingWorker(config)
    worker.reset()
    return worker


def test_train_batch_needs_a_loss_function_then_steps_and_reports(worker):
    with pytest.raises(RuntimeError, match="set_loss_fn"):
        worker.train_batch(batch())
    worker.set_loss_fn(mse)
    first = tu.get(worker.train_batch(batch(update_lr_scheduler=True)), "metrics")
    second = tu.get(worker.train_batch(batch()), "metrics")
    assert second["loss"] < first["loss"] and first["grad_norm"] > 0
    assert first["lr"] == pytest.approx(0.05) and "lr" not in second  # stepped only when asked
    assert isinstance(first["abs_err"], list) and "perf/cpu_memory_used_gb" in first


def test_infer_batch_returns_rows_and_can_skip_the_loss(worker):
    worker.set_loss_fn(mse)
    out = worker.infer_batch(batch())
    assert out["pred"].shape == (4,) and tu.get(out, "metrics")["loss"] > 0
    weight_before = worker.engine.module.weight.detach().clone()
    assert tu.get(worker.infer_batch(batch(compute_loss=False)), "metrics")["loss"] == 0.0
    assert torch.equal(worker.engine.module.weight, weight_before)  # forward only


def test_train_mini_batch_runs_every_step_and_steps_the_schedule_once(worker):
    worker.set_loss_fn(mse)
    out = worker.train_mini_batch(batch(4, mini_batch_size=2, epochs=2, seed=1))
    metrics = tu.get(out, "metrics")
    assert len(metrics["loss"]) == 4 and metrics["lr"] == [pytest.approx(0.05)]
    with pytest.raises(ValueError, match="mini_batch_size or num_mini_batch"):
        worker.train_mini_batch(TensorDict({"x": torch.ones(2), "y": torch.ones(2)}, batch_size=[2]))


def test_a_plain_config_is_typed_at_the_door():
    plain = SimpleNamespace(
        model_type="language_model",
        model_config={"use_remove_padding": True},
        engine_config=SimpleNamespace(strategy="toy", micro_batch_size_per_gpu=4, recipe_knob=7),
    )
    worker = TrainingWorker(plain)
    assert isinstance(worker.config, TrainingWorkerConfig) and isinstance(worker.model_config, HFModelConfig)
    assert isinstance(worker.engine_config, EngineConfig) and worker.engine_config.micro_batch_size_per_gpu == 4
    assert worker.engine_config.recipe_knob == 7  # a backend's own key, kept for the engine
    assert worker.optimizer_config is None and isinstance(worker.checkpoint_config, CheckpointConfig)
    data = batch()
    worker._batch_defaults(data, forward_only=False)
    assert tu.get(data, "use_remove_padding") is True and tu.get(data, "micro_batch_size_per_gpu") == 4
    with pytest.raises(ValueError, match="model_type"):
        TrainingWorker(TrainingWorkerConfig(engine_config=EngineConfig(strategy="toy")))
    with pytest.raises(ValueError, match="strategy"):
        TrainingWorker(TrainingWorkerConfig(model_type="language_model", engine_config=EngineConfig()))
