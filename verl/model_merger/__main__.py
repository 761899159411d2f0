"""Entry of ``python -m verl.model_merger {merge,test} --backend fsdp --local_dir ... [--target_dir ...]``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verl.model_merger.base_model_merger import (
    BaseModelMerger,
    ModelMergerConfig,
    generate_config_from_args,
    parse_args,
)

__all__ = ["build_merger", "main"]


def build_merger(config: ModelMergerConfig) -> BaseModelMerger:
    """The merger for ``config.backend``."""
    if config.backend == "fsdp":
        from verl.model_merger.fsdp_model_merger import FSDPModelMerger

        return FSDPModelMerger(config)
    if config.backend == "megatron":
        from verl.model_merger.megatron_model_merger import MegatronModelMerger

        return MegatronModelMerger(config)
    raise NotImplementedError(f"--backend {config.backend!r}: use fsdp")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse, merge (or test), clean up; a bad checkpoint or flag ends with ``error: ...`` and exit code 2."""
    args = parse_args(list(argv) if argv is not None else None)
    try:
        config = generate_config_from_args(args)
        print(f"config: {config}")
        merger = build_merger(config)
        try:
            merger.merge_and_save()
        finally:
            merger.cleanup()
    except (FileNotFoundError, ValueError, NotImplementedError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
