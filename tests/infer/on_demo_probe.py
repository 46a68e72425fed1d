"""The LLM validity judge, the codebook pipeline and reconciliation on the tiny pipeline's own probe samples.

Not collected on its own (the name is not test_*.py): `tests/e2e/test_demo.py` runs this file in the
infer environment after the shortened demo, with RCEA_DEMO_DATA naming the demo's data folder. Each test
works on a private copy of the demo's probe tables with `process_valid` and `mode` cleared, so the model
pipeline fills them from nothing. The scripted server (tests/infer/scripted_server.py) stands in for the
judge and codebook models: it answers toy problems by the toy world's rules, and each test attaches faults
(malformed answers, HTTP 500s, a timeout, low confidence, a pass disagreement) to real completions it picks.
So the rule judge and labeller (rcea.toy) give the expected outputs: what is tested is that the pipeline
carries the model's answers through faults, retries, arbitration, caching and export without loss.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from infer.codebook import CodebookSettings, Pipeline
from infer.judge import LLMJudge, run_judge
from infer.llm_io import export_labels, load_questions, load_samples, load_texts, traj_id
from rcea.layout import semantic_dir
from rcea import toy
from rcea.config import load_config
from rcea.paths import project_root
from rcea.store import read_parquet, read_table
from tests.infer.scripted_server import ScriptedServer, kill_when_cached, llm_settings as settings


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A copy of the demo's probe tables (labels cleared); RCEA_DATA points at it."""
    src = os.environ.get("RCEA_DEMO_DATA")
    if not src or not (Path(src) / "infer" / "tiny" / "tables" / "samples").is_dir():
        pytest.fail("RCEA_DEMO_DATA must name a data folder the demo filled; tests/e2e/test_demo.py runs this file")
    return _copy(Path(src), tmp_path / "data", monkeypatch)


def _copy(src: Path, root: Path, monkeypatch) -> Path:
    shutil.copytree(src / "infer" / "tiny" / "tables", root / "infer" / "tiny" / "tables")
    monkeypatch.setenv("RCEA_DATA", str(root))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    ids = [traj_id(r) for _, r in load_samples("tiny").iterrows()]
    export_labels("tiny", process_valid=dict.fromkeys(ids), mode=dict.fromkeys(ids), stage="test-clear")
    s = load_samples("tiny")
    assert s.process_valid.isna().all() and s["mode"].isna().all()
    return root


def accepted_texts() -> pd.DataFrame:
    """Accepted trajectories with their question and completion (sorted by trajectory id)."""
    s = load_samples("tiny")
    texts, questions = load_texts("tiny", s), load_questions("tiny")
    acc = s[s.reward.astype(int) == 1].copy()
    acc["traj_id"] = [traj_id(r) for _, r in acc.iterrows()]
    acc["text"] = [texts[t] for t in acc.traj_id]
    acc["problem"] = [questions[str(q)]["problem"] for q in acc.question_id]
    return acc.sort_values("traj_id").reset_index(drop=True)


def pick(texts: list[str], n: int, skip: int = 0, where=lambda t: True) -> set[str]:
    """n distinct texts in sorted order (after skipping `skip` of them) that satisfy `where`."""
    chosen = [t for t in sorted(set(texts)) if where(t)][skip: skip + n]
    assert len(chosen) == n, "the demo left too few distinct accepted completions for this test"
    return set(chosen)


def judge_faults(acc: pd.DataFrame) -> dict[str, set[str]]:
    texts = list(acc.text)
    return {"GARBLE": pick(texts, 2), "ERR500": pick(texts, 2, skip=2), "SLOWONCE": pick(texts, 1, skip=4)}


