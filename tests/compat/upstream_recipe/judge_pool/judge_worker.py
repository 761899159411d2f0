"""The recipe's reward worker: a rule-based judge that answers the reward-model call (``compute_rm_score``) from
a pool of its own, in place of a sequence-classification checkpoint."""

from __future__ import annotations

import os

import numpy as np
import torch

from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import hf_tokenizer
from verl.utils.fs import copy_to_local
from verl.workers.fsdp_workers import RewardModelWorker


class DigitJudgeWorker(RewardModelWorker):
    """Scores a response by the share of its characters equal to the ground truth's, position by position, and
    writes the score at the response's last token, as a reward model's ``rm_scores`` are written."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        self.tokenizer = hf_tokenizer(copy_to_local(self.config.reward.reward_model.model.path))
        self.judge_pid = os.getpid()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        responses = data.batch["responses"]
        width = responses.shape[1]
        response_mask = data.batch["attention_mask"][:, -width:]
        scores = torch.zeros(responses.shape, dtype=torch.float32)
        hits_per_row = []
        for row in range(len(data)):
            length = int(response_mask[row].sum())
            text = self.tokenizer.decode(responses[row][:length].tolist(), skip_special_tokens=True)
            truth = data.non_tensor_batch["reward_model"][row]["ground_truth"]
            hits_per_row.append(sum(got == want for got, want in zip(text, truth)))
            scores[row, max(length - 1, 0)] = hits_per_row[-1] / len(truth)
        columns = {"judge_hits": np.array(hits_per_row), "judge_pid": np.full(len(data), self.judge_pid)}
        return DataProto.from_dict(tensors={"rm_scores": scores}, non_tensors=columns)
