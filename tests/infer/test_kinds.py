"""The measurement kind registry (infer/kinds/) is the one home of a kind: the plan, the job runner, the units'
outputs and the engine's token budget all read it, so a kind added through the registry alone is planned, run
and checked (no fixture model: a stand-in runner writes the rows)."""

from __future__ import annotations

import json

import pytest

from rcea.config import load_config
from rcea.kinds import kind_modules, resolve
from rcea.layout import JOB_KINDS, table_part
from rcea.schema import TABLES
from rcea.store import read_table

from infer import jobs, kinds
from infer.kinds.registry import Kind, register
from infer.plan import plan_jobs
from tests.infer.test_plan import _fake_run   # complete checkpoint folders of a 3b grpo run


def test_every_kind_declares_its_outputs_settings_runner_and_cost(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    cfg = load_config("3b")
    # one list of names: the registry, the modules the orchestration finds (in the setting's order) and the
    # plan's `--what` choices; the setting's "*" stands for every other kind module
    assert tuple(kinds.REGISTRY) == JOB_KINDS == ("greedy", "passk", "probe", "covariance")
    assert cfg["measure.kinds"][-1] == "*" and set(kind_modules()) == set(JOB_KINDS)
    for kind in kinds.REGISTRY.values():
        assert callable(kind.run) and callable(kind.checkpoints) and callable(kind.cost)
        assert set(kind.tables) <= set(TABLES) | {"questions"}      # schema tables (and the probe's questions)
        assert cfg.section(kind.section)                                # its settings section exists
        assert isinstance(cfg[kind.budget], int) and cfg[kind.budget] > 0
    _fake_run(tmp_path, range(50, 4001, 50), 4000)
    planned = plan_jobs(cfg, "3b", "grpo", "all", [])
    assert [j["kind"] for j in planned] == sorted((j["kind"] for j in planned), key=JOB_KINDS.index)
    for j in planned:      # each job names the tables its kind writes; its cost is positive
        assert j["payload"]["tables"] == list(kinds.get(j["kind"]).tables) and j["cost"] > 0
    # the paper's 3b plan: 21 greedy points, pass@k at base and the end, probe at base + 4 milestones
    assert {k: sum(j["kind"] == k for j in planned) for k in JOB_KINDS} == {"greedy": 21, "passk": 2, "probe": 5,
                                                                            "covariance": 4}
    # the engine's context holds the longest budget of any kind (probe here, 3000 > 2048)
    assert kinds.token_budget(load_config("3b", None, ["probe.max_new_tokens=3000"])) == 3000


def test_a_kind_added_through_the_registry_alone_is_planned_run_and_checked(tmp_path, monkeypatch):
    """A stand-in kind `lengths` (one row per checkpoint into the passk table) is registered here and named in
    `measure.kinds` by an override: the plan lists its jobs with its cost, `run_job` runs its runner and writes
    its table part, and the work unit built from the planned line finds that part complete."""
    from orchestrate.units import MeasureUnit

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setattr(kinds.registry, "REGISTRY", dict(kinds.REGISTRY))   # registered for this test only
    monkeypatch.setattr(kinds, "REGISTRY", kinds.registry.REGISTRY)

    def at_base_and_end(p):
        return [(ck, {"note": "x"}) for ck in (kinds.BASE, *p.checkpoints[-1:])]

    def run_lengths(payload, cfg, ctx, progress):
        from infer.tables import frame

        row = {"scale": payload["scale"], "method": payload["method"], "step": payload["step"], "question_id": "q",
               "n": cfg["passk.n"], "c": 1}
        return {"passk": frame("passk", [row])}, {}

    register("lengths", tables=("passk",), section="passk", budget="passk.max_new_tokens",
             checkpoints=at_base_and_end, cost=lambda p, extra: 7.0 * p.cfg["passk.n"])(run_lengths)
    assert isinstance(kinds.get("lengths"), Kind)
    _fake_run(tmp_path, [50, 100], 100)
    overrides = ['measure.kinds=["greedy", "lengths"]']
    cfg = load_config("3b", None, overrides)
    planned = plan_jobs(cfg, "3b", "grpo", "all", overrides)
    mine = [j for j in planned if j["kind"] == "lengths"]
    assert {j["kind"] for j in planned} == {"greedy", "lengths"}                 # only the kinds the setting names
    assert [j["key"] for j in mine] == ["lengths:base-0", "lengths:grpo-100"]
    assert all(j["cost"] == 7.0 * 64 and j["payload"]["note"] == "x" for j in mine)

    class Ctx:
        def describe(self):
            return {"generate": None}

    line = json.loads(json.dumps(mine[1]))           # as `python -m infer plan` prints it
    unit = MeasureUnit.from_job(line)
    assert unit.outputs(tmp_path) == [table_part("3b", "passk", "lengths-grpo-100", tmp_path)]
    assert not unit.done(tmp_path)
    assert jobs.run_job(line["payload"], Ctx(), lambda *a: None) == {"passk": 1}
    assert unit.done(tmp_path)
    assert read_table(tmp_path / "infer" / "3b" / "tables" / "passk")["step"].tolist() == [100]
    assert jobs.run_job(line["payload"], Ctx(), lambda *a: None) == {"skipped": "outputs already complete"}


def test_the_kind_list_is_the_setting_over_the_modules_found():
    """`measure.kinds` orders and chooses the kind modules: named ones in its order, "*" every other by name."""
    found = ("covariance", "greedy", "lengths", "passk", "probe")
    assert resolve(["greedy", "passk", "probe", "covariance", "*"], found) == ("greedy", "passk", "probe",
                                                                                "covariance", "lengths")
    assert resolve(["probe", "*", "greedy"], found) == ("probe", "covariance", "lengths", "passk", "greedy")
    assert resolve(["passk", "greedy"], found) == ("passk", "greedy")          # no "*": only those
    assert resolve(["*"], ()) == () and resolve(["greedy", "*"], ()) == ("greedy",)   # no infer/ shipped


def test_an_unknown_kind_or_a_job_of_other_tables_names_the_fix(tmp_path, monkeypatch):
    from orchestrate.units import MeasureUnit

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    cfg = load_config("3b", None, ['measure.kinds=["greedy", "sing"]'])
    with pytest.raises(ValueError, match="unknown job kind 'sing'; valid: greedy, passk, probe, covariance, all"):
        plan_jobs(cfg, "3b", "base", "all", [])
    job = plan_jobs(load_config("3b"), "3b", "base", "passk", [])[0]
    with pytest.raises(jobs.JobInputError, match="re-enqueue"):
        jobs.run_job({**job["payload"], "tables": ["greedy"]}, None, lambda *a: None)
    with pytest.raises(ValueError, match="naming the tables it writes"):
        MeasureUnit.from_job({**job, "payload": {k: v for k, v in job["payload"].items() if k != "tables"}})


def test_planning_needs_only_the_standard_library(tmp_path):
    """The orchestration's environment (no numpy, pandas or torch) plans in-process (`python -m infer plan`):
    importing the kinds and planning loads none of them; a runner imports them when it runs."""
    import subprocess
    import sys

    from rcea.paths import project_root

    code = ("import sys\nfor m in ('numpy', 'pandas', 'torch', 'pyarrow'): sys.modules[m] = None\n"
            "from rcea.config import load_config\nfrom infer.plan import plan_jobs\n"
            "print(len(plan_jobs(load_config('3b'), '3b', 'base', 'all', [])))")
    out = subprocess.run([sys.executable, "-c", code], cwd=project_root(), capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "RCEA_DATA": str(tmp_path)}, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr[-2000:]