def test_judge_on_demo_probe_samples(demo):
    acc = accepted_texts()
    assert len(acc) >= 10, "the demo's probe should have accepted trajectories"
    faults = judge_faults(acc)
    with ScriptedServer(timeout_sleep_s=2.5, faults=faults) as srv:
        out = run_judge("tiny", LLMJudge(settings(srv, timeout_s=1.0)))
        calls = srv.script.requests
        assert srv.script.by_task["validity-judge"] == calls
        v = out.set_index("traj_id")
        assert list(v.index) == list(acc.traj_id)  # every accepted trajectory judged, nothing else
        garbled = acc.text.isin(faults["GARBLE"])
        # malformed answers: no verdict, routed to reconciliation, never guessed
        assert v.loc[acc.traj_id[garbled], "valid"].isna().all()
        assert set(v.loc[acc.traj_id[garbled], "status"]) == {"unparsed"}
        rec = pd.read_csv(semantic_dir("tiny") / "judge" / "reconcile.csv")
        assert sorted(rec.traj_id) == sorted(acc.traj_id[garbled])
        # every other verdict (500s and the timeout retried) is the rule judge's
        rule = [toy.process_valid(p, t) for p, t in zip(acc.problem, acc.text)]
        got = v.loc[acc.traj_id[~garbled], "valid"].astype(bool).tolist()
        assert got == [r for r, g in zip(rule, garbled) if not g]
        assert (v.loc[acc.traj_id[acc.text.isin(faults["ERR500"] | faults["SLOWONCE"])], "status"] == "ok").all()
        # the samples table: process_valid on accepted rows only
        s = load_samples("tiny")
        assert s[s.reward == 0].process_valid.isna().all()
        assert int(s.process_valid.notna().sum()) == int((~garbled).sum())
        # identical requests are asked once: one call per distinct (question, completion) plus retries
        distinct = len(set(zip(acc.problem, acc.text)))
        assert calls == distinct + 2 * len(faults["ERR500"]) + len(faults["SLOWONCE"])
        # a second run makes no call and writes the same verdicts
        j2 = LLMJudge(settings(srv))
        out2 = run_judge("tiny", j2)
        assert srv.script.requests == calls and j2.client.calls == 0
        pd.testing.assert_frame_equal(out, out2)


def _judged(srv) -> pd.DataFrame:
    run_judge("tiny", LLMJudge(settings(srv)))
    return accepted_texts()


def codebook_faults(acc: pd.DataFrame) -> dict[str, set[str]]:
    """Low confidence and an HTTP 500 on valid completions; a pass-2 flip where the question has two modes."""
    valid = acc[[toy.process_valid(p, t) for p, t in zip(acc.problem, acc.text)]]
    modes = valid.groupby("question_id").apply(lambda g: len({toy.mode(p, t) for p, t in zip(g.problem, g.text)}))
    two = set(valid.text[valid.question_id.isin(modes[modes > 1].index)])
    texts = list(valid.text)
    return {"AMBIG": pick(texts, 2), "ERR500": pick(texts, 1, skip=2),
            "FLIP": pick(texts, 1, where=lambda t: t in two)}


