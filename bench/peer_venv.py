"""A virtual environment for a peer framework (TRL) that shares this project's torch and transformers.

A comparison is only fair when both sides run the same torch and transformers builds. ``python -m venv
--system-site-packages`` would expose the *base* interpreter's packages, not those of the virtual environment the
project may run in, and a plain ``pip install trl`` there may pull another torch (a CUDA build of a newer release).
So the peer's venv starts empty, a ``.pth`` file puts the project interpreter's site directories behind its own,
and the peer is installed under constraints pinning the shared packages to the project's exact versions; the
versions the peer's interpreter then imports are checked before any run.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

__all__ = ["SHARED_PACKAGES", "ensure_peer_venv", "project_site_dirs"]

SHARED_PACKAGES = ("torch", "transformers", "tokenizers")
PTH_NAME = "_verl_project_site.pth"


def project_site_dirs() -> list[str]:
    """The site directories of the interpreter running this script (a venv's own, else the system's)."""
    paths = sysconfig.get_paths()
    candidates = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    return [d for d in dict.fromkeys(candidates) if Path(d).is_dir()]


def _run(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], capture_output=True, text=True)


def _imported_versions(python: Path, packages: Sequence[str]) -> dict[str, str]:
    code = f"import json, importlib.metadata as m; print(json.dumps({{p: m.version(p) for p in {list(packages)!r}}}))"
    probe = _run(python, "-c", code)
    if probe.returncode != 0:
        raise RuntimeError(f"{python} cannot read the versions of {list(packages)}:\n{probe.stderr[-2000:]}")
    return json.loads(probe.stdout)


def ensure_peer_venv(venv: Path, requirement: str, module: str, shared: Sequence[str] = SHARED_PACKAGES) -> str:
    """Create ``venv`` (if needed) over this interpreter's packages, install ``requirement`` with ``shared`` pinned
    to this interpreter's versions, and return the installed ``module``'s version.

    Raises RuntimeError naming the package when the peer's interpreter would import another version of a shared
    package than the project (for instance a venv made by an older version of this script)."""
    python = venv / "bin" / "python"
    if not python.exists():
        # no pip of its own: this interpreter's pip installs into it (``pip --python``)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(purelib) / PTH_NAME).write_text("\n".join(project_site_dirs()) + "\n")
    wanted = {name: metadata.version(name) for name in shared}
    probe = _run(python, "-c", f"import {module}; print({module}.__version__)")
    if probe.returncode != 0:
        constraints = venv / "constraints.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in wanted.items()))
        pip = [sys.executable, "-m", "pip", "--python", str(python)]
        install = subprocess.run(
            [*pip, "install", "-q", requirement, "-c", str(constraints)], capture_output=True, text=True
        )
        if install.returncode != 0:
            raise RuntimeError(f"pip install {requirement} into {venv} failed:\n{install.stderr[-3000:]}")
        probe = _run(python, "-c", f"import {module}; print({module}.__version__)")
        if probe.returncode != 0:
            raise RuntimeError(f"{module} does not import in {venv}:\n{probe.stderr[-3000:]}")
    got = _imported_versions(python, shared)
    differing = {name: (got.get(name), version) for name, version in wanted.items() if got.get(name) != version}
    if differing:
        detail = ", ".join(f"{name} {peer} (project {ours})" for name, (peer, ours) in differing.items())
        raise RuntimeError(f"{venv} imports other versions than the project: {detail}; delete {venv} and rerun")
    return probe.stdout.strip()
