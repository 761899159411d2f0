"""verl.utils.skip / verl.utils.rollout_skip: generations are dumped on the first run and replayed afterwards."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from verl.base_config import ConfigError
from verl.protocol import DataProto
from verl.utils.extras import MissingExtraError
from verl.utils.rollout_skip import RolloutSkip as LegacyRolloutSkip
from verl.utils.skip import AsyncRolloutSkip, RolloutSkipConfig, SkipManager


def _config(dump_dir, steps=(1, 2), action="cache"):
    return OmegaConf.create(
        {
            "trainer": {"experiment_name": "e", "project_name": "p"},
            "data": {"train_batch_size": 2, "max_prompt_length": 4, "max_response_length": 8},
            "rollout": {"n": 1},
            "skip": {
                "_target_": "verl.utils.skip.SkipManagerConfig",
                "rollout": {"enable": True, "dump_dir": str(dump_dir), "steps": list(steps), "action": action},
            },
        }
    )


class _Rollout:
    def __init__(self):
        self.calls = 0

    @SkipManager.annotate("rollout")
    def generate_sequences(self, prompts):
        self.calls += 1
        return DataProto.from_dict(tensors={"responses": torch.full((2, 3), self.calls)})


def _prompts(validate=False):
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(2, 4, dtype=torch.long)}, meta_info={"validate": validate}
    )


@pytest.fixture(autouse=True)
def _reset_manager():
    yield
    SkipManager.config, SkipManager.step, SkipManager.skip_instances = None, -1, {}


def test_cache_dumps_then_replays_the_selected_steps(tmp_path):
    SkipManager.init(_config(tmp_path))
    first = _Rollout()
    for step in (1, 2, 3):
        SkipManager.set_step(step)
        first.generate_sequences(_prompts())
    assert first.calls == 3
    assert sorted(p.name for p in (tmp_path / "e_p" / "GBS2_N1_in4_out8").iterdir()) == ["1", "2"]

    SkipManager.init(_config(tmp_path))
    second = _Rollout()
    SkipManager.set_step(2)
    replayed = second.generate_sequences(_prompts())
    assert second.calls == 0 and replayed.batch["responses"].unique().tolist() == [2]
    SkipManager.set_step(3)  # not a selected step: generated
    second.generate_sequences(_prompts())
    assert second.calls == 1
    SkipManager.set_step(1)
    second.generate_sequences(_prompts(validate=True))  # validation always generates
    assert second.calls == 2


def test_repeat_serves_the_nearest_dumped_step(tmp_path):
    SkipManager.init(_config(tmp_path, steps=[1]))
    SkipManager.set_step(1)
    _Rollout().generate_sequences(_prompts())
    SkipManager.init(_config(tmp_path, steps=[5], action="repeat"))
    SkipManager.set_step(5)
    rollout = _Rollout()
    assert rollout.generate_sequences(_prompts()).batch["responses"].unique().tolist() == [1]
    assert rollout.calls == 0


def test_without_init_or_when_disabled_nothing_is_skipped(tmp_path):
    rollout = _Rollout()
    rollout.generate_sequences(_prompts())
    SkipManager.init(OmegaConf.create({"skip": {"rollout": {"enable": False}}}))
    SkipManager.set_step(1)
    rollout.generate_sequences(_prompts())
    assert rollout.calls == 2 and not list(tmp_path.iterdir())


def test_config_checks_and_unported_variants():
    with pytest.raises(ConfigError, match="action"):
        RolloutSkipConfig(action="random")
    with pytest.raises(MissingExtraError, match="fully-async"):
        AsyncRolloutSkip(RolloutSkipConfig(), None)


def test_legacy_rollout_skip_patches_the_worker_group(tmp_path):
    config = OmegaConf.create(
        {
            "trainer": {"experiment_name": "e", "project_name": "p"},
            "data": {"train_batch_size": 2},
            "rollout": {"n": 1, "skip_dump_dir": str(tmp_path)},
        }
    )

    class _WorkerGroup:
        def __init__(self):
            self.calls = 0

        def generate_sequences(self, batch):
            self.calls += 1
            return DataProto.from_dict(tensors={"responses": torch.full((2, 1), self.calls)})

    wg = _WorkerGroup()
    LegacyRolloutSkip(config, wg).wrap_generate_sequences()
    wg.generate_sequences(_prompts())
    wg.generate_sequences(_prompts())
    assert wg.calls == 2
    wg2 = _WorkerGroup()
    LegacyRolloutSkip(config, wg2).wrap_generate_sequences()
    outputs = [wg2.generate_sequences(_prompts()).batch["responses"].unique().tolist() for _ in range(3)]
    assert outputs == [[1], [2], [1]] and wg2.calls == 1  # third call had no dump: generated (its first call)
