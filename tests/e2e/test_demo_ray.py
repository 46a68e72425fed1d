"""`--engine ray` gives the default engine's study: the quick demo's training runs reused, every
measurement, label and result redone through a local Ray, and the same report and tables come out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "kl_cov")  # what the session fixture `demo` (conftest.py) trains

pytest.importorskip("ray", reason="the Ray engine runs from the tools environment (lockfiles/tools.txt)")


def _parts(data: Path) -> dict[str, bytes]:
    tables = data / "infer" / "tiny" / "tables"
    return {str(p.relative_to(tables)): p.read_bytes() for p in sorted(tables.rglob("*.parquet"))}


def test_the_ray_engine_gives_the_default_engines_report_and_tables(demo, tmp_path):
    data, _, _ = demo
    ray_data = tmp_path / "data"
    # The demo's model, training pool and training runs; its measurements, labels and results are not copied.
    shutil.copytree(data, ray_data, ignore=lambda d, names: [n for n in names if Path(d) == data and
                                                               n in ("infer", "results", "logs")])
    # RAY_ADDRESS=local: a Ray of its own, as with nothing running. Without it, Ray joins the cluster named in
    # /tmp/ray/ray_current_cluster, which tests/cluster's three-node cluster writes while it runs (scripts/test
    # runs that area beside this one).
    env = dict(os.environ, RCEA_DATA=str(ray_data), RCEA_RESULTS=str(tmp_path / "results"),
               RCEA_LEDGER=str(tmp_path / "ledger.sqlite"), RAY_ADDRESS="local")
    env.pop("RCEA_OVERRIDES", None)
    run = subprocess.run([str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS),
                          "--engine", "ray"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
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
