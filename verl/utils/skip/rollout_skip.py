"""RolloutSkip: serve a step's generation from a dump of an earlier run, dumping it when there is none.

Dumps live under ``<dump_dir>/<experiment>_<project>/GBS<prompts>_N<n>_in<prompt len>_out<response len>/<step>/``
(``gen_batch.dp``: the :class:`~verl.protocol.DataProto` the rollout returned; ``meta.json``: the step). The
batch-shape part keeps runs with different sizes apart, since their dumps cannot replace each other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.utils.skip.base_skip import BaseSkip, SkipAction, register_skip

__all__ = ["RolloutSkip", "read_config_value"]

logger = logging.getLogger(__name__)

GEN_BATCH_FILE = "gen_batch.dp"
META_FILE = "meta.json"


def read_config_value(config: Any, *paths: str, default: Any = None) -> Any:
    """The first of the dotted ``paths`` set in ``config`` (DictConfig, dataclass or dict), else ``default``: the
    flattened (``rollout.n``) and verl (``actor_rollout_ref.rollout.n``) spellings are both accepted."""
    for path in paths:
        node = config
        for part in path.split("."):
            if node is None:
                break
            node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
        if node is not None:
            return node
    return default


@register_skip("rollout")
class RolloutSkip(BaseSkip):
    """Skip of the trainer's ``generate_sequences`` (actions ``cache`` and ``repeat``)."""

    support_actions = (SkipAction.CACHE, SkipAction.REPEAT)

    def __init__(self, local_config: Any, global_config: Any) -> None:
        super().__init__(local_config, global_config)
        cfg = global_config
        self.exp_name = read_config_value(cfg, "trainer.experiment_name", default="default_experiment_name")
        self.project_name = read_config_value(cfg, "trainer.project_name", default="default_project_name")
        self.n = int(read_config_value(cfg, "rollout.n", "actor_rollout_ref.rollout.n", default=0))
        self.gbs = int(read_config_value(cfg, "data.gen_batch_size", "data.train_batch_size", default=0))
        self.prompt_length = read_config_value(cfg, "data.max_prompt_length", default=0)
        self.response_length = read_config_value(cfg, "data.max_response_length", default=0)

    # -- layout --------------------------------------------------------------------------------------------------
    def project_dump_dir(self) -> Path:
        shape = f"GBS{self.gbs}_N{self.n}_in{self.prompt_length}_out{self.response_length}"
        return Path(self.dump_dir).expanduser().resolve() / f"{self.exp_name}_{self.project_name}" / shape

    def step_dump_dir(self, step: int) -> Path:
        return self.project_dump_dir() / str(step)

    def has_dump(self, step: int) -> bool:
        folder = self.step_dump_dir(step)
        return (folder / GEN_BATCH_FILE).is_file() and (folder / META_FILE).is_file()

    def dumped_steps(self) -> list[int]:
        root = self.project_dump_dir()
        if not root.is_dir():
            return []
        steps = [int(p.name) for p in root.iterdir() if p.is_dir() and p.name.lstrip("-").isdigit()]
        return sorted(s for s in steps if self.has_dump(s))

    def source_step(self, step: int) -> int | None:
        """The dumped step that serves ``step``: itself (cache); for repeat the nearest earlier, else the nearest
        later dumped step. None when nothing serves it."""
        if self.has_dump(step):
            return step
        if self.action != SkipAction.REPEAT:
            return None
        steps = self.dumped_steps()
        earlier = [s for s in steps if s < step]
        later = [s for s in steps if s > step]
        return earlier[-1] if earlier else (later[0] if later else None)

    # -- BaseSkip hooks ------------------------------------------------------------------------------------------
    def meet_precondition(self, step: int, func: Callable | None = None, *args: Any, **kwargs: Any) -> bool:
        found = self.source_step(step) is not None
        if not found:
            logger.warning(
                "rollout skip: no dump for step %d under %s; generating and dumping it", step, self.project_dump_dir()
            )
        return found

    def load(self, step: int) -> Any:
        from verl.protocol import DataProto

        source = self.source_step(step)
        if source is None:
            raise FileNotFoundError(
                f"rollout skip ({self.action.value}): no dump serves step {step} under {self.project_dump_dir()}"
            )
        path = self.step_dump_dir(source) / GEN_BATCH_FILE
        logger.warning("rollout skip: step %d served from %s", step, path)
        return DataProto.load_from_disk(path)

    def warp_function(self, step: int, func: Callable | None = None, *args: Any, **kwargs: Any) -> Any:
        return self.load(step)

    def prepare_data(self, step: int, result: Any, *args: Any, **kwargs: Any) -> None:
        """Dump ``result`` for ``step`` (failures are logged: a missing dump must not stop training)."""
        folder = self.step_dump_dir(step)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            result.save_to_disk(folder / GEN_BATCH_FILE)
            (folder / META_FILE).write_text(json.dumps({"global_steps": step}))
        except Exception as exc:  # noqa: BLE001 - dumping is best effort
            logger.warning("rollout skip: could not dump step %d to %s: %s", step, folder, exc)
