import pytest
from omegaconf import OmegaConf

from verl.trainer.ppo.checkpointing import TRACKER_FILE, TrainerCheckpointer


def _cfg(tmp_path, **kwargs):
    base = {
        "default_local_dir": str(tmp_path),
        "resume_mode": "auto",
        "resume_from_path": None,
        "max_actor_ckpt_to_keep": None,
    }
    base.update(kwargs)
    return OmegaConf.create(base)


def test_auto_resume_finds_newest_complete_checkpoint(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    assert ckpt.find_resume_dir() is None
    ckpt.save_trainer_state(2, {"dataloader": {"pos": 2}})
    ckpt.save_trainer_state(4, {"dataloader": {"pos": 4}})
    step_dir = ckpt.find_resume_dir()
    assert step_dir == tmp_path / "global_step_4"
    assert ckpt.load_trainer_state(step_dir) == {"global_step": 4, "dataloader": {"pos": 4}}


def test_half_written_checkpoint_is_not_resumed(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    ckpt.save_trainer_state(2, {})
    (tmp_path / "global_step_3").mkdir()  # killed before the state file and tracker were written
    assert ckpt.find_resume_dir() == tmp_path / "global_step_2"
    (tmp_path / TRACKER_FILE).write_text("3")  # tracker points at an incomplete folder
    assert ckpt.find_resume_dir() is None


def test_disable_and_resume_path(tmp_path):
    TrainerCheckpointer(_cfg(tmp_path)).save_trainer_state(1, {})
    assert TrainerCheckpointer(_cfg(tmp_path, resume_mode="disable")).find_resume_dir() is None
    explicit = TrainerCheckpointer(
        _cfg(tmp_path, resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_1"))
    )
    assert explicit.find_resume_dir() == tmp_path / "global_step_1"
    with pytest.raises(FileNotFoundError, match="trainer.resume_from_path=.*global_step_9"):
        TrainerCheckpointer(
            _cfg(tmp_path, resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_9"))
        ).find_resume_dir()
    with pytest.raises(ValueError, match="trainer.resume_from_path: must be set when resume_mode=resume_path"):
        TrainerCheckpointer(_cfg(tmp_path, resume_mode="resume_path")).find_resume_dir()


def test_bad_resume_mode_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"trainer.resume_mode: must be one of .*got 'sometimes'"):
        TrainerCheckpointer(_cfg(tmp_path, resume_mode="sometimes"))


def test_old_checkpoints_are_pruned(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path, max_actor_ckpt_to_keep=2))
    for step in (1, 2, 3):
        ckpt.save_trainer_state(step, {})
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2", "global_step_3"]


def _save_with_roles(ckpt, step, roles=("actor", "critic")):
    for role in roles:
        (ckpt.step_dir(step) / role).mkdir(parents=True)
        (ckpt.step_dir(step) / role / "shard").write_text(role)
    ckpt.save_trainer_state(step, {})


def _layout(tmp_path):
    return {p.name: sorted(c.name for c in p.iterdir()) for p in sorted(tmp_path.glob("global_step_*"))}


def test_critic_shards_have_their_own_limit(tmp_path):
    fewer = TrainerCheckpointer(_cfg(tmp_path / "fewer", max_actor_ckpt_to_keep=3, max_critic_ckpt_to_keep=1))
    for step in (1, 2, 3, 4):
        _save_with_roles(fewer, step)
    assert _layout(tmp_path / "fewer") == {
        "global_step_2": ["actor", "trainer_state.pt"],
        "global_step_3": ["actor", "trainer_state.pt"],
        "global_step_4": ["actor", "critic", "trainer_state.pt"],
    }
    more = TrainerCheckpointer(_cfg(tmp_path / "more", max_actor_ckpt_to_keep=1, max_critic_ckpt_to_keep=2))
    for step in (1, 2, 3):
        _save_with_roles(more, step)
    # step 2 keeps its critic shards only: it is no longer a checkpoint to resume from
    assert _layout(tmp_path / "more") == {
        "global_step_2": ["critic"],
        "global_step_3": ["actor", "critic", "trainer_state.pt"],
    }
    assert more.find_resume_dir() == tmp_path / "more" / "global_step_3"
    same = TrainerCheckpointer(_cfg(tmp_path / "same", max_actor_ckpt_to_keep=1))  # unset: the actor's limit
    for step in (1, 2):
        _save_with_roles(same, step)
    assert _layout(tmp_path / "same") == {"global_step_2": ["actor", "critic", "trainer_state.pt"]}
    actor_only = TrainerCheckpointer(_cfg(tmp_path / "actor_only", max_actor_ckpt_to_keep=1, max_critic_ckpt_to_keep=3))
    for step in (1, 2):
        _save_with_roles(actor_only, step, roles=("actor",))  # no critic in this run: nothing else to keep
    assert _layout(tmp_path / "actor_only") == {"global_step_2": ["actor", "trainer_state.pt"]}


def test_deleting_the_loaded_checkpoint_moves_the_tracker_back(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path, del_local_ckpt_after_load=True))
    assert ckpt.del_after_load
    for step in (2, 4):
        ckpt.save_trainer_state(step, {})
    (tmp_path / "global_step_5").mkdir()  # incomplete: never a tracker target
    ckpt.delete_loaded(ckpt.find_resume_dir())
    assert not (tmp_path / "global_step_4").exists()
    assert (tmp_path / TRACKER_FILE).read_text() == "2"
    assert ckpt.find_resume_dir() == tmp_path / "global_step_2"
    ckpt.delete_loaded(tmp_path / "global_step_2")
    assert not (tmp_path / TRACKER_FILE).exists() and ckpt.find_resume_dir() is None


def test_deleting_an_explicit_resume_path_leaves_the_tracker_alone(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    assert not ckpt.del_after_load
    for step in (1, 3):
        ckpt.save_trainer_state(step, {})
    ckpt.delete_loaded(tmp_path / "global_step_1")
    assert (tmp_path / TRACKER_FILE).read_text() == "3"
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_3"]


def test_complete_checkpoints_are_mirrored_and_resumable_from_the_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    ckpt = TrainerCheckpointer(_cfg(tmp_path / "local", default_hdfs_dir=str(mirror), max_actor_ckpt_to_keep=1))
    for step in (1, 2):
        _save_with_roles(ckpt, step)
    assert _layout(tmp_path / "local") == {"global_step_2": ["actor", "critic", "trainer_state.pt"]}
    # the mirror keeps every checkpoint, in the local layout, and its tracker names the newest
    assert _layout(mirror) == {f"global_step_{s}": ["actor", "critic", "trainer_state.pt"] for s in (1, 2)}
    assert (mirror / "global_step_1" / "actor" / "shard").read_text() == "actor"
    assert (mirror / TRACKER_FILE).read_text() == "2"
    resumed = TrainerCheckpointer(
        _cfg(tmp_path / "elsewhere", resume_mode="resume_path", resume_from_path=str(mirror / "global_step_1"))
    )
    assert resumed.load_trainer_state(resumed.find_resume_dir())["global_step"] == 1


def test_mirror_problems_name_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))  # no 'hdfs' command
    with pytest.raises(RuntimeError, match="trainer.default_hdfs_dir='hdfs://nn/ckpt' needs the 'hdfs' command"):
        TrainerCheckpointer(_cfg(tmp_path, default_hdfs_dir="hdfs://nn/ckpt"))
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    ckpt = TrainerCheckpointer(_cfg(tmp_path / "local", default_hdfs_dir=str(blocked / "mirror")))
    with pytest.raises(
        RuntimeError,
        match=r"trainer.default_hdfs_dir=.*a_file/mirror: copying .*global_step_1 "
        r"failed .*the checkpoint in .*local is complete",
    ):
        _save_with_roles(ckpt, 1)
    assert (tmp_path / "local" / TRACKER_FILE).read_text() == "1"  # the local checkpoint is intact


