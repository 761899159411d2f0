"""verl.utils.fs / hdfs_io: local paths pass through; hdfs:// paths are copied once into a cache via `hdfs dfs`."""

from __future__ import annotations

import os
import stat

import pytest

from verl.utils import fs, hdfs_io

# A stand-in for Hadoop's CLI: hdfs://<path> maps to <root>/<path>; supports the sub-commands the helpers use.
FAKE_HDFS = """#!/bin/sh
root="{root}"
map() {{ echo "$1" | sed "s#^hdfs://#$root/#"; }}
shift  # "dfs"
cmd="$1"; shift
case "$cmd" in
  -test) [ -e "$(map "$2")" ] ;;
  -mkdir) mkdir -p "$(map "$2")" ;;
  -get) echo "get $1" >> "$root/calls.log"; cp -r "$(map "$1")" "$2" ;;
  -put) cp -r "$2" "$(map "$3")" ;;
  -cp) cp -r "$(map "$2")" "$(map "$3")" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture
def fake_hdfs(tmp_path, monkeypatch):
    root = tmp_path / "hdfs_root"
    (root / "models" / "m").mkdir(parents=True)
    (root / "models" / "m" / "weights.bin").write_bytes(b"x" * 10)
    (root / "models" / "m" / "sub").mkdir()
    (root / "models" / "m" / "sub" / "config.json").write_text("{}")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "hdfs"
    script.write_text(FAKE_HDFS.format(root=root))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return root


def test_local_paths_and_hub_ids_pass_through(tmp_path):
    assert fs.copy_to_local(str(tmp_path)) == str(tmp_path)
    assert fs.copy_to_local("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert fs.is_non_local("hdfs://a/b") and not fs.is_non_local("/a/b")
    with pytest.raises(ValueError, match="trailing '/'"):
        fs.copy_to_local("hdfs://a/b/")


def test_the_built_in_tiny_model_becomes_its_local_folder():
    from verl.utils.tiny_model import tiny_model_path

    local = fs.copy_to_local("verl:tiny-demo")
    assert local == str(tiny_model_path()) and os.path.isfile(os.path.join(local, "config.json"))


def test_hdfs_without_the_cli_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="'hdfs' command, which is not on PATH"):
        fs.copy_to_local("hdfs://models/m", cache_dir=str(tmp_path / "cache"))


def test_hdfs_folder_is_copied_once_and_recopied_when_incomplete(fake_hdfs, tmp_path):
    cache = tmp_path / "cache"
    local = fs.copy_to_local("hdfs://models/m", cache_dir=str(cache))
    assert local == fs.get_local_temp_path("hdfs://models/m", str(cache))
    assert (cache / fs.md5_encode("hdfs://models/m") / "m" / "sub" / "config.json").exists()
    assert fs.verify_copy(str(fake_hdfs / "models" / "m"), local)
    fs.copy_to_local("hdfs://models/m", cache_dir=str(cache))
    assert (fake_hdfs / "calls.log").read_text().count("get") == 1  # cached
    os.remove(os.path.join(local, "sub", "config.json"))  # a half-finished copy
    fs.copy_to_local("hdfs://models/m", cache_dir=str(cache))
    assert (fake_hdfs / "calls.log").read_text().count("get") == 2
    assert os.path.exists(os.path.join(local, "sub", "config.json"))
    fs.copy_to_local("hdfs://models/m", cache_dir=str(cache), always_recopy=True)
    assert (fake_hdfs / "calls.log").read_text().count("get") == 3


def test_hdfs_io_exists_makedirs_and_copy(fake_hdfs, tmp_path):
    assert hdfs_io.exists("hdfs://models/m") and not hdfs_io.exists("hdfs://models/none")
    hdfs_io.makedirs("hdfs://out/a")
    assert (fake_hdfs / "out" / "a").is_dir()
    src = tmp_path / "f.txt"
    src.write_text("hi")
    assert hdfs_io.copy(str(src), "hdfs://out/a/f.txt") is True
    assert (fake_hdfs / "out" / "a" / "f.txt").read_text() == "hi"
    local_dir = tmp_path / "local_dir"
    hdfs_io.makedirs(str(local_dir))
    with pytest.raises(FileExistsError):
        hdfs_io.makedirs(str(local_dir))
    assert hdfs_io.copy(str(src), str(local_dir / "g.txt")) == str(local_dir / "g.txt")


def test_verify_copy_and_local_mkdir_safe(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / "x").write_text("12")
    b.mkdir()
    (b / "x").write_text("1")
    assert not fs.verify_copy(str(a), str(b))
    (b / "x").write_text("34")
    assert fs.verify_copy(str(a), str(b))
    made = fs.local_mkdir_safe(str(tmp_path / "c" / "d"))
    assert os.path.isdir(made) and os.path.isabs(made)
