"""`--engine ray` gives the default engine's study: the quick demo's training runs reused, every
measurement, label and result redone through a local Ray, and the same report and tables come out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.studies import METHODS

pytest.importorskip("ray", reason="the Ray engine runs from the tools environment (lockfiles/tools.txt)")


def _parts(data: Path) -> dict[str, bytes]:
    tables = data / "infer" / "tiny" / "tables"
    return {str(p.relative_to(tables)): p.read_bytes() for p in sorted(tables.rglob("*.parquet"))}


def test_the_ray_engine_gives_the_default_engines_report_and_tables(demo, studies):
    data, _, _ = demo
    ray_data, run = studies["ray"].result()   # tests/e2e/studies.py: ray_study
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    out = run.stdout
    assert "[ray] connected to a local Ray instance; dashboard:" in out
    assert f"[train:ray] {len(METHODS)} unit(s) already complete, skipped" in out   # the runs are reused
    assert "[workers:ray] infer 0/" in out and "0 failed" in out.split("[workers:ray]")[-1]
    parts = _parts(ray_data)
    assert parts and parts == _parts(data)                       # every table part, byte for byte
    report = (ray_data / "results" / "tiny" / "report.md").read_text()
    demo_report = (data / "results" / "tiny" / "report.md").read_text()
    # the same report but for the line naming the input folder
    assert report.replace(str(ray_data), "<data>") == demo_report.replace(str(data), "<data>")
