"""Shared fixtures: one local Ray cluster per test session, GPU skipping."""

import os
import sys

import pytest
from _ray_session import start_session_ray

TESTS_ROOT = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
    """One torch thread per test process: tests run beside Ray workers on 2 cores, and oversubscribed
    threads made tiny-model steps an order of magnitude slower."""
    import torch

    torch.set_num_threads(int(os.environ.get("VERL_TEST_TORCH_THREADS", "1")))


def pytest_collection_modifyitems(config, items):
    # The multi-node modules are the longest files: run them first, so that with `-n 2` (CI) the other worker
    # process works through the rest meanwhile instead of one module finishing alone at the end.
    items.sort(key=lambda item: 0 if item.get_closest_marker("multinode") else 1)
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def ray_cluster():
    """Start one local Ray cluster shared by every Ray test of the session."""
    import ray

    start_session_ray()
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A real Hugging Face checkpoint folder of the tiny Llama model, built once per session."""
    from verl.utils.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(autouse=True, scope="module")
def _release_leaked_placement_groups():
    """Remove the placement groups a test module left behind (e.g. a run whose runner actor a test killed).

    Ray ties a placement group to the job, not to the actor that created it, so a killed runner's pools would hold
    their CPU slots for the rest of the session and starve later modules. Being autouse, this fixture is set up
    before and torn down after the module's own fixtures, which release their pools first.
    """
    # Ray is looked up, not imported: a module that never imports Ray has no placement group to release, and the
    # GPU tests that need no Ray then also run where Ray is not installed.

    def live() -> set[str]:
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return set()
        return {pg_id for pg_id, info in ray.util.placement_group_table().items() if info["state"] != "REMOVED"}

    before = live()
    yield
    leaked = live() - before
    if not leaked:
        return
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    for pg_id in leaked:
        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
