"""bench/peer_venv.py: the peer framework's venv imports the project's torch and transformers, and refuses to run
when it would import other versions."""

import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from bench.peer_venv import SHARED_PACKAGES, ensure_peer_venv


def _purelib(venv):
    python = venv / "bin" / "python"
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_peer_venv_sees_the_project_packages_and_refuses_other_versions(tmp_path):
    venv = tmp_path / "venv-peer"
    # torch imports through the layered project site directories, so nothing is installed
    assert ensure_peer_venv(venv, "no-such-requirement-is-installed", "torch") == metadata.version("torch")
    python = venv / "bin" / "python"
    versions = subprocess.run(
        [str(python), "-c", "import torch, transformers; print(torch.__version__, transformers.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert versions == [metadata.version("torch"), metadata.version("transformers")]

    # a peer install that brought its own transformers shadows the project's: named, not run
    shadow = Path(_purelib(venv)) / "transformers-0.0.1.dist-info"
    shadow.mkdir(parents=True)
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 0.0.1\n")
    with pytest.raises(RuntimeError, match=r"transformers 0\.0\.1 \(project .*\); delete .*venv-peer"):
        ensure_peer_venv(venv, "no-such-requirement-is-installed", "torch")
    assert "transformers" in SHARED_PACKAGES
