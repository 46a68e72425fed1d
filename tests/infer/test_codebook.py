"""Codebook pipeline end to end against the scripted server: induce, merge, assign twice, reconcile,
extend, export; a second run makes no call; a run killed midway resumes to identical outputs."""

import json
import os
import subprocess
import sys

import pandas as pd

from infer.codebook import CodebookSettings, ModeLabeller, Pipeline, run_labeller, summary
from infer.llm import LLMSettings
from infer.judge import LLMJudge, run_judge
from infer.llm_io import load_samples
from rcea.layout import semantic_dir
from rcea.paths import project_root
from rcea.store import read_parquet, read_table
from tests.infer.scripted_server import ScriptedServer, kill_when_cached, llm_settings as llm, write_probe_fixture


def judged(root, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(root))
    write_probe_fixture(root)
    with ScriptedServer(timeout_sleep_s=0.2) as srv:   # SLOWONCE: no 3 s wait (no short timeout here)
        run_judge("tiny", LLMJudge(llm(srv)))


def outputs(root):
    sem = root / "infer" / "tiny" / "semantic"
    table = read_parquet(sem / "codebook" / "assignments.parquet")
    books = {p.name: json.loads(p.read_text()) for p in sorted((sem / "codebooks").glob("*.json"))}
    samples = read_table(root / "infer" / "tiny" / "tables" / "samples")
    return table, books, samples.sort_values(["method", "question_id", "sample"]).reset_index(drop=True)


def test_pipeline_end_to_end(tmp_path, monkeypatch):
    judged(tmp_path / "d", monkeypatch)
    with ScriptedServer() as srv:
        pipe = Pipeline("tiny", llm(srv), CodebookSettings())
        table = pipe.run()
        calls = srv.script.requests
        # blinded: no prompt names a method, scale or checkpoint
        assert not any(w in s for s in srv.script.seen for w in ("grpo", "tiny|", "base|", "step"))
        t = table.set_index("traj_id")
        # 36 process-valid successes: FATAL and GARBLE (no verdict) trajectories are not in the population
        assert len(t) == 36 and "tiny|base|0|q1|4" not in t.index and "tiny|base|0|q1|5" not in t.index
        # q1 codebook: Factoring = M1, Quadratic formula = M2 (merge order of the scripted model)
        assert t.loc["tiny|base|0|q1|0", "mode"] == "M1" and t.loc["tiny|base|0|q1|1", "mode"] == "M2"
        # pass disagreement (FLIP) and low confidence (AMBIG) are arbitrated
        cols = ["pass1_mode", "pass2_mode", "mode", "source"]
        assert t.loc["tiny|base|0|q1|7", cols].tolist() == ["M2", "M1", "M2", "arbitration"]
        assert t.loc["tiny|base|0|q1|6", "reasons"] == "low_confidence" and t.loc["tiny|base|0|q1|6", "mode"] == "M1"
        # the induction chunk's local assignment is kept; a disagreeing one (LOCALX) is arbitrated
        assert t.loc["tiny|base|0|q1|0", "local_mode"] == "M1" and t.loc["tiny|base|0|q1|1", "local_mode"] == "M2"
        assert t.loc["tiny|base|0|q3|2", ["local_mode", "pass1_mode", "reasons", "mode"]].tolist() == [
            "M2", "M1", "local_disagree", "M1"]
        # a malformed pass-1 batch is recorded and its trajectories reconciled, not guessed
        q2 = t[t.question_id == "q2"]
        assert q2.pass1_mode.isna().all() and q2.disputed.all()
        problems = read_parquet(semantic_dir("tiny") / "codebook" / "problems.parquet")
        assert set(problems.stage) == {"assign-pass1"} and set(problems.problem) == {"unparsed"}
        # NEW mode reviewed as an extension: codebook refrozen at version 2 with history
        assert t.loc["tiny|base|0|q2|3", ["mode", "source"]].tolist() == ["M3", "extension"]
        book = json.loads((semantic_dir("tiny") / "codebooks" / "q2.json").read_text())
        assert book["version"] == 2 and [h["action"] for h in book["history"]] == ["merge", "extend"]
        assert [m["added_in_version"] for m in book["modes"]] == [1, 1, 2] and book["modes"][2]["name"] == "Graphing"
        # UNSURE stays uncertain (mode None) after arbitration
        assert pd.isna(t.loc["tiny|base|0|q2|4", "mode"]) and t.loc["tiny|base|0|q2|4", "source"] == "uncertain"
        assert (table["mode"].notna().sum(), table["mode"].isna().sum()) == (34, 2)
        # samples table: mode filled for included trajectories only
        s = load_samples("tiny")
        assert s["mode"].notna().sum() == 34
        assert s.loc[(s.method == "grpo") & (s.question_id == "q3"), "mode"].tolist() == ["M1", "M2", "M1", "M2"]
        # second run: zero calls, identical table
        pipe2 = Pipeline("tiny", llm(srv), CodebookSettings())
        table2 = pipe2.run()
        assert srv.script.requests == calls and pipe2.client.calls == 0
        pd.testing.assert_frame_equal(table, table2)


