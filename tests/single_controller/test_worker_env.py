"""Worker environment handling, mesh registration and the first-error recorder (no Ray)."""

import logging

import pytest

from verl.single_controller.base import Worker, failure_log


@pytest.fixture
def dist_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_worker_reads_the_torch_distributed_env(dist_env):
    dist_env.setenv("RANK", "2")
    dist_env.setenv("WORLD_SIZE", "4")
    dist_env.setenv("LOCAL_RANK", "0")
    dist_env.setenv("LOCAL_WORLD_SIZE", "2")
    dist_env.setenv("MASTER_ADDR", "10.0.0.1")
    dist_env.setenv("MASTER_PORT", "29500")
    w = Worker()
    assert (w.rank, w.world_size, w.local_rank, w.local_world_size) == (2, 4, 0, 2)
    assert w.get_master_addr_port() == ("10.0.0.1", "29500")


def test_worker_defaults_to_a_single_process(dist_env):
    w = Worker()
    assert (w.rank, w.world_size, w.local_rank) == (0, 1, 0)
    assert w.get_master_addr_port() == (None, None)


def test_subclass_without_super_init_still_knows_its_rank(dist_env):
    class Lazy(Worker):
        def __init__(self):
            self.x = 1

    dist_env.setenv("RANK", "1")
    dist_env.setenv("WORLD_SIZE", "2")
    assert Lazy().rank == 1


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "one"}, "RANK must be an integer, got 'one'"),
        ({"RANK": "3", "WORLD_SIZE": "2"}, r"RANK=3 is outside \[0, WORLD_SIZE=2\)"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be >= 1"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT must be a port number"),
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK=2 is outside"),
    ],
)
def test_bad_env_values_name_the_variable(dist_env, env, message):
    for key, value in env.items():
        dist_env.setenv(key, value)
    with pytest.raises(ValueError, match=message):
        Worker()


def test_mesh_registration_and_errors(dist_env):
    w = Worker()
    w._register_dispatch_collect_info("train", dp_rank=0, is_collect=True)
    assert w._query_mesh_info("train") == (0, True)
    assert w._query_dispatch_info("train") == 0 and w._query_collect_info("train") is True
    with pytest.raises(ValueError, match="'train' is already registered"):
        w._register_dispatch_collect_info("train", dp_rank=0, is_collect=True)
    with pytest.raises(ValueError, match="dp_rank must be a non-negative int"):
        w._register_dispatch_collect_info("other", dp_rank=-1, is_collect=True)
    with pytest.raises(KeyError, match="mesh 'infer' is not registered on rank 0"):
        w._query_mesh_info("infer")


@pytest.fixture
def sink():
    received = []
    failure_log.set_failure_sink(received.append)
    yield received
    failure_log.set_failure_sink(None)


def test_only_the_first_error_is_recorded(sink):
    try:
        raise RuntimeError("first problem")
    except RuntimeError:
        assert failure_log.record_current_exception()
    assert not failure_log.record_failure_text("second problem")
    assert len(sink) == 1 and "RuntimeError: first problem" in sink[0]
    assert "test_only_the_first_error_is_recorded" in sink[0]  # the traceback travels with it


def test_error_logs_are_recorded_by_the_process_hooks(sink):
    failure_log.install_process_hooks()
    logging.getLogger("verl.test").warning("not an error")
    assert sink == []
    logging.getLogger("verl.test").error("disk full while saving checkpoint")
    assert sink == ["ERROR verl.test: disk full while saving checkpoint"]


def test_a_failing_sink_never_raises():
    def broken(text):
        raise OSError("gcs unreachable")

    failure_log.set_failure_sink(broken)
    try:
        assert failure_log.record_failure_text("x") is False
    finally:
        failure_log.set_failure_sink(None)
