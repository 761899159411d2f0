"""AsyncTrainingConfig (group ``async_training``): knobs of the one-step-off and fully-async recipes."""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig, check

__all__ = ["AsyncTrainingConfig"]


@dataclass
class AsyncTrainingConfig(BaseConfig):
    """Fully-async rollout/training.

    ``staleness_threshold`` bounds how many stale samples may be in flight, as a fraction of the samples one
    parameter-sync period consumes (0 = none: with ``trigger_parameter_sync_step=1`` and no partial rollout the
    run reproduces the synchronous one). ``trigger_parameter_sync_step`` is the number of trainer updates between
    weight pushes; ``require_batches`` the number of mini-batches the trainer waits for per update.
    ``partial_rollout`` lets a sync abort in-flight requests and resume them with the tokens they already have.
    ``use_rollout_log_probs`` trains against the rollout's log-probs as the old policy.
    ``use_trainer_do_validate`` runs validation on the trainer side instead of the rollouter.

    Pipeline levers of the fully-async recipe (ours; upstream has no such keys), each off by default until measured:
    ``keep_requests_through_sync`` swaps weights into the engines between decode steps instead of aborting and
    re-issuing in-flight requests (needs ``partial_rollout``); ``trainer_generates_while_waiting`` gives the
    trainer's own processes a rollout replica that generates while the trainer waits for samples and pauses while
    it trains; ``coalesce_queue_puts`` sends the groups that finish together to the message queue in one call and
    one object-store put (false: one call per group).
    """

    staleness_threshold: float = 0.0
    trigger_parameter_sync_step: int = 1
    require_batches: int = 1
    partial_rollout: bool = True
    use_rollout_log_probs: bool = True
    use_trainer_do_validate: bool = False
    keep_requests_through_sync: bool = False
    trainer_generates_while_waiting: bool = False
    coalesce_queue_puts: bool = True

    def __post_init__(self) -> None:
        check(self.staleness_threshold >= 0, "staleness_threshold", f"must be >= 0, got {self.staleness_threshold}")
        check(
            self.trigger_parameter_sync_step >= 1,
            "trigger_parameter_sync_step",
            f"must be >= 1, got {self.trigger_parameter_sync_step}",
        )
        check(self.require_batches >= 1, "require_batches", f"must be >= 1, got {self.require_batches}")
