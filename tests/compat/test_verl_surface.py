"""The subclass API of verl 0.9.1's trainers, task runners and ``RLHFDataset`` is offered here (verl_surface.py):
at least 90% of their methods and ``self.`` attributes, and every name we leave out is explained in
docs/migrating_from_verl.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_verl_cpu_suite import DEFAULT_CACHE, DEFAULT_VERSION, download_wheel  # noqa: E402
from verl_surface import measure, report, share  # noqa: E402

MIGRATION_GUIDE = HERE.parent.parent / "docs" / "migrating_from_verl.md"
MIN_SHARE = 0.90


@pytest.fixture(scope="module")
def surfaces():
    return measure(download_wheel(DEFAULT_VERSION, DEFAULT_CACHE))


def test_at_least_ninety_percent_of_the_subclass_api_is_present(surfaces):
    print(report(surfaces))
    assert share(surfaces) >= MIN_SHARE, report(surfaces)


def test_every_class_exists_at_verls_module_path(surfaces):
    assert [f"{s.module}.{s.name}: {s.error}" for s in surfaces if s.error] == []


def test_every_missing_name_is_explained_in_the_migration_guide(surfaces):
    guide = MIGRATION_GUIDE.read_text()
    unexplained = [f"{s.name}.{n}" for s in surfaces for n in s.missing if f"`{n}`" not in guide]
    assert unexplained == [], f"missing from {MIGRATION_GUIDE.name} (add each with its reason): {unexplained}"
