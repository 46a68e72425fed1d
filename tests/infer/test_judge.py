"""Validity judge: calibration metrics against the worked example of docs/estimators.md#judge-calibration, and an
end-to-end run."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from infer.judge import LLMJudge, Judge, calibrate, calibration_metrics, main, run_judge
from infer.llm import LLMSettings
from infer.llm_io import load_samples
from rcea.layout import semantic_dir
from rcea.paths import project_root
from tests.infer.scripted_server import ScriptedServer, write_probe_fixture


def calibration_worked_example_labels():
    # TP = 56, FN = 2, FP = 3, TN = 56 (117 items); correct items first and last
    y = [True] * 56 + [True] * 2 + [False] * 3 + [False] * 56
    p = [True] * 56 + [False] * 2 + [True] * 3 + [False] * 56
    return y, p


def test_calibration_worked_example():
    y, p = calibration_worked_example_labels()
    m = calibration_metrics(y, p)
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (56, 2, 3, 56)
    assert m["coverage"] == 1.0
    assert m["accuracy"] == pytest.approx(0.957264957, abs=1e-9)
    assert m["macro_f1"] == pytest.approx(0.957264957, abs=1e-9)
    assert m["accepted_valid_precision"] == pytest.approx(0.949152542, abs=1e-9)
    assert m["valid_recall"] == pytest.approx(0.965517241, abs=1e-9)
    p2 = [None] + p[1:-1] + [None]  # first and last abstain
    m2 = calibration_metrics(y, p2)
    assert m2["coverage"] == pytest.approx(0.982905983, abs=1e-9)
    assert m2["accuracy"] == pytest.approx(0.956521739, abs=1e-9)


def test_calibrate_cli_on_recorded_verdicts(tmp_path, capsys):
    y, p = calibration_worked_example_labels()
    f = tmp_path / "labels.csv"
    pd.DataFrame({"label": ["valid" if v else "invalid" for v in y],
                  "pred": ["" if i == 0 else int(v) for i, v in enumerate(p)]}).to_csv(f, index=False)
    assert main(["calibrate", "--labels", str(f), "--out", str(tmp_path / "m.json")]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["covered"] == 116 and m["tp"] == 55
    assert m["accepted_valid_precision"] == pytest.approx(55 / 58, abs=1e-12)


def test_calibrate_against_the_endpoint(tmp_path):
    df = pd.DataFrame({"question": ["q"] * 4, "reference": ["1"] * 4,
                       "completion": ["ok", "FATAL slip", "GARBLE", "fine"],
                       "label": [1, 0, 0, 0]})
    f = tmp_path / "l.jsonl"
    df.to_json(f, orient="records", lines=True)
    with ScriptedServer() as srv:
        judge = LLMJudge(LLMSettings(model="scripted", base_url=srv.base_url, progress=False, backoff_s=0.01),
                         tmp_path / "cache")
        m = calibrate(f, judge)
    # covered: ok->valid (TP), FATAL->invalid (TN), fine->valid but labelled invalid (FP); GARBLE abstains
    assert (m["tp"], m["tn"], m["fp"], m["fn"], m["covered"]) == (1, 1, 1, 0, 3)
    assert m["macro_f1"] == pytest.approx(0.5 * (2 / 3 + 2 / 3))


@pytest.fixture
def probe(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "data"))
    write_probe_fixture(tmp_path / "data")
    return tmp_path / "data"


def test_run_judge_end_to_end_and_second_run_free(probe, tmp_path):
    with ScriptedServer(timeout_sleep_s=2.5) as srv:
        s = LLMSettings(model="scripted", base_url=srv.base_url, timeout_s=1.0, backoff_s=0.01, progress=False)
        out = run_judge("tiny", LLMJudge(s))
        first = srv.script.requests
        samples = load_samples("tiny")
        acc = samples[samples.reward == 1]
        assert len(out) == len(acc) == 2 * 20
        v = dict(zip(out.traj_id, out.valid))
        assert v["tiny|base|0|q1|4"] is False or v["tiny|base|0|q1|4"] == False  # FATAL
        assert pd.isna(v["tiny|base|0|q1|5"])  # GARBLE: unparsed, never guessed
        assert v["tiny|grpo|50|q1|2"] == True and v["tiny|base|0|q1|3"] == True  # 500s / timeout retried
        assert (out.status == "unparsed").sum() == 2 and (out.valid == False).sum() == 2
        # failures (reward 0) stay unjudged; judged rows fill process_valid
        assert samples[samples.reward == 0].process_valid.isna().all()
        assert int(samples.process_valid.sum()) == 36
        rec = pd.read_csv(semantic_dir("tiny") / "judge" / "reconcile.csv")
        assert sorted(rec.traj_id) == ["tiny|base|0|q1|5", "tiny|grpo|50|q1|5"]
        # second run: zero calls, identical verdicts
        j2 = LLMJudge(s)
        out2 = run_judge("tiny", j2)
        assert srv.script.requests == first and j2.client.calls == 0
        pd.testing.assert_frame_equal(out, out2)
    # a person reconciles one unparsed verdict; the next run applies it
    pd.DataFrame({"traj_id": ["tiny|base|0|q1|5"], "valid": [False]}).to_csv(
        semantic_dir("tiny") / "judge" / "manual.csv", index=False)
    with ScriptedServer() as srv2:  # cache only: the server sees no request
        out3 = run_judge("tiny", LLMJudge(LLMSettings(model="scripted", base_url=srv2.base_url, progress=False)))
        assert srv2.script.requests == 0
    assert out3.set_index("traj_id").loc["tiny|base|0|q1|5", "status"] == "manual"
    assert int(load_samples("tiny").process_valid.isna().sum()) == 4 + 1  # 4 failures + one unparsed


class KeywordJudge:
    """A rule-based plug-in, as the toy world will provide."""
    def judge(self, question, reference, completion):
        return "FATAL" not in completion


def test_rule_based_plugin_fills_process_valid(probe):
    assert isinstance(KeywordJudge(), Judge)
    out = run_judge("tiny", KeywordJudge())
    assert out.valid.notna().all() and (out.valid == False).sum() == 2
    assert int(load_samples("tiny").process_valid.sum()) == 38
    # the inference role's parts keep their names and manifests (its completion markers)
    parts = probe / "infer" / "tiny" / "tables" / "samples"
    assert sorted(p.name for p in parts.glob("*.parquet")) == ["probe-base-0.parquet", "probe-grpo-50.parquet"]
    man = json.loads((parts / "probe-base-0.parquet.manifest.json").read_text())
    assert man["stage"] == "fixture" and man["labels"]["semantic-export"]["process_valid"] is True


def test_cli_run_subprocess(probe):
    # no 1 s + 2 s backoff after the ERR500s (the CLI's client) and no 3 s wait on SLOWONCE (no short timeout here)
    with ScriptedServer(err500_retry_after="0", timeout_sleep_s=0.2) as srv:
        r = subprocess.run([sys.executable, "-m", "infer.judge", "run", "--scale", "tiny", "--base-url", srv.base_url,
                            "--model", "scripted", "--no-progress"], cwd=project_root(), capture_output=True,
                           text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["accepted"] == 40 and summary["invalid"] == 2 and summary["no_verdict"] == 2
