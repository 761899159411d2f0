"""data.validation_shuffle: the validation loader reads one seeded shuffled order, or file order when off."""

import pytest

from verl.trainer.config.compose import compose_ppo_config
from verl.trainer.ppo.dataloaders import build_dataloaders
from verl.utils.synthetic_tasks import write_task_files

VAL_ROWS = 12


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task_files("target_digit", tmp_path_factory.mktemp("val_order"), train_size=8, test_size=VAL_ROWS)


def val_order(files, tokenizer, *overrides: str) -> list[int]:
    """Row indices of the validation set in the order the trainer's validation loader yields them, over two passes."""
    config = compose_ppo_config(
        [
            f"data.train_files={files['train']}",
            f"data.val_files={files['test']}",
            "data.train_batch_size=4",
            "actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "data.val_batch_size=5",
            "data.max_prompt_length=8",
            *overrides,
        ]
    )
    val_loader = build_dataloaders(config, tokenizer)[3]
    passes = [[int(i) for batch in val_loader for i in batch["index"]] for _ in range(2)]
    assert passes[0] == passes[1], "every validation must read the same order"
    return passes[0]


def test_validation_reads_file_order_by_default(files, tokenizer):
    assert val_order(files, tokenizer) == list(range(VAL_ROWS))
    assert val_order(files, tokenizer, "data.validation_shuffle=false") == list(range(VAL_ROWS))


def test_validation_shuffle_is_a_seeded_permutation(files, tokenizer):
    shuffled = val_order(files, tokenizer, "data.validation_shuffle=true", "trainer.seed=7")
    assert sorted(shuffled) == list(range(VAL_ROWS))
    assert shuffled != list(range(VAL_ROWS))
    assert val_order(files, tokenizer, "data.validation_shuffle=true", "trainer.seed=7") == shuffled
    assert val_order(files, tokenizer, "data.validation_shuffle=true", "trainer.seed=8") != shuffled


def train_order(files, tokenizer, *overrides: str) -> list[int]:
    config = compose_ppo_config(
        [
            f"data.train_files={files['train']}",
            f"data.val_files={files['test']}",
            "data.train_batch_size=4",
            "actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "data.max_prompt_length=8",
            *overrides,
        ]
    )
    return [int(i) for batch in build_dataloaders(config, tokenizer)[2] for i in batch["index"]]


def test_data_seed_orders_the_prompts_when_set(files, tokenizer):
    by_trainer_seed = {seed: train_order(files, tokenizer, f"trainer.seed={seed}") for seed in (7, 8)}
    assert by_trainer_seed[7] != by_trainer_seed[8]
    # data.seed wins over trainer.seed, whatever trainer.seed is
    assert train_order(files, tokenizer, "data.seed=7", "trainer.seed=8") == by_trainer_seed[7]
    assert val_order(files, tokenizer, "data.validation_shuffle=true", "data.seed=7", "trainer.seed=8") == val_order(
        files, tokenizer, "data.validation_shuffle=true", "trainer.seed=7"
    )


def test_max_samples_keep_the_first_rows_of_each_set(files, tokenizer):
    config = compose_ppo_config(
        [
            f"data.train_files={files['train']}",
            f"data.val_files={files['test']}",
            "data.train_batch_size=4",
            "actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "data.max_prompt_length=8",
            "data.train_max_samples=4",
            "data.val_max_samples=5",
        ]
    )
    train_set, val_set, train_loader, val_loader = build_dataloaders(config, tokenizer)
    assert (len(train_set), len(val_set)) == (4, 5)
    assert sorted(int(i) for batch in train_loader for i in batch["index"]) == [0, 1, 2, 3]
    assert [int(i) for batch in val_loader for i in batch["index"]] == [0, 1, 2, 3, 4]
