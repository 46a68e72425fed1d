"""The Ray engine on a local Ray with eight fake GPUs: placement, grouping, failure classification,
restart, and the real measurement units giving the same Parquet tables as the local engine."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrate.engines import execute
from rcea.state import Store
from orchestrate.engines.ray_exec import task_options
from rcea.paths import project_root
from orchestrate.units import MeasureUnit
from tests.cluster.standin import StandIn, expected

ROOT = project_root()
INFER_PY = ROOT / ".envs" / "infer" / "bin" / "python"


def seen_gpus(root) -> dict[str, str]:
    seen = Path(root) / "seen"
    return {p.name.split(".")[0]: p.read_text() for p in seen.iterdir()} if seen.exists() else {}


def test_task_options_ask_for_a_gpu_and_the_role_slot():
    train = task_options("train", gpus=True, fake_gpus=True, max_retries=4)
    assert (train["num_gpus"], train["num_cpus"], train["resources"], train["max_calls"], train["max_retries"]) \
        == (1, 0, {"train": 1}, 1, 4)
    infer = task_options("infer", gpus=True)
    assert (infer["num_gpus"], infer["num_cpus"], infer["resources"]) == (1, 1, {"infer": 1})
    assert "max_calls" not in infer
    assert task_options("infer", gpus=False)["num_gpus"] == 0


def test_eight_tasks_run_at_once_on_eight_distinct_gpus(ray_local, tmp_path):
    # Each unit waits until all eight have started, so they provably ran side by side.
    units = [StandIn(f"g{i}", seconds=0, barrier=8) for i in range(8)]
    report = execute(units, "ray", data_root=tmp_path, store_path=tmp_path / "state.sqlite", fake_gpus=True)
    assert sorted(report.done) == sorted(u.key for u in units) and not report.failed
    assert sorted(seen_gpus(tmp_path).values(), key=int) == [str(i) for i in range(8)]
    starts = Store(tmp_path / "state.sqlite").events()
    assert sorted(g for e in starts if e["event"] == "start" for g in e["gpus"]) == list(range(8))


def test_one_process_per_group_failures_classified_and_restart_skips(ray_local, tmp_path):
    store = tmp_path / "state.sqlite"
    units = [StandIn("a1", share="a", seconds=0.2), StandIn("a2", share="a", seconds=0.2),
             StandIn("t1", role="train", seconds=0.2),
             StandIn("bad", seconds=0, exit_code=3), StandIn("flaky", seconds=0, exit_code=75)]
    lines = []
    report = execute(units, "ray", data_root=tmp_path, store_path=store, fake_gpus=True, max_retries=1,
                     log=lines.append)
    assert sorted(report.done) == ["standin:a1", "standin:a2", "standin:t1"]
    assert set(report.failed) == {"standin:bad", "standin:flaky"}
    assert "exit 3" in report.failed["standin:bad"] and "error" in report.failed["standin:bad"]
    assert "logs/units/standin_bad.log" in report.failed["standin:bad"]   # where to look
    assert "gave up after retries" in report.failed["standin:flaky"]
    records = Store(store)
    assert records.state("standin:bad")["attempts"] == 1         # a plain error is not retried
    assert records.state("standin:flaky")["attempts"] == 2       # exit 75: retried once (max_retries=1)
    assert any(ln.startswith("[retry] standin:flaky") for ln in lines)
    pids = {p.name.split(".")[1] for p in (tmp_path / "seen").iterdir() if p.name.split(".")[0] in ("a1", "a2")}
    assert len(pids) == 1                                     # a1 and a2 ran in one process
    for name in ("a1", "a2", "t1"):
        assert (tmp_path / "standin" / f"{name}.txt").read_text() == expected(name)
    again = execute(units[:3], "ray", data_root=tmp_path, store_path=store, fake_gpus=True)
    assert again.done == [] and sorted(again.skipped) == ["standin:a1", "standin:a2", "standin:t1"]


def test_a_runs_measurements_start_as_soon_as_that_run_has_finished(ray_local, tmp_path):
    """`follow`: a finished training unit's measurement units are submitted at once, while the other run still
    trains; a run found complete has its measurements run from the start; a shared unit runs once."""
    quick, slow = StandIn("quick", role="train", seconds=0.2), StandIn("slow", role="train", seconds=12)
    plans = {"quick": [StandIn("m-quick", seconds=0.2), StandIn("m-base", seconds=0.2)],
             "slow": [StandIn("m-slow", seconds=0.2), StandIn("m-base", seconds=0.2)],
             "done": [StandIn("m-done", seconds=0.2), StandIn("m-base", seconds=0.2)]}
    finished = StandIn("done", role="train", seconds=0)
    execute([finished], "ray", data_root=tmp_path, store_path=tmp_path / "l0.sqlite", fake_gpus=True)
    events = []
    report = execute([quick, slow, finished], "ray", data_root=tmp_path, store_path=tmp_path / "state.sqlite",
                     fake_gpus=True, follow=lambda u: plans.get(u.name, []), on_event=events.append)
    assert not report.failed and sorted(report.done) == sorted(
        f"standin:{n}" for n in ("quick", "slow", "m-quick", "m-slow", "m-base", "m-done"))
    assert report.skipped == ["standin:done"]
    started = {k: e["t"] for e in events for k in e["keys"]}
    slow_done = (tmp_path / "standin" / "slow.txt").stat().st_mtime
    assert started["standin:m-quick"] < slow_done - 5   # measured while the slow run still trained
    assert started["standin:m-done"] < slow_done - 5
    assert started["standin:m-slow"] >= slow_done - 0.5
    assert len([p for p in (tmp_path / "seen").iterdir() if p.name.startswith("m-base.")]) == 1


def _infer(args, data_root, **kw):
    env = dict(os.environ, RCEA_DATA=str(data_root), OMP_NUM_THREADS="1")
    return subprocess.run([str(INFER_PY), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True, **kw)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A data folder with the tiny model and a fake two-checkpoint grpo run (LoRA adapters: tests/infer/conftest.py,
    in the infer environment), and the jobs `python -m infer plan` lists for it."""
    if not INFER_PY.exists() or not (ROOT / ".envs" / "train" / "bin" / "python").exists():
        pytest.skip("needs the train and infer environments (scripts/bootstrap)")
    root = tmp_path_factory.mktemp("tiny-run")
    # The tiny model is built by the training environment, as `rcea.prepare` builds it in the study (the
    # newer Transformers of the infer environment saves a tokenizer the training one cannot read).
    subprocess.run([str(ROOT / ".envs" / "train" / "bin" / "python"), "-c",
                    "import json, sys; from rcea.config import load_config; from rcea.tiny import model_path; "
                    "from tests.infer.tiny_run import tiny_overrides; model_path(load_config('tiny', None, "
                    "tiny_overrides()))"], cwd=ROOT, env=dict(os.environ, RCEA_DATA=str(root), OMP_NUM_THREADS="1"),
                   check=True, capture_output=True, timeout=300)
    _infer(["-c", "import sys; from pathlib import Path; from tests.infer.conftest import _build; "
                  "_build(Path(sys.argv[1]))", str(root)], root, timeout=300)
    # `python -m infer plan` needs only the standard library: the driver's environment plans in-process.
    from infer.__main__ import main as infer_main
    from tests.infer.tiny_run import tiny_overrides

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setenv("RCEA_DATA", str(root))
        assert infer_main(["plan", "--scale", "tiny", "--method", "grpo", "--what", "all",
                           *[a for o in tiny_overrides() for a in ("--override", o)]]) == 0
    return root, [json.loads(line) for line in out.getvalue().splitlines()]


