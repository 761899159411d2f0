"""verl 0.6-0.8's rollout skip: patch a worker group's ``generate_sequences`` to replay dumped generations.

``RolloutSkip(config, rollout_wg).wrap_generate_sequences()`` makes the k-th training call of
``rollout_wg.generate_sequences`` return the dump of call k when an earlier run left one, and otherwise generate
and dump it (validation calls are never replayed). The dump folder is ``rollout.skip_dump_dir`` (verl 0.6/0.7) or
``skip.rollout.dump_dir``; the layout is that of :class:`verl.utils.skip.RolloutSkip`, which does the work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.utils.skip.config import RolloutSkipConfig
from verl.utils.skip.rollout_skip import RolloutSkip as _StepSkip
from verl.utils.skip.rollout_skip import read_config_value

__all__ = ["RolloutSkip", "wrap_generate_sequences"]

logger = logging.getLogger(__name__)

_DEFAULT_DUMP_DIR = "/tmp/rollout_dump"


class RolloutSkip:
    """Replays (or records) the generations of ``rollout_wg`` for the run described by ``config``."""

    def __init__(self, config: Any, rollout_wg: Any) -> None:
        dump_dir = read_config_value(
            config,
            "rollout.skip_dump_dir",
            "actor_rollout_ref.rollout.skip_dump_dir",
            "skip.rollout.dump_dir",
            default=_DEFAULT_DUMP_DIR,
        )
        if str(Path(dump_dir).expanduser().absolute()).startswith("/tmp/ray/session"):
            logger.warning("rollout skip: dump folder %s is inside Ray's session folder, which Ray deletes", dump_dir)
        self._store = _StepSkip(RolloutSkipConfig(enable=True, dump_dir=str(dump_dir), action="cache"), config)
        self._rollout_wg = rollout_wg
        self.gen_step = 0

    @property
    def curr_path_dump(self) -> Path:
        """The folder of the next call's dump."""
        return self._store.step_dump_dir(self.gen_step)

    def try_load(self) -> Any:
        """The dump of the current call, or None when there is none."""
        if not self._store.has_dump(self.gen_step):
            logger.warning("rollout skip: no dump at %s; generating and dumping it", self.curr_path_dump)
            return None
        return self._store.load(self.gen_step)

    def dump(self, outputs: Any) -> None:
        self._store.prepare_data(self.gen_step, outputs)

    def wrap_generate_sequences(self) -> None:
        """Replace ``rollout_wg.generate_sequences`` by the replaying version."""
        self._rollout_wg.generate_sequences = wrap_generate_sequences(self, self._rollout_wg)


def wrap_generate_sequences(rolloutskip: RolloutSkip, rollout_wg: Any) -> Callable[..., Any]:
    """``rollout_wg.generate_sequences`` that replays/records training calls through ``rolloutskip``."""
    generate = rollout_wg.generate_sequences

    def generate_with_skip(batch: Any, **kwargs: Any) -> Any:
        if bool((getattr(batch, "meta_info", None) or {}).get("validate", False)):
            return generate(batch, **kwargs)
        output = rolloutskip.try_load()
        if output is None:
            output = generate(batch, **kwargs)
            rolloutskip.dump(output)
        rolloutskip.gen_step += 1
        return output

    return generate_with_skip
