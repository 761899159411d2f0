"""The import-sample checker: per-line resolution, failure kinds, and isolation from misbehaving modules."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("check_imports", Path(__file__).with_name("check_imports.py"))
check_imports = importlib.util.module_from_spec(_SPEC)
sys.modules["check_imports"] = check_imports  # dataclasses resolve their module by name
_SPEC.loader.exec_module(check_imports)


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Modules that crash, print or need an absent package at import time, visible to the worker processes."""
    pkg = tmp_path / "fakepkg" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "fakepkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "boom.py").write_text("import os\nos._exit(3)\n")
    (pkg / "fine.py").write_text("VALUE = 1\n")
    (pkg / "noisy.py").write_text("print('not a protocol line')\nVALUE = 2\n")
    (pkg / "needs_dep.py").write_text("import no_such_dependency_for_check_imports\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_parse_line_forms():
    t = check_imports.Target
    assert check_imports.parse_line("from a.b import c, d as e") == [t("a.b", "c"), t("a.b", "d")]
    assert check_imports.parse_line("import a.b as ab, c") == [t("a.b"), t("c")]
    with pytest.raises(ValueError, match="relative"):
        check_imports.parse_line("from .x import y")
    with pytest.raises(ValueError, match="single import"):
        check_imports.parse_line("x = 1")


def test_counts_and_failure_kinds():
    report = check_imports.measure(
        [
            "from json import dumps, loads",
            "from json import dumps, no_such_name",
            "import json.no_such_module",
            "from os import path",
        ]
    )
    assert (report["lines_total"], report["lines_resolving"]) == (4, 2)
    assert report["share_resolving"] == 0.5
    by_line = {entry["line"]: entry for entry in report["lines"]}
    assert by_line["from json import dumps, loads"]["resolves"]
    [name_failure] = by_line["from json import dumps, no_such_name"]["failures"]
    assert (name_failure["name"], name_failure["status"]) == ("no_such_name", check_imports.NAME_MISSING)
    [module_failure] = by_line["import json.no_such_module"]["failures"]
    assert module_failure["status"] == check_imports.MODULE_MISSING


def test_crash_print_and_missing_dependency_are_contained(fake_packages):
    report = check_imports.measure(
        [
            "from fakepkg.sub.boom import VALUE",
            "from fakepkg.sub.fine import VALUE",
            "from fakepkg.sub.noisy import VALUE",
            "import fakepkg.sub.needs_dep",
        ]
    )
    status = {entry["line"]: [f["status"] for f in entry["failures"]] for entry in report["lines"]}
    assert status["from fakepkg.sub.boom import VALUE"] == [check_imports.CRASH]
    assert status["from fakepkg.sub.fine import VALUE"] == []  # checked by a restarted worker
    assert status["from fakepkg.sub.noisy import VALUE"] == []  # its print did not corrupt the protocol
    assert status["import fakepkg.sub.needs_dep"] == [check_imports.DEPENDENCY_MISSING]
    [dep] = report["lines"][3]["failures"]
    assert dep["detail"] == "no_such_dependency_for_check_imports"


def test_reference_restricts_missing_list(tmp_path, capsys):
    sample = tmp_path / "sample.txt"
    sample.write_text("# comment\nfrom json import dumps\nfrom json import no_such_name\nimport no_such_top_module\n")
    reference = {
        "verl_version": "ref",
        "lines": [
            {"line": "from json import dumps", "resolves": True, "failures": []},
            {"line": "from json import no_such_name", "resolves": True, "failures": []},
            {"line": "import no_such_top_module", "resolves": False, "failures": []},
        ],
    }
    ref_path = tmp_path / "ref.json"
    ref_path.write_text(json.dumps(reference))
    out_path = tmp_path / "out.json"
    assert check_imports.main([str(sample), "--json", str(out_path), "--reference", str(ref_path)]) == 0
    report = json.loads(out_path.read_text())
    assert (report["lines_total"], report["lines_resolving"]) == (3, 1)
    restricted = check_imports.missing_by_module(report, {"from json import dumps", "from json import no_such_name"})
    assert [(g["module"], g["lines"], [n["name"] for n in g["names"]]) for g in restricted] == [
        ("json", 1, ["no_such_name"])
    ]
    text = capsys.readouterr().out
    assert "of 2 lines resolving with the reference (verl ref), 1 resolve here" in text
