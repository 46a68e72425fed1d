"""The spine end to end: the shortened demo (every stage, small budgets) on the tiny model, on CPU.

Runs `scripts/run demo --quick` exactly as a user would, in a fresh data directory, then checks what
each role left behind against the schema and against each other, and that a second run reuses it all.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "kl_cov")  # what the session fixture `demo` (conftest.py) trains


TABLES = ("samples", "tokens", "covariance", "greedy", "passk")


@functools.lru_cache(maxsize=None)
def _tables(data: Path) -> dict[str, list[dict]]:
    """Every schema table's complete parts (TABLES), read in one process of the aggregate environment (this
    one has no pyarrow); once per data folder, since the demo's folder does not change after its fixture."""
    code = ("import json, sys, pathlib, pandas as pd\n"
            "from rcea.store import read_parquet  # by path: no abort at exit (tests/aggregate/test_parquet_exit.py)\n"
            "out = {}\n"
            "for name in sys.argv[2:]:\n"
            "    d = pathlib.Path(sys.argv[1]) / name\n"
            "    parts = [p for p in d.glob('*.parquet') if pathlib.Path(str(p) + '.manifest.json').exists()]\n"
            "    df = pd.concat([read_parquet(p) for p in parts]) if parts else pd.DataFrame()\n"
            "    out[name] = json.loads(df.to_json(orient='records'))\n"
            "print(json.dumps(out))\n")
    out = subprocess.run([str(ROOT / ".envs" / "aggregate" / "bin" / "python"), "-c", code,
                          str(data / "infer" / "tiny" / "tables"), *TABLES], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _table(data: Path, name: str) -> list[dict]:
    """A schema table's complete parts (a fresh copy of the rows: a test may not change another's)."""
    rows = copy.deepcopy(_tables(data)[name])
    assert rows, f"no {name} parts"
    return rows


def test_every_stage_ran_and_the_report_says_where_it_is(demo):
    data, out, _ = demo
    for stage in ("prepare", "train grpo, kl_cov (2 methods, 2 at a time)", "workers", "judge", "modes",
                  "audit sample", "aggregate", "results"):
        assert f"] {stage}" in out
    assert f"report: {data}/results/tiny/report.md" in out
    results = data / "results" / "tiny"
    assert (results / "report.md").read_text().strip()
    assert list((results / "figures").glob("*.png")) and list((results / "tables").glob("*.md"))
    copied = data.parent / "results" / "tiny"  # the study's last stage: results/<scale>/ for the user
    assert (copied / "report.md").read_text() == (results / "report.md").read_text()
    assert sorted(p.name for p in (copied / "figures").glob("*.png")) == \
        sorted(p.name for p in (results / "figures").glob("*.png"))
    assert (data / "infer" / "tiny" / "semantic" / "audit" / "audit.sqlite").exists()  # the audit sample


def test_checkpoints_tables_and_labels_hang_together(demo):
    data, _, _ = demo
    for m in METHODS:
        ckpts = sorted((data / "train" / "tiny" / m / "checkpoints").glob("checkpoint-*"))
        assert [c.name for c in ckpts] == ["checkpoint-2", "checkpoint-4"]
        assert (data / "train" / "tiny" / m / "config" / "resolved.json").exists()
    samples = _table(data, "samples")
    assert {(r["method"], r["step"]) for r in samples} >= {("base", 0), *((m, 4) for m in METHODS)}
    for r in samples:
        assert r["logprob_sum"] <= 1e-6 and r["token_entropy_mean"] >= 0 and r["reward"] in (0, 1)
        if r["reward"] == 1:  # the rule-based judge decided every accepted trajectory
            assert r["process_valid"] in (True, False)
        if r["reward"] == 1 and r["process_valid"]:  # modes are assigned to valid successes only
            assert r["mode"] in ("forward", "swap", "left", "pair", "other")
        else:
            assert r["mode"] is None
    tokens = _table(data, "tokens")
    vocab = 300
    import math
    assert all(0 <= t["entropy"] <= math.log(vocab) + 1e-4 and t["logprob"] <= 1e-6 for t in tokens)
    assert _table(data, "covariance") and _table(data, "greedy") and _table(data, "passk")


def test_summary_numbers_come_from_the_tables(demo):
    """Each endpoint's numbers in summary.json equal what the probe samples table says, recounted here:
    questions, samples per question, accuracy (mean of per-question accuracies) and the questions with at
    least min_k_r successes / failures (the strata the reward-conditioned entropies are defined on)."""
    data, _, _ = demo
    summary = json.loads((data / "results" / "tiny" / "summary.json").read_text())
    min_k_r = summary["settings"]["min_k_r"]
    per_question: dict[tuple[str, int], dict[str, list[int]]] = {}
    for r in _table(data, "samples"):
        per_question.setdefault((r["method"], r["step"]), {}).setdefault(r["question_id"], []).append(r["reward"])
    endpoints = {(e["method"], e["step"]): e for e in summary["endpoints"] if e["scale"] == "tiny"}
    assert {m for m, _ in endpoints} >= {"base", *METHODS}
    for key, e in endpoints.items():
        questions = per_question[key]
        rewards = list(questions.values())
        assert e["n_questions"] == len(questions), key
        assert e["samples_per_question"] == pytest.approx(sum(map(len, rewards)) / len(rewards)), key
        assert e["accuracy"] == pytest.approx(sum(sum(r) / len(r) for r in rewards) / len(rewards)), key
        assert e["n_success"] == sum(sum(r) >= min_k_r for r in rewards), key
        assert e["n_failure"] == sum(len(r) - sum(r) >= min_k_r for r in rewards), key
    all_rewards = [x for q in per_question.values() for r in q.values() for x in r]
    assert 0 < sum(all_rewards) < len(all_rewards), "the warm start should be neither hopeless nor solved"


def test_second_run_reuses_everything(demo):
    _, _, second = demo
    # training reused: the local engine skips each complete run (no training process starts)
    assert f"[train:local] 0 done, {len(METHODS)} already complete, 0 failed" in second
    assert "warm start] step" not in second             # the warm start is cached


def test_llm_judge_and_codebook_on_the_demo_probe_samples(demo, tmp_path):
    """Issue 5 on real pipeline output: the LLM judge, codebook pipeline and reconciliation run on the
    demo's own probe samples against the scripted OpenAI-compatible server, in the infer environment."""
    data, _, _ = demo
    env = dict(os.environ, RCEA_DEMO_DATA=str(data), PYTHONPATH=str(ROOT))
    env.pop("RCEA_DATA", None)
    report = tmp_path / "junit.xml"
    r = subprocess.run([str(ROOT / ".envs" / "infer" / "bin" / "python"), "-m", "pytest", "-q",
                        "-p", "no:cacheprovider", f"--junitxml={report}", "tests/infer/on_demo_probe.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    # Every test of that file ran and passed: none skipped (a skip would hide a missing demo output).
    import xml.etree.ElementTree as ET

    cases = list(ET.parse(report).getroot().iter("testcase"))
    outcomes = {c.get("name"): [child.tag for child in c] for c in cases}
    assert sorted(outcomes) == ["test_codebook_on_demo_probe_samples", "test_judge_on_demo_probe_samples",
                                "test_killed_midway_and_rerun_gives_identical_outputs"], outcomes
    bad = {n: t for n, t in outcomes.items() if {"failure", "error", "skipped"} & set(t)}
    assert not bad, bad  # every one passed: a skip would hide a missing demo output


def test_the_terminal_gets_the_signal_not_the_noise(demo):
    """Issue 31: the quick demo printed 481 lines (PEFT warnings, tqdm bars, per-job and enqueue lines, JSON);
    library output goes to the per-unit logs, each stage to a few lines of one progress style."""
    import re

    data, out, _ = demo
    err = (data.parent / "first-run.stderr").read_text()
    lines = (out + err).splitlines()
    said = re.search(r"The quick demo prints at most (\d+) lines", " ".join((ROOT / "README.md").read_text().split()))
    assert said and len(lines) <= int(said.group(1)), "\n".join(lines)   # the README's bound (issue 40)
    assert not {ln for ln in lines if ln.strip() and lines.count(ln) > 1}   # nothing printed twice
    done = [int(n) for n in re.findall(r"^\[workers\] (\d+)(?:/\d+ done| done of \d+ queued so far)", out, re.M)]
    assert len(done) >= 2 and done == sorted(done)   # the workers' done count only grows
    noise = re.compile(r"warn|Loading weights|it/s\]|^\s*[{}\[\]]\s*$|^(added|exists) ", re.I)
    assert [ln for ln in lines if noise.search(ln)] == []
    # The per-job lines: in a log, not here. The worker printing the progress line logs to logs/workers/tiny.log, a
    # worker started on a slot that training freed to the study's background log; which one claims a job varies.
    logs = [data / "logs" / "workers" / "tiny.log", data / "logs" / "study" / "background.log"]
    assert "probe:base-0" in "".join(p.read_text() for p in logs if p.exists())
    assert "probe:base-0" not in out + err
    running = [int(n) for n in re.findall(r"\[train:local\] train \d+/\d+ done, (\d+) running", out)]
    assert max(running) == 2                       # two training runs side by side, counted as two
