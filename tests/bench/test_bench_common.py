"""bench/common.py: result files carry machine facts and raw timings; tables and helpers refuse bad input."""

import json

import pytest

from bench import __main__ as bench_main
from bench.common import machine_info, markdown_table, median, ratio, time_calls, write_results


def test_write_results_records_machine_seed_and_payload(tmp_path):
    json_path, md_path = write_results("demo", {"raw": [0.1, 0.2]}, "| a |\n|---|\n| 1 |", seed=7, out_dir=tmp_path)
    record = json.loads(json_path.read_text())
    assert record["benchmark"] == "demo"
    assert record["seed"] == 7
    assert record["raw"] == [0.1, 0.2]
    assert record["machine"]["cpu_count"] >= 1
    assert "torch" in record["machine"]["versions"]
    assert md_path.read_text() == "| a |\n|---|\n| 1 |\n"


def test_write_results_rejects_a_path_as_name(tmp_path):
    with pytest.raises(ValueError, match="plain file stem"):
        write_results("../escape", {}, "", seed=None, out_dir=tmp_path)


def test_machine_info_names_library_versions():
    info = machine_info(libraries=("torch", "surely_not_an_installed_module_xyz"))
    assert info["versions"]["torch"]
    assert info["versions"]["surely_not_an_installed_module_xyz"] is None


def test_markdown_table_formats_cells_and_checks_widths():
    table = markdown_table(["stage", "s", "ratio"], [["gen", 0.123456, None], ["tiny", 0.0001234, 2]])
    lines = table.splitlines()
    assert lines[0] == "| stage | s | ratio |"
    assert lines[2] == "| gen | 0.123 | - |"
    assert lines[3] == "| tiny | 1.23e-04 | 2 |"
    with pytest.raises(ValueError, match="row 0 has 2 cells, headers have 3"):
        markdown_table(["a", "b", "c"], [["x", "y"]])


def test_median_ratio_and_time_calls():
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError, match="empty"):
        median([])
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None
    calls = []
    seconds = time_calls(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(seconds) == 3 and len(calls) == 5 and all(s >= 0 for s in seconds)
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        time_calls(lambda: None, repeats=0)


def test_runner_rejects_unknown_benchmark_names(capsys):
    with pytest.raises(SystemExit):
        bench_main.main(["--only", "no_such_bench"])
    assert "unknown benchmark(s) ['no_such_bench']" in capsys.readouterr().err


def test_runner_reports_missing_scripts_without_failing(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_main, "BENCH_DIR", tmp_path)
    monkeypatch.setitem(bench_main.CPU_SET, "framework_overhead", ([], 5))
    assert bench_main.main(["--only", "framework_overhead", "--quiet"]) == 0
