"""Issue 40 item 4: every command that writes a scale's results refreshes the copy the docs point to
(results/<scale>/, rcea.publish): `invoke aggregate` and `invoke measure-run` end with it, as `invoke study` does.
Run as typed (the tools environment's `invoke`); the aggregation itself on a small synthetic dataset."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def _env(tmp: Path) -> dict:
    env = dict(os.environ, RCEA_DATA=str(tmp / "data"), RCEA_RESULTS=str(tmp / "published"))
    env["RCEA_OVERRIDES"] = "aggregate.bootstrap_resamples=20"
    return env


def _dry(tmp: Path, *argv: str) -> list[str]:
    r = subprocess.run([INVOKE, "--dry", *argv], cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()


def test_aggregate_and_measure_run_end_by_refreshing_the_published_copy(tmp_path):
    publish = (f".envs/aggregate/bin/python -m rcea.publish {tmp_path}/data/results/tiny "
               f"{tmp_path}/published/tiny")
    agg = _dry(tmp_path, "aggregate", "--scale", "tiny")
    assert agg[-2].split()[2:4] == ["aggregate", "--input"] and agg[-1] == publish
    (tmp_path / "run").mkdir()
    measured = _dry(tmp_path, "measure-run", "--path", str(tmp_path / "run"), "--name", "my-grpo")
    assert " -m aggregate " in measured[-2] and measured[-1] == publish
    gpu = _dry(tmp_path, "aggregate", "--scale", "3b")
    assert gpu[-1] == "docker compose run --rm aggregate python -m rcea.publish data/results/3b results/3b"


def test_invoke_aggregate_refreshes_results_of_the_scale(tmp_path):
    """A real `invoke aggregate`: the published report.md is the one the aggregation just wrote."""
    from rcea import layout

    made = subprocess.run([str(ROOT / ".envs" / "aggregate" / "bin" / "python"), "-c",
                           "import sys; from benchmarks import synth; synth.write_dataset(synth.generate(synth.tiny_spec("
                           "seed=3, n_questions=4, k=8, methods=('grpo',))), sys.argv[1])",
                           str(layout.tables_dir("tiny", tmp_path / "data"))], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    old = tmp_path / "published" / "tiny"
    old.mkdir(parents=True)
    (old / "report.md").write_text("an earlier report\n")
    r = subprocess.run([INVOKE, "aggregate", "--scale", "tiny"], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    written = layout.results_dir("tiny", tmp_path / "data") / "report.md"
    assert (old / "report.md").read_text() == written.read_text() != "an earlier report\n"
    assert f"-> {old}" in r.stdout
