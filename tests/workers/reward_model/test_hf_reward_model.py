"""HFRewardModel on a tiny sequence-classification checkpoint built from the tiny Llama."""

import pytest
import torch

from verl import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, pad_2d_list_to_length
from verl.workers.reward_manager import NaiveRewardManager
from verl.workers.reward_model import HFRewardModel

PROMPT_LEN, RESPONSE_LEN = 12, 8


@pytest.fixture(scope="module")
def rm_dir(tiny_model_dir, tmp_path_factory):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # a visible signal instead of a near-zero head
    out = tmp_path_factory.mktemp("tiny_rm")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def rm(rm_dir):
    return HFRewardModel(rm_dir, micro_batch_size=2)


def make_batch(tokenizer, questions, answers):
    messages = [[{"role": "user", "content": q}] for q in questions]
    prompt_rows = [
        tokenizer(
            tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False), add_special_tokens=False
        )["input_ids"]
        for m in messages
    ]
    response_rows = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    pad = tokenizer.pad_token_id
    prompts = pad_2d_list_to_length(prompt_rows, pad, PROMPT_LEN, left_pad=True)
    responses = pad_2d_list_to_length(response_rows, pad, RESPONSE_LEN)
    mask = torch.cat(
        [
            pad_2d_list_to_length([[1] * len(r) for r in prompt_rows], 0, PROMPT_LEN, left_pad=True),
            pad_2d_list_to_length([[1] * len(r) for r in response_rows], 0, RESPONSE_LEN),
        ],
        dim=1,
    )
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
        },
        non_tensors={"raw_prompt": messages, "data_source": ["x"] * len(questions)},
    )
    return data, [p + r for p, r in zip(prompt_rows, response_rows)]


@torch.no_grad()
def reference_score(model, ids):
    """The model's own pooled score on one unpadded sequence."""
    return model(input_ids=torch.tensor([ids])).logits[0, 0].item()


def test_scores_sit_at_last_response_token_and_ignore_padding(rm):
    data, sequences = make_batch(rm.tokenizer, ["1+1=", "12+30=", "7="], ["2", "42", "7777777"])
    out = rm.compute_rm_score(data)
    scores = out.batch["rm_scores"]
    assert scores.shape == (3, RESPONSE_LEN)
    last = data.batch["attention_mask"][:, PROMPT_LEN:].sum(-1) - 1
    for i, ids in enumerate(sequences):
        assert scores[i, last[i]].item() == pytest.approx(reference_score(rm.model, ids), abs=1e-4)
        assert scores[i].count_nonzero() == 1
    assert len({round(scores[i, last[i]].item(), 4) for i in range(3)}) == 3, "different samples, different scores"


def test_eos_equal_to_pad_does_not_move_the_score(rm_dir):
    # The model's own pooling looks for "the last non-pad token"; with pad == eos it would skip the eos.
    scorer = HFRewardModel(rm_dir)
    data, sequences = make_batch(scorer.tokenizer, ["3="], ["33"])
    scorer.model.config.pad_token_id = scorer.tokenizer.eos_token_id
    score = scorer.compute_rm_score(data).batch["rm_scores"]
    scorer.model.config.pad_token_id = None
    assert score.sum().item() == pytest.approx(reference_score(scorer.model, sequences[0]), abs=1e-4)


def test_switching_tokenizer_rerenders_the_chat(rm_dir):
    from transformers import AutoTokenizer

    policy_tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    scorer = HFRewardModel(rm_dir, input_tokenizer=policy_tokenizer)
    data, _ = make_batch(policy_tokenizer, ["5+5=", "2="], ["10", "2222"])
    scores = scorer.compute_rm_score(data).batch["rm_scores"]
    last = data.batch["attention_mask"][:, PROMPT_LEN:].sum(-1) - 1
    for i, (question, answer) in enumerate([("5+5=", "10"), ("2=", "2222")]):
        chat = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        ids = scorer.tokenizer(scorer.tokenizer.apply_chat_template(chat, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
        assert scores[i, last[i]].item() == pytest.approx(reference_score(scorer.model, ids), abs=1e-4)

    data.non_tensor_batch.pop("raw_prompt")
    with pytest.raises(KeyError, match="'raw_prompt'.*return_raw_chat"):
        scorer.compute_rm_score(data)


def test_reward_manager_uses_rm_scores(rm):
    data, _ = make_batch(rm.tokenizer, ["4="], ["4444"])
    data = data.union(rm.compute_rm_score(data))
    manager = NaiveRewardManager(rm.tokenizer, compute_score=lambda **kw: 1 / 0)
    assert torch.equal(manager(data), data.batch["rm_scores"])


def test_missing_checkpoint_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "no_rm")):
        HFRewardModel(tmp_path / "no_rm")


def test_from_reward_config(rm_dir):
    from verl.workers.config import RewardModelConfig, RewardModelPathConfig

    config = RewardModelConfig(
        enable=True,
        model=RewardModelPathConfig(path=str(rm_dir), input_tokenizer=str(rm_dir)),
        micro_batch_size_per_gpu=3,
    )
    scorer = HFRewardModel.from_config(config)
    assert scorer.micro_batch_size == 3 and scorer.input_tokenizer is not None
    assert (
        HFRewardModel.from_config(RewardModelConfig(model=RewardModelPathConfig(path=str(rm_dir)))).input_tokenizer
        is None
    )
    with pytest.raises(ValueError, match="reward.reward_model.model.path"):
        HFRewardModel.from_config(RewardModelConfig())
