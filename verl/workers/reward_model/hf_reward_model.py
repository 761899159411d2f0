"""HFRewardModel: score generated samples with a Hugging Face sequence-classification checkpoint (one label).

The model-based alternative to rule-based scoring. It writes ``rm_scores`` ([N, response_length], the score at each
sample's last valid response token, zeros elsewhere); reward managers pass ``rm_scores`` through as the token-level
scores. A plain class: the trainer wraps it in a Ray worker when ``reward.reward_model.enable`` is set.

The score is read at the last token the attention mask marks valid, computed from the per-token head outputs rather
than the model's own pooling: that pooling finds "the last token that is not the pad token", which is wrong when the
pad token is also the EOS token ending a response.

When the policy and the reward model use different tokenizers (``input_tokenizer`` given), each sample is decoded with
the policy tokenizer and re-rendered with the reward model's chat template, as the reward model was trained on that.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.torch_functional import pad_2d_list_to_length

__all__ = ["DEFAULT_MICRO_BATCH_SIZE", "HFRewardModel"]

DEFAULT_MICRO_BATCH_SIZE = 8  # scoring rows per forward pass when reward.reward_model.micro_batch_size_per_gpu is unset


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"reward model dtype must be one of {sorted(names)}, got {dtype!r}")
    return names[dtype]


class HFRewardModel:
    """Load ``model_path`` with ``AutoModelForSequenceClassification`` (``num_labels=1``) and score batches.

    Args:
        model_path: checkpoint folder (reward.reward_model.model.path).
        input_tokenizer: the policy's tokenizer when it differs from the reward model's (switches chat templates).
        micro_batch_size: samples per forward pass.
        max_length: refuse re-rendered sequences longer than this (``None``: no limit).
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        input_tokenizer: Any = None,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "float32",
        micro_batch_size: int = DEFAULT_MICRO_BATCH_SIZE,
        max_length: int | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if micro_batch_size < 1:
            raise ValueError(f"reward model micro_batch_size must be >= 1, got {micro_batch_size}")
        path = os.path.expanduser(str(model_path))
        if not os.path.isdir(path):
            raise FileNotFoundError(f"reward model checkpoint not found: {path} (reward.reward_model.model.path)")
        self.device = torch.device(device)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, dtype=_dtype(dtype), trust_remote_code=trust_remote_code
        ).to(self.device)
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.input_tokenizer = input_tokenizer
        self.micro_batch_size = micro_batch_size
        self.max_length = max_length

    @classmethod
    def from_config(cls, config: Any, *, device: str | torch.device = "cpu") -> HFRewardModel:
        """Build from ``reward.reward_model``: ``model.path``, ``model.input_tokenizer`` (the policy tokenizer's path;
        set it when that tokenizer differs from the reward model's), ``micro_batch_size_per_gpu``, ``max_length``."""
        from transformers import AutoTokenizer

        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config.reward import RewardModelConfig

        if not isinstance(config, RewardModelConfig):
            config = omega_conf_to_dataclass(config, RewardModelConfig, path="reward.reward_model", keep_unknown=True)
        model_cfg = config.model
        if not model_cfg.path:
            raise ValueError("reward.reward_model.model.path must name the reward model checkpoint")
        trust = model_cfg.trust_remote_code
        input_tokenizer = model_cfg.input_tokenizer
        return cls(
            model_cfg.path,
            AutoTokenizer.from_pretrained(input_tokenizer, trust_remote_code=trust) if input_tokenizer else None,
            device=device,
            micro_batch_size=config.micro_batch_size_per_gpu or DEFAULT_MICRO_BATCH_SIZE,
            max_length=config.max_length,
            trust_remote_code=trust,
        )

    # --------------------------------------------------------------------------------------------- forward

    @torch.no_grad()
    def _last_token_scores(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """One score per row, read at the row's last valid token."""
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        if position_ids is not None:
            position_ids = position_ids.to(self.device)
        last = (torch.arange(attention_mask.shape[-1], device=self.device) * attention_mask).argmax(-1)
        rows = torch.arange(input_ids.shape[0], device=self.device)
        base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
        head = getattr(self.model, "score", None)
        if isinstance(base, torch.nn.Module) and isinstance(head, torch.nn.Module):
            hidden = base(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
            ).last_hidden_state
            return head(hidden[rows, last]).float()[:, 0].cpu()
        # Architectures without a separate ``score`` head: fall back to the model's own pooling.
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        return logits.float()[:, 0].cpu()

    def _switched_inputs(self, data: DataProto) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Re-render each sample (prompt messages + decoded response) with the reward model's chat template."""
        if "raw_prompt" not in data.non_tensor_batch:
            raise KeyError(
                "reward model with a different input tokenizer needs non-tensor key 'raw_prompt' "
                "(set data.return_raw_chat=true)"
            )
        responses, mask = data.batch["responses"], data.batch["attention_mask"]
        response_lengths = mask[:, -responses.shape[-1] :].sum(-1).tolist()
        rows = []
        for i in range(len(data)):
            text = self.input_tokenizer.decode(
                responses[i, : int(response_lengths[i])].tolist(), skip_special_tokens=True
            )
            chat = [*list(data.non_tensor_batch["raw_prompt"][i]), {"role": "assistant", "content": text}]
            rendered = self.tokenizer.apply_chat_template(chat, tokenize=False)
            ids = list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
            if self.max_length is not None and len(ids) > self.max_length:
                raise ValueError(
                    f"sample {i} has {len(ids)} reward-model tokens, more than reward.reward_model.max_length="
                    f"{self.max_length}"
                )
            rows.append(ids)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = pad_2d_list_to_length(rows, pad_id)
        attention_mask = pad_2d_list_to_length([[1] * len(r) for r in rows], 0)
        return input_ids, attention_mask, None

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``DataProto`` with ``rm_scores`` [N, response_length] for a batch holding ``responses`` and the full
        ``input_ids``/``attention_mask`` (``position_ids`` optional)."""
        for key in ("responses", "input_ids", "attention_mask"):
            if data.batch is None or key not in data.batch.keys():
                raise KeyError(f"reward model needs batch key {key!r}")
        if self.input_tokenizer is not None:
            input_ids, attention_mask, position_ids = self._switched_inputs(data)
        else:
            input_ids, attention_mask = data.batch["input_ids"], data.batch["attention_mask"]
            position_ids = data.batch["position_ids"] if "position_ids" in data.batch.keys() else None
        scores = []
        for start in range(0, input_ids.shape[0], self.micro_batch_size):
            end = start + self.micro_batch_size
            pos = position_ids[start:end] if position_ids is not None else None
            scores.append(self._last_token_scores(input_ids[start:end], attention_mask[start:end], pos))
        score = torch.cat(scores) if scores else torch.zeros(0)

        responses = data.batch["responses"]
        response_len = responses.shape[-1]
        valid = data.batch["attention_mask"][:, -response_len:].sum(-1)
        rm_scores = torch.zeros(len(data), response_len, dtype=torch.float32)
        rm_scores[torch.arange(len(data)), (valid - 1).clamp(min=0)] = score
        return DataProto.from_dict(tensors={"rm_scores": rm_scores})
