"""A death another actor named keeps its message and fields when re-raised as the class a caller's handlers know."""

import pickle

from verl.single_controller.ray.errors import WorkerDiedError, WorkerError, as_error_class, worker_error_in


class QueueDied(WorkerDiedError):
    """A caller's own subclass (the fully-async trainer's ``RolloutDiedError`` is one)."""


def _died() -> WorkerDiedError:
    return WorkerDiedError(
        "message queue rank 0 died during size() on node abc (10.0.0.5, alive), pid 4711: gone",
        role="message queue",
        rank=0,
        method="size",
        first_logged_error="OOM",
        node_id="abc",
        actor_id="ff01",
    )


def test_a_named_death_becomes_the_callers_class_with_everything_it_said():
    converted = as_error_class(_died(), QueueDied)
    assert isinstance(converted, QueueDied)
    assert str(converted) == str(_died())
    assert (converted.role, converted.rank, converted.method) == ("message queue", 0, "size")
    assert (converted.first_logged_error, converted.node_id, converted.actor_id) == ("OOM", "abc", "ff01")
    assert str(pickle.loads(pickle.dumps(converted))) == str(converted)


def test_other_errors_and_the_class_itself_stay_as_they_are():
    already = as_error_class(_died(), QueueDied)
    assert as_error_class(already, QueueDied) is already
    failed = WorkerError("rollouter rank 0 failed in fit(): ValueError", role="rollouter", rank=0, method="fit")
    assert as_error_class(failed, QueueDied) is failed
    assert worker_error_in(failed) is failed and worker_error_in(ValueError("x")) is None
