"""A checkpointed data loader resumes with exactly the batches an uninterrupted run would have drawn next."""

import pytest
import torch
from omegaconf import OmegaConf

from verl.utils.dataset import RLHFDataset, create_rl_sampler, create_stateful_dataloader
from verl.utils.synthetic_tasks import write_task_files

EPOCHS = 3
BATCH = 3


@pytest.fixture(scope="module")
def dataset(tiny_model_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = write_task_files("target_digit", tmp_path_factory.mktemp("loader"), train_size=10, test_size=2)["train"]
    return RLHFDataset(str(path), tokenizer, OmegaConf.create({"max_prompt_length": 8}))


def make_loader(dataset, shuffle):
    config = OmegaConf.create({"shuffle": shuffle, "seed": 3})
    return create_stateful_dataloader(dataset, batch_size=BATCH, sampler=create_rl_sampler(config, dataset))


def batch_ids(batch):
    return tuple(int(i) for i in batch["index"])


def run_epochs(loader, start_epoch=0):
    return [(epoch, batch_ids(b)) for epoch in range(start_epoch, EPOCHS) for b in loader]


def interrupted_run(dataset, shuffle, stop_after, tmp_path):
    """Train-loop style: stop right after the ``stop_after``-th batch, save, resume in a fresh loader."""
    loader = make_loader(dataset, shuffle)
    seen, state = [], None
    for epoch in range(EPOCHS):
        for batch in loader:
            seen.append((epoch, batch_ids(batch)))
            if len(seen) == stop_after:
                state = loader.state_dict()
                break
        if state is not None:
            break
    torch.save(state, tmp_path / "loader.pt")  # the state must survive a checkpoint file
    resumed = make_loader(dataset, shuffle)
    resumed.load_state_dict(torch.load(tmp_path / "loader.pt", weights_only=False))
    return seen + run_epochs(resumed, start_epoch=epoch)


@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_matches_uninterrupted_run(dataset, shuffle, tmp_path):
    full = run_epochs(make_loader(dataset, shuffle))
    per_epoch = len(dataset) // BATCH
    assert len(full) == EPOCHS * per_epoch
    if shuffle:
        assert full[0][1] != full[per_epoch][1], "epochs should be shuffled differently"
    # Mid first epoch, last batch of an epoch, and mid a later epoch.
    for stop_after in (1, per_epoch, per_epoch + 2, 2 * per_epoch + 1):
        assert interrupted_run(dataset, shuffle, stop_after, tmp_path) == full, f"stop_after={stop_after}"


def test_resume_after_a_finished_epoch(dataset):
    full = run_epochs(make_loader(dataset, True))
    loader = make_loader(dataset, True)
    first = [(0, batch_ids(b)) for b in loader]
    resumed = make_loader(dataset, True)
    resumed.load_state_dict(loader.state_dict())
    assert first + run_epochs(resumed, start_epoch=1) == full


def test_batches_are_collated(dataset):
    batch = next(iter(make_loader(dataset, True)))
    assert batch["input_ids"].shape == (BATCH, 8)
    assert batch["raw_prompt_ids"].dtype == object and len(batch["data_source"]) == BATCH


def test_bad_batch_size(dataset):
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        create_stateful_dataloader(dataset, batch_size=0)


def test_a_position_the_loader_cannot_resume_from_is_refused_by_file(dataset):
    from verl.utils.dataset.dataloader import check_loader_state

    loader = make_loader(dataset, shuffle=True)
    next(iter(loader))
    check_loader_state(make_loader(dataset, shuffle=True), loader.state_dict(), "ckpt/trainer_state.pt")
    with pytest.raises(
        ValueError,
        match=r"ckpt/trainer_state.pt: the saved data loader position does not fit .*"
        r"unexpected \['not'\].*dataloader_num_workers",
    ):
        check_loader_state(loader, {"not": "a position"}, "ckpt/trainer_state.pt")
    with pytest.raises(ValueError, match=r"ckpt/trainer_state.pt: the saved data loader position is a NoneType"):
        check_loader_state(loader, None, "ckpt/trainer_state.pt")
