"""Issue 40: a run whose folder holds complete checkpoints but whose rows the tables lack (an outside run's parts
moved away) is named among the report's missing inputs; a measured run is not, and `none` is said only when
every run with checkpoints has its rows."""

from __future__ import annotations

import json

from aggregate.cli import main
from aggregate.context import unmeasured
from benchmarks import synth
from rcea import layout
from rcea.store import write_manifest

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "20", "--pass-k", "4", "--quiet",
         "--no-figures"]


def _checkpoint(root, run: str, step: int = 2) -> None:
    """A complete checkpoint as the trainer leaves it (adapter files, trainer state, its manifest written last)."""
    ckpt = layout.checkpoint_dir("tiny", run, step, root)
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_config.json").write_text("{}")
    (ckpt / "adapter_model.safetensors").write_bytes(b"w")
    (ckpt / layout.TRAINER_STATE).write_bytes(b"s")
    write_manifest(ckpt / layout.TRAINER_STATE)


def _missing(tmp_path, name: str) -> tuple[dict, str]:
    out = tmp_path / name
    assert main(["--input", str(layout.tables_dir("tiny", tmp_path)), "--output", str(out), *SMALL]) == 0
    return json.loads((out / "summary.json").read_text())["unavailable"], (out / "report.md").read_text()


def test_a_run_with_checkpoints_but_no_rows_is_a_missing_input(tmp_path):
    tables = layout.tables_dir("tiny", tmp_path)
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=4, k=8, methods=("grpo",))), tables)
    for run in ("grpo", "my-grpo"):   # my-grpo's parts are gone (moved aside), its checkpoints are not
        _checkpoint(tmp_path, run)
    out = tmp_path / "results"
    assert main(["--input", str(tables), "--output", str(out), *SMALL]) == 0
    missing = json.loads((out / "summary.json").read_text())["unavailable"]
    assert [k for k in missing if k.startswith("measurements")] == ["measurements tiny/my-grpo"]   # grpo: measured
    why = missing["measurements tiny/my-grpo"]
    assert "greedy, passk, samples (probe)" in why and "invoke measure-run --name my-grpo" in why
    assert f"- measurements tiny/my-grpo: {why}" in (out / "report.md").read_text()


def test_only_the_tables_lacking_a_run_are_named():
    res = {"greedy": [{"scale": "tiny", "method": "grpo"}, {"scale": "tiny", "method": "my-grpo"}],
           "passk": [{"scale": "tiny", "method": "grpo"}], "endpoints": []}   # no samples table at all: named alone
    assert unmeasured(["tiny/grpo", "tiny/my-grpo", "tiny/their-run"], res) == {
        "measurements tiny/my-grpo": unmeasured(["tiny/my-grpo"], res)["measurements tiny/my-grpo"],
        "measurements tiny/their-run": unmeasured(["tiny/their-run"], res)["measurements tiny/their-run"]}
    assert "the passk table(s)" in unmeasured(["tiny/my-grpo"], res)["measurements tiny/my-grpo"]
    assert "the greedy, passk table(s)" in unmeasured(["tiny/their-run"], res)["measurements tiny/their-run"]
    assert unmeasured(["3b/my-grpo"], {"greedy": [{"scale": "tiny", "method": "my-grpo"}]})   # another scale's rows
