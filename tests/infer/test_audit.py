"""Partition audit end to end without a browser: draw pairs, label through the HTTP API, adjudicate, report."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from rcea.layout import audit_db, semantic_dir
from rcea.store import read_parquet

from infer.audit import store
from infer.audit.__main__ import main as audit_main
from rcea.stats import macro_f1
from infer.audit.sample import draw_pairs
from infer.audit.server import make_server
from infer.codebook import CodebookSettings, Pipeline
from infer.judge import LLMJudge, run_judge
from infer.llm import LLMSettings
from tests.infer.scripted_server import ScriptedServer, write_probe_fixture


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("RCEA_DATA", str(root))
    write_probe_fixture(root)
    with ScriptedServer(timeout_sleep_s=0.2) as srv:   # SLOWONCE: no 3 s wait (no short timeout here)
        s = LLMSettings(model="scripted", base_url=srv.base_url, progress=False, backoff_s=0.01, timeout_s=5.0)
        run_judge("tiny", LLMJudge(s))
        Pipeline("tiny", s, CodebookSettings()).run()
    yield root
    mp.undo()


def serve(db):
    httpd = make_server(db, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def call(url, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_draw_is_seeded_and_question_disjoint(labelled, tmp_path):
    a = read_parquet(semantic_dir("tiny") / "codebook" / "assignments.parquet")
    t1, p1 = draw_pairs(a, 2031, n_questions=2, per_question=5, exclude={"q3"})
    t2, p2 = draw_pairs(a, 2031, n_questions=2, per_question=5, exclude={"q3"})
    assert (t1, p1) == (t2, p2)
    assert {q for q, _, _ in p1} == {"q1", "q2"} and len(p1) == 2 * 10 and len(t1) == 10
    assert all(x.split("|")[3] == q == y.split("|")[3] for q, x, y in p1)  # within-question only
    _, p3 = draw_pairs(a, 2032, n_questions=2, per_question=5, exclude={"q3"})
    assert p3 != p1


def test_label_adjudicate_report(labelled, tmp_path, capsys):
    (tmp_path / "dev.txt").write_text("q3\n")
    assert audit_main(["sample", "--scale", "tiny", "--questions", "5", "--per-question", "6",
                       "--exclude", str(tmp_path / "dev.txt")]) == 0
    assert capsys.readouterr().out == (f"[audit] 30 pairs drawn from 12 trajectories of 2 questions ({audit_db('tiny')}); "
                                       "annotate them with `invoke audit --scale tiny --serve`\n")
    assert audit_main(["report", "--scale", "tiny"]) == 1   # nothing annotated yet: what to do, not NaN metrics
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--serve" in err and "--import" in err and "NaN" not in err
    assert not audit_db("tiny").with_name("report.json").exists()
    with pytest.raises(SystemExit):  # never silently redrawn over labels
        audit_main(["sample", "--scale", "tiny"])
    db = audit_db("tiny")
    with store.connect(db) as con:
        pairs = [dict(r) for r in con.execute("SELECT * FROM pairs ORDER BY position")]
        modes = {r["blind_id"]: r["auto_mode"] for r in con.execute("SELECT * FROM trajectories")}
        texts = " ".join(r["text"] for r in con.execute("SELECT text FROM trajectories"))
    assert "grpo" not in json.dumps(pairs) and "Thus" in texts  # ids are blinded, texts are there
    httpd, url = serve(db)
    try:
        assert call(f"{url}/api/queue?annotator=Z")[0] == 403
        assert call(f"{url}/api/label", {"annotator": "Z", "pair_id": 1, "label": "same"})[0] == 403
        assert call(f"{url}/api/label", {"annotator": "A", "pair_id": 1, "label": "maybe"})[0] == 400
        assert call(f"{url}/api/label", {"annotator": "A", "pair_id": 999, "label": "same"})[0] == 404
        assert call(f"{url}/static/../../sample.py")[0] == 404
        truth = {}
        for p in pairs:  # truth: the automatic partition where it exists, else "different"
            ma, mb = modes[p["a"]], modes[p["b"]]
            truth[p["pair_id"]] = 1 if ma is None or mb is None else int(ma != mb)
        flipped = [p["pair_id"] for p in pairs[:3]]  # B disagrees on the first three pairs
        for pid, lab in truth.items():
            names = ["same", "different"]
            assert call(f"{url}/api/label", {"annotator": "A", "pair_id": pid, "label": names[lab]})[0] == 200
            blab = 1 - lab if pid in flipped else lab
            assert call(f"{url}/api/label", {"annotator": "B", "pair_id": pid, "label": names[blab]})[0] == 200
        q = call(f"{url}/api/queue?annotator=C&adjudicate=1")[1]
        assert q["ids"] == flipped and q["done"] == 0
        for pid in flipped:  # adjudicated to A's label, recorded apart from the raw labels
            assert call(f"{url}/api/adjudicate", {"adjudicator": "C", "pair_id": pid,
                                                  "label": ["same", "different"][truth[pid]]})[0] == 200
    finally:
        httpd.shutdown()
    with store.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM labels").fetchone()[0] == 60
        assert con.execute("SELECT COUNT(*) FROM adjudications").fetchone()[0] == 3
    assert audit_main(["report", "--scale", "tiny"]) == 0
    rep = json.loads(db.with_name("report.json").read_text())
    a_lab = [truth[p["pair_id"]] for p in pairs]
    b_lab = [1 - truth[p["pair_id"]] if p["pair_id"] in flipped else truth[p["pair_id"]] for p in pairs]
    assert rep["hh_macro_f1"] == pytest.approx(macro_f1(a_lab, b_lab))
    assert rep["hh_macro_f1"] < 1.0
    assert rep["auto_macro_f1"] == 1.0 and rep["different_precision"] == 1.0 and rep["different_recall"] == 1.0
    n_none = sum(m is None for m in modes.values())
    assert rep["coverage"] == pytest.approx(1 - n_none / 12)
    assert rep["pairs_scored_auto"] == sum(modes[p["a"]] is not None and modes[p["b"]] is not None for p in pairs)
    assert rep["gates"]["2_auto_macro_f1"] and rep["gates"]["5_coverage"] == (n_none == 0)


def test_serve_cli_starts_and_serves_the_page(tmp_path):
    import os
    import subprocess
    import sys

    from rcea.paths import project_root
    env = {**os.environ, "RCEA_DATA": str(tmp_path / "data")}
    proc = subprocess.Popen([sys.executable, "-m", "infer.audit", "serve", "--scale", "tiny", "--port", "0"],
                            cwd=project_root(), env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("audit page: http://127.0.0.1:"), line
        base = line.split()[2].split("/?")[0]
        with urllib.request.urlopen(base + "/", timeout=10) as r:
            assert b"Partition audit" in r.read()
        q = call(base + "/api/queue?annotator=A")[1]
        assert {k: q[k] for k in ("ids", "labels", "done", "total")} == {"ids": [], "labels": {}, "done": 0, "total": 0}
        assert "invoke audit --scale tiny --sample" in q["message"]   # the page says what to do first
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_if_missing_keeps_the_draw_and_import_checks_every_row_first(labelled, tmp_path, capsys):
    db = audit_db("tiny")
    with store.connect(db) as con:
        n_pairs = con.execute("SELECT COUNT(*) FROM pairs").fetchone()[0]
        before = con.execute("SELECT COUNT(*) FROM labels").fetchone()[0]
    assert n_pairs > 0
    capsys.readouterr()
    assert audit_main(["sample", "--scale", "tiny", "--if-missing"]) == 0  # what a study rerun does
    assert capsys.readouterr().out == f"[audit] sample kept: {n_pairs} pairs drawn before ({db})\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("annotator,pair_id,label\nD,1,1\nD,99999,0\n")
    assert audit_main(["import", "--scale", "tiny", str(bad)]) == 2
    assert "line 3" in capsys.readouterr().err
    with store.connect(db) as con:  # the good first row was not written either
        assert con.execute("SELECT COUNT(*) FROM labels").fetchone()[0] == before
    good = tmp_path / "good.csv"
    good.write_text("annotator,pair_id,label,kind\nD,1,1,label\nD,2,0,\nE,1,0,adjudication\n")
    assert audit_main(["import", "--scale", "tiny", str(good)]) == 0
    assert json.loads(capsys.readouterr().out) == {"imported": 3, "adjudications": 1}
    with store.connect(db) as con:
        got = {(r["annotator"], r["pair_id"]): r["label"] for r in con.execute("SELECT * FROM labels")}
        adj = {r["pair_id"]: (r["adjudicator"], r["label"]) for r in con.execute("SELECT * FROM adjudications")}
    assert got[("D", 1)] == 1 and got[("D", 2)] == 0 and adj[1] == ("E", 0)


def test_import_takes_the_page_words_and_refuses_bad_files_in_one_line(labelled, tmp_path, capsys):
    """same/different as the page posts them; a missing file, a wrong header, a header without rows and an
    unknown word each exit 2 with one line, nothing imported."""
    db = audit_db("tiny")
    words = tmp_path / "words.csv"
    words.write_text("annotator,pair_id,label\nF,1,different\nF,2,Same\n")
    capsys.readouterr()
    assert audit_main(["import", "--scale", "tiny", str(words)]) == 0
    with store.connect(db) as con:
        got = {r["pair_id"]: r["label"] for r in con.execute("SELECT * FROM labels WHERE annotator = 'F'")}
    assert got == {1: 1, 2: 0}
    cases = {"missing.csv": None, "header.csv": "who,pair,verdict\nG,1,same\n", "empty.csv": "annotator,pair_id,label\n",
             "word.csv": "annotator,pair_id,label\nG,1,alike\n"}
    needles = {"missing.csv": "cannot read it", "header.csv": "the first line must be annotator,pair_id,label[,kind]",
               "empty.csv": "no annotation rows", "word.csv": "label must be same or different"}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        capsys.readouterr()
        assert audit_main(["import", "--scale", "tiny", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needles[name] in err and err.endswith("nothing was imported"), err
    with store.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM labels WHERE annotator = 'G'").fetchone()[0] == 0