def test_killed_midway_resumes_identically(tmp_path, monkeypatch):
    ref, live = tmp_path / "ref", tmp_path / "live"
    judged(ref, monkeypatch)
    with ScriptedServer() as srv:
        Pipeline("tiny", llm(srv), CodebookSettings()).run()
    n_requests = len(list((ref / "llm_cache" / "codebook").rglob("*.json")))
    judged(live, monkeypatch)
    cache = live / "llm_cache" / "codebook"
    cmd = [sys.executable, "-m", "infer.codebook", "run", "--scale", "tiny", "--model", "scripted",
           "--concurrency", "1", "--no-progress"]
    env = {**os.environ, "RCEA_DATA": str(live)}
    with ScriptedServer(delay=0.05, err500_retry_after="0") as srv:   # no 1 s + 2 s backoff of the CLI's client
        done_before = kill_when_cached(cmd + ["--base-url", srv.base_url], env, cache, at=8, timeout_s=60)
        assert 8 <= done_before < n_requests, "the kill must land midway"
        assert not (live / "infer" / "tiny" / "semantic" / "codebook" / "assignments.parquet").exists()
        r = subprocess.run(cmd + ["--base-url", srv.base_url], cwd=project_root(), env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        stats = json.loads(r.stdout)
        # the rerun repeats no finished call; `calls` counts HTTP attempts (scripted 500s are retried)
        assert stats["cache_hits"] == done_before and stats["failures"] == 0
        assert len(list(cache.rglob("*.json"))) == n_requests
    a, b = outputs(ref), outputs(live)
    pd.testing.assert_frame_equal(a[0], b[0])
    assert a[1] == b[1]
    pd.testing.assert_frame_equal(a[2], b[2])


class FirstWordLabeller:
    """A rule-based plug-in, as the toy world will provide."""
    def assign(self, question_id, completions):
        return [None if "UNSURE" in c else c.split()[0].lower() for c in completions]


def test_rule_based_labeller_fills_mode(tmp_path, monkeypatch):
    judged(tmp_path / "d", monkeypatch)
    assert isinstance(FirstWordLabeller(), ModeLabeller)
    out = run_labeller("tiny", FirstWordLabeller())
    s = load_samples("tiny")
    assert len(out) == 36 and s["mode"].notna().sum() == 34
    got = s.loc[(s.method == "base") & (s.question_id == "q3"), "mode"].tolist()
    assert got == ["factoring", "quadratic", "factoring", "quadratic"]
    # the assignment table the audit sample draws from, as the LLM pipeline writes it
    table = pd.read_parquet(semantic_dir("tiny") / "codebook" / "assignments.parquet")
    assert len(table) == 36 and table["mode"].notna().sum() == 34 and set(table["source"]) == {"plug-in"}
    assert set(table["traj_id"]) == set(out["traj_id"]) and {"question_id", "disputed"} <= set(table.columns)


def test_no_valid_success_gives_an_empty_codebook_not_a_crash(tmp_path, monkeypatch):
    """A study whose probe has no verified, valid success (an untrained policy) still gets through modes."""
    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "d"))
    write_probe_fixture(tmp_path / "d")  # process_valid all null: nobody judged valid
    s = LLMSettings(model="scripted", base_url="http://127.0.0.1:9/v1", progress=False)
    table = Pipeline("tiny", s, CodebookSettings()).run()
    assert len(table) == 0 and summary(table)["trajectories"] == 0
    written = pd.read_parquet(semantic_dir("tiny") / "codebook" / "assignments.parquet")
    assert len(written) == 0 and {"traj_id", "question_id", "mode"} <= set(written.columns)
