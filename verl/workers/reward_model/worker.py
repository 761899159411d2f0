"""RewardModelWorker: model-based reward as a worker group (`reward.reward_model.enable=true`).

Each rank holds a full copy of the sequence-classification reward model (scoring is forward-only, so no
sharding is needed at the sizes this serves) and scores its shard of the batch.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.device import get_device_name


class RewardModelWorker(Worker):
    """`config` is the flattened trainer config; reads `reward.reward_model` and `trainer.device`."""

    def __init__(self, config: DictConfig | dict, **kwargs: Any) -> None:
        super().__init__()
        self.config = OmegaConf.create(config) if isinstance(config, dict) else config
        self.reward_model = None

    def _device(self) -> str:
        device = str(self.config.trainer.device)
        return get_device_name() if device == "auto" else device

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.workers.reward_model.hf_reward_model import HFRewardModel

        self.reward_model = HFRewardModel.from_config(self.config.reward.reward_model, device=self._device())

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        if self.reward_model is None:
            raise RuntimeError("RewardModelWorker.compute_rm_score: call init_model first")
        return self.reward_model.compute_rm_score(data)
