"""AbstractRewardManager: turn a batch of generated samples into token-level scores.

A manager decodes each response, asks a scoring function for a number and writes it at the sample's last valid
response token of ``token_level_scores`` (shape ``[N, response_length]``, zeros elsewhere): outcome rewards belong to
the token that ended the response. Subclasses decide how the scoring function is called (one sample at a time, a whole
batch, extra shaping); this base class holds the shared parts: decoding, the process pool with per-sample timeouts,
failure metrics and the ``num_examine`` printout.

``__call__(data, return_dict=False)`` returns the reward tensor, or with ``return_dict=True`` a dict with
``reward_tensor``, ``reward_extra_info`` (per-sample lists, e.g. ``acc`` when the function returns a dict) and
``reward_metrics`` (``reward/num_failed``: samples that scored 0 because the function raised, timed out or crashed;
``reward/num_timeout``: the timed-out ones among them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.reward_runner import RewardRunner, ScoreOutcome
from verl.utils.reward_score import default_compute_score

__all__ = ["AbstractRewardManager", "RawRewardFn", "Sample", "score_value"]

# A scoring function: compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs) -> float | dict
RawRewardFn = Callable[..., Any]

NUM_FAILED = "reward/num_failed"
NUM_TIMEOUT = "reward/num_timeout"


@dataclass
class Sample:
    """One decoded sample as the scoring function sees it."""

    prompt_str: str
    response_str: str
    response_length: int
    data_source: Any
    ground_truth: Any
    extra_info: Any


def score_value(result: Any) -> tuple[float, dict[str, Any]]:
    """Split a scoring function's return into the reward and the extra per-sample info.

    A number is the reward; a dict must carry the reward under ``"score"`` and its other keys become extra info.
    """
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a reward function returning a dict must include 'score'; got keys {sorted(result)}")
        extra = {k: v for k, v in result.items() if k != "score"}
        return float(result["score"]), extra
    return float(result), {}


class AbstractRewardManager(ABC):
    """Base of the registered reward managers.

    Args:
        tokenizer: decodes responses (special tokens and padding are skipped).
        num_examine: how many samples per data source to print on each call (0: none).
        compute_score: the scoring function; ``None`` uses ``default_compute_score``.
        reward_fn_key: the non-tensor key naming each sample's data source.
        num_workers: scoring processes (0: in the calling process, no timeout).
        timeout_s: per-call wall-clock limit in the pool; ``None``: no limit.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        *,
        num_workers: int = 0,
        timeout_s: float | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score if compute_score is not None else self.default_score_fn()
        self.reward_fn_key = reward_fn_key
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self._runner: RewardRunner | None = None

    def default_score_fn(self) -> Callable[..., Any]:
        return default_compute_score

    # -------------------------------------------------------------------------------------------- lifecycle

    @property
    def runner(self) -> RewardRunner:
        if self._runner is None:
            self._runner = RewardRunner(self.compute_score, num_workers=self.num_workers, timeout_s=self.timeout_s)
        return self._runner

    def close(self) -> None:
        """Stop the scoring processes (they are daemons, so exiting the driver stops them too)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to another process (a Ray task such as compute_reward_async) starts its own scoring processes.
        state = dict(self.__dict__)
        state["_runner"] = None
        return state

    # ---------------------------------------------------------------------------------------------- helpers

    def decode(self, data: DataProto) -> list[Sample]:
        """Decode every sample's valid prompt and response tokens (lengths from ``attention_mask``)."""
        present = list(data.batch.keys()) if data.batch is not None else []
        for key in ("prompts", "responses", "attention_mask"):
            if key not in present:
                raise KeyError(f"reward manager needs batch key {key!r}; the batch has {present}")
        prompts, responses = data.batch["prompts"], data.batch["responses"]
        prompt_len = prompts.shape[-1]
        mask = data.batch["attention_mask"]
        prompt_lengths = mask[:, :prompt_len].sum(-1).tolist()
        response_lengths = mask[:, prompt_len:].sum(-1).tolist()
        non_tensor = data.non_tensor_batch
        if self.reward_fn_key not in non_tensor:
            raise KeyError(f"reward manager needs non-tensor key {self.reward_fn_key!r} (data.reward_fn_key)")
        samples = []
        for i in range(len(data)):
            p_len, r_len = int(prompt_lengths[i]), int(response_lengths[i])
            reward_model = non_tensor["reward_model"][i] if "reward_model" in non_tensor else None
            ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
            extra_info = non_tensor["extra_info"][i] if "extra_info" in non_tensor else None
            samples.append(
                Sample(
                    prompt_str=self.tokenizer.decode(
                        prompts[i, prompt_len - p_len :].tolist(), skip_special_tokens=True
                    ),
                    response_str=self.tokenizer.decode(responses[i, :r_len].tolist(), skip_special_tokens=True),
                    response_length=r_len,
                    data_source=non_tensor[self.reward_fn_key][i],
                    ground_truth=ground_truth,
                    extra_info=extra_info,
                )
            )
        return samples

    @staticmethod
    def job(sample: Sample) -> dict[str, Any]:
        return {
            "data_source": sample.data_source,
            "solution_str": sample.response_str,
            "ground_truth": sample.ground_truth,
            "extra_info": sample.extra_info,
        }

    @staticmethod
    def failure_metrics(outcomes: list[ScoreOutcome], weight: int = 1) -> dict[str, float]:
        failed = sum(weight for o in outcomes if not o.ok)
        timed_out = sum(weight for o in outcomes if o.timed_out)
        return {NUM_FAILED: float(failed), NUM_TIMEOUT: float(timed_out)}

    @staticmethod
    def place_scores(samples: list[Sample], scores: list[float], response_width: int) -> torch.Tensor:
        """``[N, response_width]`` zeros with each score at its sample's last valid response token."""
        reward_tensor = torch.zeros(len(samples), response_width, dtype=torch.float32)
        for i, (sample, score) in enumerate(zip(samples, scores)):
            reward_tensor[i, max(sample.response_length - 1, 0)] = score
        return reward_tensor

    @staticmethod
    def collect_extra(extras: list[dict[str, Any]]) -> dict[str, list[Any]]:
        """Per-key lists of length N; a sample without a key (e.g. a failed one) gets 0.0."""
        keys: list[str] = []
        for extra in extras:
            keys.extend(k for k in extra if k not in keys)
        return {key: [extra.get(key, 0.0) for extra in extras] for key in keys}

    def examine(self, samples: list[Sample], scores: list[float]) -> None:
        """Print the first ``num_examine`` samples of each data source (what a user checks first when rewards look
        wrong)."""
        if self.num_examine <= 0:
            return
        printed: dict[Any, int] = defaultdict(int)
        for sample, score in zip(samples, scores):
            if printed[sample.data_source] >= self.num_examine:
                continue
            printed[sample.data_source] += 1
            print(f"[prompt] {sample.prompt_str}")
            print(f"[response] {sample.response_str}")
            print(f"[ground_truth] {sample.ground_truth}")
            print(f"[score] {score}")

    @staticmethod
    def from_rm_scores(data: DataProto, return_dict: bool) -> torch.Tensor | dict[str, Any] | None:
        """Scores a reward model already wrote (``rm_scores``) are returned as they are."""
        if data.batch is None or "rm_scores" not in data.batch.keys():
            return None
        reward_tensor = data.batch["rm_scores"]
        if not return_dict:
            return reward_tensor
        return {
            "reward_tensor": reward_tensor,
            "reward_extra_info": {},
            "reward_metrics": {NUM_FAILED: 0.0, NUM_TIMEOUT: 0.0},
        }

    def _extract_reward_from_rm_scores(
        self, data: DataProto, return_dict: bool = False
    ) -> torch.Tensor | dict[str, Any] | None:
        """verl's name for :meth:`from_rm_scores`, which reads the extra-info columns a reward loop wrote
        (``meta_info["reward_extra_keys"]``) as well."""
        result = self.from_rm_scores(data, return_dict)
        if isinstance(result, dict):
            keys = data.meta_info.get("reward_extra_keys", []) or []
            result["reward_extra_info"] = {key: data.non_tensor_batch[key] for key in keys}
        return result

    @staticmethod
    def result(
        reward_tensor: torch.Tensor, extra_info: dict[str, list], metrics: dict[str, float], return_dict: bool
    ) -> torch.Tensor | dict[str, Any]:
        if not return_dict:
            return reward_tensor
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra_info, "reward_metrics": metrics}

    @abstractmethod
    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """Score ``data`` (see the module docstring for the return value)."""
