"""The release classifier: static surfaces of fake wheels, the three classes, and the file split."""

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

_SPEC = importlib.util.spec_from_file_location("classify_imports", Path(__file__).with_name("classify_imports.py"))
classify_imports = importlib.util.module_from_spec(_SPEC)
sys.modules["classify_imports"] = classify_imports  # dataclasses resolve their module by name
_SPEC.loader.exec_module(classify_imports)


def make_wheel(directory: Path, version: str, files: dict[str, str]) -> Path:
    path = directory / f"verl-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"verl-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: verl\nVersion: {version}\n")
        for name, text in files.items():
            zf.writestr(name, text)
    return path


OLD = {
    "verl/__init__.py": "from .protocol import DataProto\n",
    "verl/protocol.py": "class DataProto: ...\n",
    "verl/utils/__init__.py": "from .tokenizer import *\n__all__ = tokenizer.__all__ + ['extra']\n",
    "verl/utils/tokenizer.py": "__all__ = ['hf_tokenizer']\ndef hf_tokenizer(): ...\ndef hidden_helper(): ...\n",
    "verl/utils/reward_score/math.py": "def compute_score(): ...\n",
    "verl/trainer/ppo/ray_trainer.py": (
        "import numpy as np\n"
        "try:\n    from vllm import LLM\nexcept ImportError:\n    LLM = None\n"
        "if True:\n    _timer, (a, *rest) = 1, (2, 3)\n"
        "def compute_advantage(): ...\n"
    ),
    "verl/third_party/vllm_shim.py": "from vllm.model_executor.layers.linear import *\n",
}
NEW = {
    "verl/__init__.py": "from .protocol import DataProto\n",
    "verl/protocol.py": "class DataProto: ...\n",
    "verl/utils/__init__.py": "",
    "verl/utils/reward_score/math_reward.py": "def compute_score(): ...\n",
    "verl/trainer/ppo/ray_trainer.py": "def compute_advantage(): ...\n",
    "verl/experimental/agent_loop/agent_loop.py": "def register(): ...\n",  # namespace parents
}


@pytest.fixture
def releases(tmp_path):
    make_wheel(tmp_path, "0.2", OLD)
    make_wheel(tmp_path, "0.10.0", NEW)
    wheels = classify_imports.fetch_releases(tmp_path, offline=True)
    assert list(wheels) == [Version("0.2"), Version("0.10.0")]  # ordered by version, not by name
    return [classify_imports.Release.from_wheel(path, version) for version, path in wheels.items()]


def test_static_surface(releases):
    old, new = releases
    assert old.has("verl.trainer.ppo.ray_trainer", "_timer")  # assigned inside an if block, private
    assert old.has("verl.trainer.ppo.ray_trainer", "rest")  # starred tuple target
    assert old.has("verl.trainer.ppo.ray_trainer", "LLM")  # bound in try and except
    assert old.has("verl.trainer.ppo.ray_trainer", "np")
    assert old.has("verl.utils.reward_score", "math")  # a submodule is a name of its package
    assert old.has("verl.utils", "hf_tokenizer")
    assert not old.has("verl.utils", "hidden_helper")  # a star import follows __all__
    assert old.has("verl.third_party.vllm_shim", "ColumnParallelLinear") is None  # third-party star: unknowable
    assert new.has("verl.experimental.agent_loop", "agent_loop")  # namespace package without __init__
    assert new.has("verl.experimental.agent_loop.agent_loop", "*")
    assert not new.has("verl.utils.reward_score", "math")
    assert not new.has("verl.nowhere", None)


def test_classes(releases):
    verdict = classify_imports.classify
    assert verdict("from verl import DataProto", releases).klass == classify_imports.LATEST
    older = verdict("from verl.utils.reward_score.math import compute_score", releases)
    assert (older.klass, older.newest_release) == (classify_imports.OLDER, "0.2")
    namespace = verdict("from verl.experimental.agent_loop.agent_loop import register", releases)
    assert namespace.klass == classify_imports.LATEST
    never = verdict("from verl.trainer.ppo.ray_trainer import compute_advantage, compute_fork_loss", releases)
    assert never.klass == classify_imports.NEVER
    assert never.never_released == ["verl.trainer.ppo.ray_trainer.compute_fork_loss"]
    assert verdict("import verl.utils.tokenizer", releases).klass == classify_imports.OLDER
    # names that exist only in different releases still count: each was released
    split = verdict("from verl.utils.reward_score import math, math_reward", releases)
    assert (split.klass, split.newest_release) == (classify_imports.OLDER, None)


def test_write_splits_both_files(tmp_path, releases):
    sample, fork_only = tmp_path / "sample.txt", tmp_path / "fork.txt"
    sample.write_text("from verl import DataProto\nfrom verl.protocol import fork_name\nfrom verl import DataProto\n")
    fork_only.write_text("# header kept\nfrom verl.utils import hf_tokenizer\nfrom verl.forked import x\n")
    args = ["--releases-dir", str(tmp_path), "--offline", "--sample", str(sample), "--fork-only", str(fork_only)]
    assert classify_imports.main([*args, "--write"]) == 0
    assert sample.read_text() == "from verl import DataProto\nfrom verl.utils import hf_tokenizer\n"
    assert fork_only.read_text() == "# header kept\nfrom verl.forked import x\nfrom verl.protocol import fork_name\n"
