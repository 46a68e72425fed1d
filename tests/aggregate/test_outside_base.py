"""Issue 41 item 3: an outside run measured with `invoke measure-run --base-differs` is named in the report, beside
the runs' numbers and among the departures, with the base it was measured over (path and short weight hashes) and
that it differs from the scale's; a run measured over the scale's own weights is not."""

from __future__ import annotations

import json

from aggregate.cli import main
from aggregate.outside_bases import line, other_bases
from benchmarks import synth
from rcea import layout

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "20", "--pass-k", "4", "--quiet",
         "--no-figures"]
MINE, SCALES = "ab" * 32, "cd" * 32   # the weights' SHA-256 of the base given and of the scale's base


def _outside(root, name: str, differs: bool, over_given: bool = True) -> None:
    run = layout.run_dir("tiny", name, root)
    run.mkdir(parents=True)
    given = "/models/their-base" if differs else "/models/tiny-toy"
    over, over_sha = (given, MINE) if over_given else ("/models/tiny-toy", SCALES)
    (run / "outside.json").write_text(json.dumps({
        "source": f"/runs/{name}", "base": given, "base_weights_sha256": MINE if differs else SCALES,
        "measured_over": over if differs else given, "measured_over_weights_sha256": over_sha if differs else SCALES,
        "scale_base": "/models/tiny-toy", "scale_base_weights_sha256": SCALES, "base_differs": differs}))


def test_a_run_measured_over_another_base_is_said_in_the_runs_section_and_the_departures(tmp_path):
    tables = layout.tables_dir("tiny", tmp_path)
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=4, k=8, methods=("grpo",))), tables)
    _outside(tmp_path, "their-run", differs=True)
    _outside(tmp_path, "same-base", differs=False)
    out = tmp_path / "results"
    assert main(["--input", str(tables), "--output", str(out), *SMALL]) == 0
    report = (out / "report.md").read_text()
    said = [x for x in report.splitlines() if "--base-differs" in x and x.startswith("- ")]
    want = ("- tiny/their-run: measured with `--base-differs` over its own base `/models/their-base` (weights sha256 "
            f"{MINE[:12]}), which differs from the scale's base `/models/tiny-toy` (weights sha256 {SCALES[:12]})")
    assert len(said) == 2 and all(x.startswith(want) for x in said), said
    runs_at, departures_at = report.index("## Numbers per reporting point"), report.index("## Departures from the paper")
    at = [i for i in range(len(report)) if report.startswith(want, i)]
    assert any(departures_at < i < report.index("\n## ", departures_at + 1) for i in at)
    assert any(runs_at < i < report.index("\n## ", runs_at + 1) for i in at)
    assert "same-base" not in report
    [rec] = json.loads((out / "summary.json").read_text())["outside_bases"]
    assert rec["run"] == "tiny/their-run" and rec["base_weights_sha256"] == MINE


def test_a_record_measured_over_the_scales_base_says_so(tmp_path):
    """Records written before the jobs loaded the given base: the scale's base is what they measured over."""
    _outside(tmp_path, "old", differs=True, over_given=False)
    rec = json.loads((layout.run_dir("tiny", "old", tmp_path) / "outside.json").read_text())
    del rec["scale_base"], rec["scale_base_weights_sha256"]
    (layout.run_dir("tiny", "old", tmp_path) / "outside.json").write_text(json.dumps(rec))
    [b] = other_bases(layout.run_dir("tiny", "-", tmp_path).parent, "tiny")
    assert line(b).startswith(f"- tiny/old: measured with `--base-differs` over the scale's base `/models/tiny-toy` "
                              f"(weights sha256 {SCALES[:12]}), which differs from the base it names "
                              f"`/models/their-base` (weights sha256 {MINE[:12]})")
