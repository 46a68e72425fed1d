"""Labelling has one owner (infer.labels), no import cycle in infer/, and the worker / enqueue entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rcea.layout import semantic_dir
from rcea.config import load_config
from rcea.paths import project_root

from infer.labels import choose
from infer.llm_io import load_samples
from infer.plan import plan_jobs
from tests.common.test_import_graph import import_graph
from tests.infer.scripted_server import ScriptedServer, write_probe_fixture

INFER = project_root() / "infer"


def test_labelling_has_one_owner_in_the_import_graph():
    """(The whole project's cycle check: tests/common/test_import_graph.py.)"""
    graph = import_graph(("infer",))
    assert "infer.judge" in graph and "infer.llm" in graph["infer.judge"]  # the walker sees real imports
    assert "infer.rules" not in graph["infer.judge"] and "infer.judge" not in graph["infer.rules"]
    assert {"infer.judge", "infer.codebook", "infer.rules"} <= graph["infer.labels"]


@pytest.mark.parametrize("module,absent", [
    ("infer.judge", ("infer.rules", "infer.codebook", "infer.labels")),
    ("infer.rules", ("infer.judge", "infer.codebook", "infer.labels")),
    ("infer.codebook", ("infer.judge", "infer.rules", "infer.labels")),
])
def test_each_labelling_module_imports_alone_in_a_fresh_interpreter(module, absent):
    code = (f"import sys, {module}; bad = {set(absent)!r} & set(sys.modules); "
            "sys.exit(', '.join(sorted(bad)) if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=project_root(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout


def test_the_labeller_is_chosen_by_configuration():
    assert choose(load_config("tiny")) == "rules"          # the toy world: decidable by rule
    assert choose(load_config("3b")) == "llm"
    assert choose(load_config("tiny", overrides=["judge.labeller=llm"])) == "llm"
    assert choose(load_config("3b", overrides=["judge.labeller=rules"])) == "rules"
    assert choose(load_config("tiny"), "llm") == "llm"
    with pytest.raises(ValueError, match="valid: auto, rules, llm"):
        choose(load_config("tiny", overrides=["judge.labeller=oracle"]))


def test_labels_all_runs_the_llm_judge_then_the_codebook(tmp_path):
    data = tmp_path / "data"
    write_probe_fixture(data)
    env = {**os.environ, "RCEA_DATA": str(data)}
    # no 1 s + 2 s backoff after the ERR500s (the CLI's client) and no 3 s wait on SLOWONCE (no short timeout here)
    with ScriptedServer(err500_retry_after="0", timeout_sleep_s=0.2) as srv:
        r = subprocess.run([sys.executable, "-m", "infer.labels", "all", "--scale", "tiny", "--labeller", "llm",
                            "--base-url", srv.base_url, "--model", "scripted", "--no-progress", "--json"],
                           cwd=project_root(), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["validity"]["labeller"] == "llm" and out["validity"]["accepted"] == 40
    assert out["validity"]["invalid"] == 2 and out["modes"]["labeller"] == "llm"
    os.environ["RCEA_DATA"], old = str(data), os.environ.get("RCEA_DATA")
    try:
        s = load_samples("tiny")
        table = pd.read_parquet(semantic_dir("tiny") / "codebook" / "assignments.parquet")
    finally:
        os.environ.pop("RCEA_DATA") if old is None else os.environ.__setitem__("RCEA_DATA", old)
    assert out["modes"]["trajectories"] == len(table) == int(((s.reward == 1) & s.process_valid.fillna(False)).sum())
    assert s["mode"].notna().sum() == out["modes"]["included"] > 0


def test_an_unserved_model_stops_the_stage_before_and_during_labelling(tmp_path):
    """Preflight (infer.labels): the endpoint's /v1/models does not list the model, so nothing is sent and
    the step exits 1 naming endpoint, model and what it serves. Mid-stage (infer.judge, no preflight): the
    404 of the first request stops it with exit 1; no verdict table claims a result."""
    data = tmp_path / "data"
    write_probe_fixture(data)
    env = {**os.environ, "RCEA_DATA": str(data)}
    with ScriptedServer(served={"Qwen/Qwen3.5-9B"}) as srv:
        common = ["--scale", "tiny", "--base-url", srv.base_url, "--model", "Qwen3.7-Flash", "--no-progress"]
        r = subprocess.run([sys.executable, "-m", "infer.labels", "modes", "--labeller", "llm", *common],
                           cwd=project_root(), env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 1, r.stderr[-2000:]
        assert f"{srv.base_url} does not serve 'Qwen3.7-Flash' (it lists: Qwen/Qwen3.5-9B)" in r.stderr
        assert srv.script.requests == 0
        r = subprocess.run([sys.executable, "-m", "infer.judge", "run", *common],
                           cwd=project_root(), env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 1, r.stderr[-2000:]
        assert f"judge endpoint {srv.base_url} model 'Qwen3.7-Flash': HTTP 404" in r.stderr
        assert 1 <= srv.script.requests <= 16     # the requests in flight (judge.concurrency 8), not all 40
    assert not list(data.rglob("verdicts.parquet"))


def _infer(args, data: Path, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("RCEA_SCALE", "WORKER_RANK")}
    full.update(RCEA_DATA=str(data), **env)
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=project_root(), env=full,
                          capture_output=True, text=True, timeout=120)


def test_a_worker_refuses_a_missing_queue_and_leaves_none_behind(tmp_path):
    r = _infer(["worker", "--scale", "3b", "--until-empty"], tmp_path)
    assert r.returncode == 2 and "no queue at" in r.stderr
    assert "invoke infer" in r.stderr and "invoke study --scale 3b" in r.stderr
    assert not list(tmp_path.rglob("*.sqlite*"))


def test_a_worker_takes_its_scale_from_the_environment_and_refuses_none(tmp_path):
    r = _infer(["worker", "--until-empty"], tmp_path)
    assert r.returncode == 2 and "needs a scale" in r.stderr and "$RCEA_SCALE is ''" in r.stderr
    r = _infer(["worker", "--until-empty"], tmp_path, RCEA_SCALE="7b")  # the scale compose passes
    assert r.returncode == 2 and "data/infer/7b" not in r.stderr and f"{tmp_path}/state/7b.sqlite" in r.stderr


def test_enqueue_base_plans_the_untrained_policy_only(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    jobs = plan_jobs(load_config("3b"), "3b", "base", "all", [])  # no checkpoints needed
    assert sorted(j["key"] for j in jobs) == ["greedy:base-0", "passk:base-0", "probe:base-0"]
    r = _infer(["enqueue", "--scale", "3b", "--method", "base", "--what", "probe"], tmp_path)
    assert r.returncode == 0, r.stderr
    from infer.queue import Queue

    assert [j["key"] for j in Queue(tmp_path / "state" / "3b.sqlite").jobs()] == ["probe:base-0"]
    r = _infer(["status", "--scale", "3b", "--check"], tmp_path)
    assert r.returncode == 3 and "1 job(s) lack complete table parts (probe:base-0" in r.stderr  # the study stops


def test_enqueue_without_checkpoints_leaves_no_empty_queue(tmp_path):
    r = _infer(["enqueue", "--scale", "3b", "--method", "grpo"], tmp_path)
    assert r.returncode != 0 and "train first" in r.stderr
    assert not list(tmp_path.rglob("*.sqlite*"))


def test_status_follow_waits_until_the_queue_drains(tmp_path, capsys):
    """What the `infer-workers` group runs: it returns when nothing is pending or running, 0 when all is done,
    3 (naming each failed job) when some failed; the counts print as they change."""
    from infer.__main__ import follow
    from infer.queue import Queue

    q = Queue(tmp_path / "queue.sqlite")
    for key in ("a", "b", "c"):
        q.enqueue(key, "probe", {}, cost=1.0)
    plan = iter([None, "ok", None, "ok", "boom"])   # one step of "work" per sleep of the follower
    sleeps = []

    def work(_s):
        sleeps.append(_s)
        step = next(plan)
        if step is not None:
            job = q.claim("w")
            q.finish(job.id, "w", None if step == "ok" else step)

    assert follow(q, 30.0, sleep=work) == 3
    out, err = capsys.readouterr()
    assert len(sleeps) == 5 and "queue drained: 2 done, 1 failed" in out and "failed c" in err and "boom" in err
    assert out.count("queue: ") == 4   # the first count, then each change (two sleeps changed nothing)
    r = Queue(tmp_path / "q2.sqlite")
    r.enqueue("x", "probe", {})
    job = r.claim("w")
    r.finish(job.id, "w")
    assert follow(r, 30.0, sleep=lambda s: pytest.fail("nothing left to wait for")) == 0


def test_status_takes_the_scale_compose_passes(tmp_path):
    r = _infer(["status"], tmp_path)
    assert r.returncode == 2 and "$RCEA_SCALE is ''" in r.stderr
    r = _infer(["status", "--follow", "5"], tmp_path, RCEA_SCALE="3b")
    assert r.returncode == 1 and "no queue at" in r.stdout


def test_the_default_output_is_one_line_per_step():
    """The study prints these (issue 31: the JSON summary was 20 lines of the demo's terminal)."""
    from infer.labels import one_line

    assert one_line("validity", {"labeller": "rules", "accepted": 339, "valid": 324, "invalid": 15,
                                 "no_verdict": 0}) == "[judge] 339 accepted: 324 valid, 15 invalid, 0 without a verdict (rules)"
    assert one_line("modes", {"labeller": "llm", "trajectories": 324, "included": 320, "uncertain": 4, "disputed": 0,
                              "by_source": {"plug-in": 320}}) == \
        "[modes] 320 of 324 valid successes assigned a mode (4 uncertain) (llm)"
