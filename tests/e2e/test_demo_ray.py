"""`--engine ray` gives the default engine's study, and resumes by rerunning it: from the quick demo's models,
the training runs and every measurement through a local Ray, killed -9 at a seeded random point of the train
stage mid-training and again mid-measurement (under Ray a run's measurements start in the train stage as soon
as the run has finished), each time rerun with the same command; the same report and tables come
out as the demo's uninterrupted study, and no unit leaves a temporary folder behind."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import pytest

from tests.e2e.studies import METHODS

pytest.importorskip("ray", reason="the Ray engine runs from the tools environment (lockfiles/tools.txt)")


def _parts(data: Path) -> dict[str, bytes]:
    tables = data / "infer" / "tiny" / "tables"
    return {str(p.relative_to(tables)): p.read_bytes() for p in sorted(tables.rglob("*.parquet"))}


def test_the_ray_engine_gives_the_default_engines_report_and_tables(demo, studies):
    data, _, _ = demo
    ray_data, study = studies["ray"].result()   # tests/e2e/studies.py: ray_study
    run = study.run
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert [k[0] for k in study.kills] == ["train", "train"], study.kills   # (aimed at, landed in, delay)
    assert study.kills[0][1] == "train", study.kills
    assert not re.search(r"\[train:ray\] \d+ done, ", study.outputs[0])     # killed before training finished
    out = run.stdout
    assert "[ray] connected to a local Ray instance; dashboard:" in out
    # the runs resumed, then reused; their measurements followed each run within the train stage
    assert re.search(rf"\[train:ray\] \d+ unit\(s\) already complete, skipped \(train {len(METHODS)}, infer \d+\)", out)
    assert re.search(r"\[workers:ray\] 0 done, \d+ already complete, 0 failed", out)
    assert "[workers:ray]" in out and "0 failed" in out.split("[workers:ray]")[-1]
    left = [p for p in glob.glob("/tmp/rcea-unit-*") if os.stat(p).st_mtime >= study.started]
    assert not left, f"a killed unit left its temporary folder: {left}"
    parts = _parts(ray_data)
    assert parts and parts == _parts(data)                       # every table part, byte for byte
    report = (ray_data / "results" / "tiny" / "report.md").read_text()
    demo_report = (data / "results" / "tiny" / "report.md").read_text()
    # the same report but for the line naming the input folder
    assert report.replace(str(ray_data), "<data>") == demo_report.replace(str(data), "<data>")