def test_codebook_on_demo_probe_samples(demo):
    cfg = load_config("tiny")
    with ScriptedServer() as srv:
        acc = _judged(srv)
    faults = codebook_faults(acc)
    with ScriptedServer(faults=faults) as srv:
        pipe = Pipeline("tiny", settings(srv), CodebookSettings.from_config(cfg))
        table = pipe.run()
        calls = srv.script.requests
        # blinded: no prompt names a method, a scale or a checkpoint
        assert not any(w in p for p in srv.script.seen for w in ("grpo", "kl_cov", "tiny|", "base|", "checkpoint"))
        # the population: accepted and judged process-valid, nothing else
        valid = acc[[toy.process_valid(p, t) for p, t in zip(acc.problem, acc.text)]]
        t = table.set_index("traj_id")
        assert sorted(t.index) == sorted(valid.traj_id)
        # faults were met: low confidence and pass disagreements go to arbitration, which settles them
        for marker, reason in (("AMBIG", "low_confidence"), ("FLIP", "disagree")):
            hit = t.loc[valid.traj_id[valid.text.isin(faults[marker])]]
            assert hit.disputed.all() and hit.reasons.str.contains(reason).all(), hit[["reasons"]]
            assert (hit.source == "arbitration").all()
        # the frozen question-local codebooks partition the trajectories exactly as the rule labeller does
        rule = dict(zip(valid.traj_id, [toy.mode(p, x) for p, x in zip(valid.problem, valid.text)]))
        assert t["mode"].notna().all(), t[t["mode"].isna()]
        for q, grp in t.groupby("question_id"):
            pairs = set(zip(grp["mode"], (rule[i] for i in grp.index)))
            assert len(pairs) == len({m for m, _ in pairs}) == len({r for _, r in pairs}), (q, pairs)
        # the codebooks are reviewable files with versions and history
        for q in set(valid.question_id):
            book = json.loads((semantic_dir("tiny") / "codebooks" / f"{q}.json").read_text())
            assert book["version"] >= 1 and book["history"][0]["action"] == "merge"
            assert sum(book["counts"].values()) == int((t.question_id == q).sum())
        # the samples table gets `mode` for the population only
        s = load_samples("tiny")
        ids = [traj_id(r) for _, r in s.iterrows()]
        labelled = {i for i, m in zip(ids, s["mode"]) if not pd.isna(m)}
        assert labelled == set(valid.traj_id)
        # a second run: no call, the same table
        pipe2 = Pipeline("tiny", settings(srv), CodebookSettings.from_config(cfg))
        table2 = pipe2.run()
        assert srv.script.requests == calls and pipe2.client.calls == 0
        pd.testing.assert_frame_equal(table, table2)


def _outputs(root: Path):
    sem = root / "infer" / "tiny" / "semantic"
    verdicts = read_parquet(sem / "judge" / "verdicts.parquet")
    table = read_parquet(sem / "codebook" / "assignments.parquet")
    books = {p.name: json.loads(p.read_text()) for p in sorted((sem / "codebooks").glob("*.json"))}
    s = read_table(root / "infer" / "tiny" / "tables" / "samples")
    return verdicts, table, books, s.sort_values(["method", "step", "question_id", "sample"]).reset_index(drop=True)


def test_killed_midway_and_rerun_gives_identical_outputs(tmp_path, monkeypatch):
    src = os.environ.get("RCEA_DEMO_DATA")
    if not src:
        pytest.fail("RCEA_DEMO_DATA must name a data folder the demo filled; tests/e2e/test_demo.py runs this file")
    cfg = load_config("tiny")
    ref = _copy(Path(src), tmp_path / "ref", monkeypatch)
    acc = accepted_texts()
    faults = {**judge_faults(acc), **codebook_faults(acc)}
    faults["SLOWONCE"] = set()
    with ScriptedServer(faults=faults) as srv:  # the uninterrupted reference, in process
        run_judge("tiny", LLMJudge(settings(srv)))
        Pipeline("tiny", settings(srv), CodebookSettings.from_config(cfg)).run()
    n_judge = len(list((ref / "llm_cache" / "judge").rglob("*.json")))
    n_codebook = len(list((ref / "llm_cache" / "codebook").rglob("*.json")))
    live = _copy(Path(src), tmp_path / "live", monkeypatch)
    env = {**os.environ, "RCEA_DATA": str(live), "PYTHONPATH": str(project_root())}
    common = ["--scale", "tiny", "--model", "scripted", "--no-progress"]
    with ScriptedServer(delay=0.05, faults=faults, err500_retry_after="0") as srv:   # no 1 s + 2 s CLI backoff
        for stage, n_total in (("judge", n_judge), ("codebook", n_codebook)):
            cmd = [sys.executable, "-m", f"infer.{stage}", "run", *common, "--base-url", srv.base_url,
                   "--concurrency", "1"]
            cache = live / "llm_cache" / stage
            done = kill_when_cached(cmd, env, cache, at=max(2, n_total // 3))
            assert 2 <= done < n_total, f"the {stage} kill must land midway ({done} of {n_total} answers cached)"
            r = subprocess.run(cmd, cwd=project_root(), env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr[-3000:]
            assert len(list(cache.rglob("*.json"))) == n_total  # the rerun asked only what was missing
    for a, b in zip(_outputs(ref), _outputs(live)):
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b)
        else:
            assert a == b