def test_real_measurement_units_give_the_local_engines_tables(ray_local, tiny_run, tmp_path):
    template, jobs = tiny_run
    assert {"greedy:base-0", "greedy:grpo-2", "greedy:grpo-4", "passk:grpo-4"} <= {j["key"] for j in jobs}
    # Two jobs of the final checkpoint: one group, so one process per engine loads the model once.
    units = [MeasureUnit.from_job(j) for j in jobs if j["key"] in ("greedy:grpo-4", "passk:grpo-4")]
    assert len({u.group for u in units}) == 1
    roots = {}
    for engine in ("ray", "local"):
        root = roots[engine] = tmp_path / engine
        shutil.copytree(template, root)
        opts = {"fake_gpus": True} if engine == "ray" else {}
        report = execute(units, engine, data_root=root, store_path=tmp_path / f"{engine}.sqlite", **opts)
        assert not report.failed and sorted(report.done) == sorted(u.key for u in units)
        assert all(u.done(root) for u in units)
    parts = sorted(p.relative_to(roots["ray"]) for p in roots["ray"].rglob("*.parquet"))
    assert [p.name for p in parts] == ["greedy-grpo-4.parquet", "passk-grpo-4.parquet"]
    for rel in parts:   # same rows, same types, same bytes
        assert (roots["ray"] / rel).read_bytes() == (roots["local"] / rel).read_bytes(), rel
    rows = _infer(["-c", "import sys, pandas as pd; print(len(pd.read_parquet(sys.argv[1])))",
                   str(roots["ray"] / parts[0])], roots["ray"]).stdout
    assert int(rows) == 3   # eval.questions_per_benchmark=3 on the one toy benchmark
    log = (roots["ray"] / "logs" / "units").iterdir()
    assert [f.read_text().count("[run-job]") >= 2 for f in log] == [True]   # both jobs in one process


def test_a_real_training_unit_runs_as_a_ray_task_and_is_then_complete(ray_local, tiny_run, tmp_path):
    from orchestrate.units import TrainUnit
    from tests.infer.tiny_run import tiny_overrides

    root = tmp_path / "data"
    shutil.copytree(tiny_run[0] / "models", root / "models")   # the tiny model, built once for the module
    unit = TrainUnit("kl_cov", "tiny", overrides=(*tiny_overrides(), "train.max_steps=1", "train.save_steps=1",
                                                  "train.per_device_batch=8"))
    report = execute([unit], "ray", data_root=root, store_path=tmp_path / "state.sqlite", fake_gpus=True)
    assert report.done == [unit.key] and not report.failed and unit.done(root)
    summary = json.loads((unit.output(root) / "summary.json").read_text())
    assert summary["method"] == "kl_cov" and summary["global_step"] == 1
    assert Path(summary["final_adapter"]).name == "checkpoint-1"
    again = execute([unit], "ray", data_root=root, store_path=tmp_path / "state.sqlite", fake_gpus=True)
    assert again.skipped == [unit.key] and again.done == []
