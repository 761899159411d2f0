"""The type checker (mypy, settings in pyproject.toml) sees the config dataclasses precisely: a misspelt attribute
is an error, although ``BaseConfig.__getattr__`` serves a recipe's extra keys at run time."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_misspelt_config_attribute_is_a_type_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad_attr.py"
    good = tmp_path / "good_attr.py"
    head = "from verl.workers.config import ActorConfig\n\n"
    bad.write_text(head + "size = ActorConfig().ppo_mini_batchsize\n")
    good.write_text(head + "size: int = ActorConfig().ppo_mini_batch_size\n")
    # Run from the repository root so that pyproject's [tool.mypy] settings (and its cache) apply.
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(bad), str(good)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith(f"{bad}:3: error:"), lines[0]
    assert '"ActorConfig" has no attribute "ppo_mini_batchsize"' in lines[0], lines[0]
