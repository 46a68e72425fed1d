"""The outputs made from what a study leaves beside its tables: training-entropy trace, failure-window
statistics for every run, judge calibration and audit gates in the report, Tables A1-A3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aggregate.cli import main
from benchmarks import synth
from rcea import layout

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "50", "--pass-k", "4", "--quiet"]


def _steps(clip_cov: bool) -> list[dict]:
    """100 logged steps, a fresh rollout on odd steps (two iterations per rollout, the even step repeats the
    rollout's fields). Inside 45-55% of the epoch: 20% of completions in mixed groups and 3 of 4 updates with an
    empty covariance mask; outside: 80% and none."""
    rows = []
    for step in range(1, 101):
        inside = 45 <= step <= 55
        r = {"step": step, "entropy": 1.0 - step / 200, "reward": 0.5, "fresh_rollout": float(step % 2),
             "frac_nonzero_var": 0.2 if inside else 0.8, "cov_selected_frac": 0.0 if inside else 0.01}
        if clip_cov:
            r["cov_mask_empty"] = 0.75 if inside else 0.0
        rows.append(r)
    return rows


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("data")
    tables = layout.tables_dir("tiny", root)
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12, methods=("grpo", "clip_cov"))),
                        tables)
    (tables / "samples.parquet.manifest.json").write_text(json.dumps(
        {"artifact": "samples.parquet", "device": "cuda:NVIDIA H200", "libraries": {"vllm": "0.23.0", "torch": "2.9"},
         "git_commit": "abc", "lockfile": "infer.txt:sha256:1"}))
    for method in ("grpo", "clip_cov"):
        run = layout.run_dir("tiny", method, root)
        run.mkdir(parents=True)
        (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _steps(method == "clip_cov")))
        (run / "summary.json.manifest.json").write_text(json.dumps(
            {"artifact": "summary.json", "device": "cuda:NVIDIA H100", "libraries": {"trl": "0.29.0"},
             "git_commit": "abc", "lockfile": "train.txt:sha256:2", "method": method}))
    dapo = layout.run_dir("tiny", "dapo", root)  # dynamic sampling: 30% of sampled completions mixed, all trained
    dapo.mkdir(parents=True)
    (dapo / "steps.jsonl").write_text("".join(json.dumps(
        {**r, "frac_nonzero_var": 1.0, "frac_nonzero_var_sampled": 0.3, "dapo/refill_rounds": 2.0}) + "\n"
        for r in _steps(False)))
    # the judge's unique confusion matrix for the paper's held-out split: TP 56, FN 2, FP 3, TN 56
    layout.judge_calibration("tiny", root).parent.mkdir(parents=True, exist_ok=True)
    layout.judge_calibration("tiny", root).write_text(json.dumps(
        {"n": 117, "covered": 117, "coverage": 1.0, "accuracy": 112 / 117, "macro_f1": 0.957264957,
         "accepted_valid_precision": 56 / 59, "valid_recall": 56 / 58, "tp": 56, "fn": 2, "fp": 3, "tn": 56}))
    layout.audit_report("tiny", root).parent.mkdir(parents=True, exist_ok=True)
    layout.audit_report("tiny", root).write_text(json.dumps(
        {"pairs": 29, "trajectories": 9, "hh_macro_f1": 0.854545455, "auto_macro_f1": 0.819444444, "gap": 0.035101,
         "different_precision": 1.0, "different_recall": 0.8, "coverage": 8 / 9,
         "gates": {"1_hh_macro_f1": True, "2_auto_macro_f1": False, "3_gap": True,
                   "4_different_precision_recall": True, "5_coverage": False}, "all_gates_pass": False}))
    out = root / "results"
    assert main(["--input", str(tables), "--output", str(out), *SMALL]) == 0
    return tables, out


def test_failure_window_statistics_for_every_run(study) -> None:
    _, out = study
    fw = json.loads((out / "summary.json").read_text())["failure_window"]
    assert set(fw) == {"tiny/grpo", "tiny/clip_cov", "tiny/dapo"}
    c = fw["tiny/clip_cov"]
    assert c["steps_in_window"] == 11 and c["steps"] == 100
    assert c["nonzero_var_share_window"] == pytest.approx(0.2)
    assert c["nonzero_var_share_run"] == pytest.approx((6 * 0.2 + 44 * 0.8) / 50)  # fresh rollouts only
    assert c["empty_mask_share_window"] == pytest.approx(0.75)
    assert c["empty_mask_share_run"] == pytest.approx(11 * 0.75 / 100)
    assert fw["tiny/grpo"]["empty_mask_share_window"] is None  # no covariance mask in GRPO
    report = (out / "report.md").read_text()
    assert "| tiny/clip_cov | 11 | 20.0% | 72.8% | 20.0% | 72.8% | 75.0% | 8.2% |" in report
    d = fw["tiny/dapo"]  # the paper's share is the sampled one, before the filter; the trained one is 100%
    assert d["filtered"] and d["nonzero_var_share_run"] == pytest.approx(0.3)
    assert d["nonzero_var_trained_share_run"] == pytest.approx(1.0)
    assert "| tiny/dapo | 11 | 30.0% | 30.0% | 100.0% | 100.0% | – | – |" in report


def test_a_filtered_log_without_the_sampled_share_reports_none_rather_than_the_filtered_one() -> None:
    from aggregate.context import failure_window

    rows = [{"step": s, "fresh_rollout": 1.0, "frac_nonzero_var": 1.0, "dapo/refill_rounds": 1.0} for s in (1, 2)]
    w = failure_window(rows, 2, (0.0, 1.0))
    assert w["nonzero_var_share_run"] is None and w["nonzero_var_trained_share_run"] == 1.0


def test_training_entropy_trace_over_the_whole_epoch(study) -> None:
    _, out = study
    tr = json.loads((out / "summary.json").read_text())["training_traces"]["tiny/clip_cov"]
    assert tr["step"] == list(range(1, 101)) and tr["entropy"][-1] == pytest.approx(0.5)
    assert "| tiny/clip_cov | 100 | 0.9950 | 0.5000 (100) | 0.5000 |" in (out / "report.md").read_text()
    assert (out / "figures" / "fig_training_entropy.png").exists()


def test_judge_calibration_and_audit_gates_in_the_report(study) -> None:
    _, out = study
    report = (out / "report.md").read_text()
    assert ("117 labelled items, coverage 100.0%: accuracy 95.7%, macro-F1 95.7%, accepted-valid precision 94.9%, "
            "valid recall 96.6%") in report
    assert "- gate 2_auto_macro_f1: FAIL" in report and "- gate 3_gap: pass" in report
    assert "all gates pass: NO" in report


def test_tables_a1_to_a3(study) -> None:
    _, out = study
    a1 = (out / "tables" / "tableA1.md").read_text()
    # the paper's columns first: GPU from the manifest's device, CPU and memory blank where not recorded
    assert "| Role | GPU | CPU | System memory | Execution pattern |" in a1
    assert "| training | NVIDIA H100 |  |  | 2 training runs | trl 0.29.0 | train.txt:sha256:2 |" in a1
    assert "| inference | NVIDIA H200 |  |  | 1 table part | torch 2.9, vllm 0.23.0 |" in a1
    assert "| aggregation | " in a1
    a2 = (out / "tables" / "tableA2.md").read_text()
    assert "| MATH 500 | 3 | " in a2 and "| AIME'24 | 2 | " in a2  # tiny_spec's greedy question counts
    a3 = (out / "tables" / "tableA3.md").read_text()
    # the paper's layout: one row per artifact, the ordinary reporting point beside it (no run failed here)
    assert "| Main-paper artifact | Ordinary reporting point |" in a3
    # tiny sets no epoch length: its trace ends where the run ends, said so here and among the departures
    assert "| Training-entropy trace | Trace to the last logged step (this scale sets no epoch length" in a3
    assert "not the paper's complete one-epoch trace" in (out / "report.md").read_text()
    assert "| Reward-stratified q99 table | Final endpoint proxy: step " in a3
    assert (out / "tables" / "tableA3.tex").exists()


def test_table_a3_gives_a_failed_run_its_own_column() -> None:
    from aggregate.settings import AggregateSettings
    from aggregate.supplement import tableA3

    runs = [{"scale": "7b", "method": "grpo", "failed": False, "table1_step": 8000, "probe_step": 8000,
             "q99_step": 8000},
            {"scale": "7b", "method": "clip_cov", "failed": True, "onset_step": 4000, "table1_step": 2000,
             "probe_step": 2000, "q99_step": 8000}]
    trans = [{"scale": "7b", "method": m, "excluded": m == "clip_cov"} for m in ("grpo", "clip_cov") for _ in range(4)]
    traces = {f"7b/{m}": {"step": [50, 8000], "steps_per_epoch": 8000} for m in ("grpo", "clip_cov")}
    md = tableA3({"runs": runs, "transitions": trans, "training_traces": traces}, AggregateSettings()).markdown()
    assert "| Main-paper artifact | Ordinary reporting point | Clip-Cov-7B treatment |" in md
    assert "| Training-entropy trace | Complete one-epoch trace | Complete one-epoch trace; failure marked at step 4,000 |" in md
    assert "| Main benchmark table | Final checkpoint: step 8,000 | Step 2,000 pre-collapse milestone |" in md
    assert "| Exact covariance fit | 4 adjacent transitions | 4 excluded (failed run) |" in md
    assert "| Reward-stratified q99 table | Final endpoint proxy: step 8,000 | Step 8,000 retained as failed diagnostic |" in md
    # an extension run's transitions are fitted apart (Table A7): the count is the fit's, the extension's beside it
    ext = [{"scale": "7b", "method": "archer", "excluded": False}] * 2
    md = tableA3({"runs": runs, "transitions": trans, "extension_transitions": ext, "training_traces": traces},
                 AggregateSettings()).markdown()
    assert "| Exact covariance fit | 4 adjacent transitions (and 2 of extension runs, fitted apart) |" in md


def test_a_bare_dataset_folder_says_what_it_lacks(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12)), src)
    assert main(["--input", str(src), "--output", str(out), *SMALL, "--no-figures"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["training_traces"] == {} and s["judge_calibration"] is None
    assert any("not a study's tables folder" in n for n in s["notes"])
    report = (out / "report.md").read_text()
    assert "- not run: no `semantic/judge_calibration.json`" in report
