"""How the test session starts Ray: shared by the root conftest (the one-node cluster) and the multi-node modules,
which stop it for their own cluster and start it again when done."""

from __future__ import annotations

import os
import sys

TESTS_ROOT = os.path.dirname(os.path.abspath(__file__))


def test_runtime_env() -> dict:
    """The runtime env of every test cluster: worker processes must import the test modules that define Ray actor
    classes, so they get the test folders pytest put on sys.path, plus the repository root."""
    repo_root = os.path.dirname(TESTS_ROOT)
    paths = [p for p in sys.path if p and os.path.abspath(p).startswith(TESTS_ROOT)] + [repo_root]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join(paths)}}


def start_session_ray() -> None:
    """Start the one-node local cluster the Ray tests share (a multi-node module restarts it when done)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # a new cluster even when another one on this machine is up (a multi-node module's)
            num_cpus=int(os.environ.get("VERL_TEST_RAY_CPUS", "8")),
            include_dashboard=False,
            log_to_driver=True,
            runtime_env=test_runtime_env(),
        )
