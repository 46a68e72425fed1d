"""Issue 32: a run folder with checkpoints but no training log (an outside run imported without steps.jsonl) is
named in the report's missing inputs, with what it disables; a run with its log is not."""

from __future__ import annotations

import json

from aggregate.cli import main
from benchmarks import synth
from rcea import layout

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "20", "--pass-k", "4", "--quiet"]


def test_a_run_without_its_training_log_is_named_among_the_missing_inputs(tmp_path):
    tables = layout.tables_dir("tiny", tmp_path)
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=4, k=8, methods=("grpo",))), tables)
    logged = layout.run_dir("tiny", "grpo", tmp_path)
    (logged / "checkpoints").mkdir(parents=True)
    (logged / "steps.jsonl").write_text("".join(json.dumps({"step": s, "entropy": 1.0, "reward": 0.5}) + "\n"
                                                for s in (1, 2)))
    (layout.run_dir("tiny", "their-run", tmp_path) / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    out = tmp_path / "results"
    assert main(["--input", str(tables), "--output", str(out), *SMALL]) == 0
    missing = json.loads((out / "summary.json").read_text())["unavailable"]
    runs = [k for k in missing if k.startswith("training_traces")]
    assert runs == ["training_traces tiny/their-run"] and "steps.jsonl" in missing[runs[0]]
    assert f"- training_traces tiny/their-run: {missing[runs[0]]}" in (out / "report.md").read_text()
