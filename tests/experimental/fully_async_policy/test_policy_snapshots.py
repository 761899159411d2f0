"""Which actor versions the fully-async trainer keeps on CPU for old log-probs, and when it keeps none."""

from __future__ import annotations

import pytest

from verl.experimental.fully_async_policy.policy_snapshots import PolicySnapshots


class RecordingWorkerGroup:
    """The three snapshot calls of verl's actor worker group, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def save_model_to_cpu(self, version: int) -> None:
        self.calls.append(("save", version))

    def restore_model_from_cpu(self, version: int) -> None:
        self.calls.append(("restore", version))

    def clear_cpu_model(self, version: int) -> None:
        self.calls.append(("clear", version))


def test_off_policy_runs_keep_the_versions_a_sample_can_still_carry():
    group = RecordingWorkerGroup()
    snapshots = PolicySnapshots(group, trigger_parameter_sync_step=1, staleness_threshold=1.0)
    for version in range(5):
        snapshots.pushed(version)
    # staleness 1: a sample is consumed at most 2 syncs after its version was pushed, so 3 versions stay
    assert snapshots.saved == [2, 3, 4]
    assert group.calls == [
        ("save", 0),
        ("save", 1),
        ("save", 2),
        ("save", 3),
        ("clear", 0),
        ("save", 4),
        ("clear", 1),
    ]


@pytest.mark.parametrize(
    "trigger, staleness, old_log_prob_pass",
    [
        (1, 0.0, True),  # on-policy: every row is of the version the actor holds
        (3, 0.0, False),  # bypass mode: the rollout's log-probs are the old ones, no pass runs
        (1, 2.0, False),
    ],
)
def test_no_copy_without_an_old_log_prob_pass_or_off_policy_rows(trigger, staleness, old_log_prob_pass):
    group = RecordingWorkerGroup()
    snapshots = PolicySnapshots(group, trigger, staleness, old_log_prob_pass=old_log_prob_pass)
    for version in range(4):
        snapshots.pushed(version)
    assert not snapshots.enabled
    assert snapshots.saved == []
    assert group.calls == []