def test_resume_candidates_go_from_the_tracked_checkpoint_back_through_complete_ones(tmp_path):
    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    for step in (1, 2, 4):
        ckpt.save_trainer_state(step, {})
    (tmp_path / "global_step_3").mkdir()  # incomplete: never a candidate
    assert ckpt.resume_candidates() == [tmp_path / f"global_step_{s}" for s in (4, 2, 1)]
    (tmp_path / TRACKER_FILE).write_text("2")
    assert ckpt.resume_candidates() == [tmp_path / "global_step_2", tmp_path / "global_step_1"]
    explicit = TrainerCheckpointer(
        _cfg(tmp_path, resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_4"))
    )
    assert explicit.resume_candidates() == [tmp_path / "global_step_4"]  # no fallback from an explicit choice
    assert TrainerCheckpointer(_cfg(tmp_path, resume_mode="disable")).resume_candidates() == []


def test_an_unreadable_tracker_gives_way_to_the_newest_complete_checkpoint(tmp_path, caplog):
    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    ckpt.save_trainer_state(1, {})
    ckpt.save_trainer_state(2, {})
    (tmp_path / TRACKER_FILE).write_text("\x00\x00garbage")
    with caplog.at_level("WARNING"):
        assert ckpt.find_resume_dir() == tmp_path / "global_step_2"
    assert "not a step number" in caplog.text


def test_a_save_that_fails_on_storage_is_named_and_leaves_the_last_checkpoint(tmp_path):
    import errno

    ckpt = TrainerCheckpointer(_cfg(tmp_path))
    ckpt.save_trainer_state(1, {})
    (tmp_path / "global_step_2" / "actor").mkdir(parents=True)  # the workers' partial files
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "global_step_2" / "actor" / "x.distcp"))
    try:
        raise RuntimeError("save_checkpoint failed on rank 0") from full
    except RuntimeError as wrapped:
        error = ckpt.save_failed(2, wrapped)
    assert error is not None and "No space left on device" in str(error)
    assert "trainer.default_local_dir" in str(error) and "global_step_1" in str(error)
    assert not (tmp_path / "global_step_2").exists() and (tmp_path / "global_step_1").is_dir()
    assert (tmp_path / TRACKER_FILE).read_text() == "1"
    assert ckpt.save_failed(3, ValueError("a bug, not the disk")) is None
    # a worker's error only carries the text of the fault
    assert ckpt.save_failed(3, RuntimeError("OSError: [Errno 30] Read-only file system: '/ckpt'")) is not None
