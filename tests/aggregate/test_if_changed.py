"""`python -m aggregate --if-changed` (the study's, aggregate/fresh.py): a rerun over the same inputs keeps the
outputs and prints the same summary without recomputing them; a change of anything they are made from (a part
replaced or removed, a setting) or a missing output makes it recompute. A part rewritten with the same rows and
only new times in its manifest (what the judge and modes stages do on every pass) is not a change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from aggregate.cli import main
from aggregate.fresh import stamp_path
from benchmarks import synth

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "50", "--pass-k", "4", "--no-figures"]
KEPT = "aggregate: nothing it reads has changed since"


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12))


def _write(src: Path, tables: dict[str, pa.Table], at: str = "2026-01-01T00:00:00+00:00") -> None:
    shutil.rmtree(src, ignore_errors=True)
    synth.write_dataset(tables, src, parts=2)
    for m in src.glob("*/*.manifest.json"):   # as a labelled part's manifest: times of writing and labelling
        m.write_text(json.dumps({"written_at": at, "labels": {"modes": {"at": at, "mode": True}}}))


def _run(src: Path, out: Path, capsys, *extra: str) -> tuple[bool, str, int]:
    """(kept, stdout, report.md's modification time in ns) of one `--if-changed` run."""
    assert main(["--input", str(src), "--output", str(out), *SMALL, "--if-changed", *extra]) == 0
    said = capsys.readouterr().out
    return KEPT in said, said, (out / "report.md").stat().st_mtime_ns


def test_a_rerun_with_nothing_changed_keeps_the_outputs_and_any_change_recomputes(tmp_path, tables, capsys):
    src, out = tmp_path / "in", tmp_path / "out"
    _write(src, tables)
    kept, first, t0 = _run(src, out, capsys)
    assert not kept and "wrote" in first and stamp_path(out).is_file() and not (out / stamp_path(out).name).exists()
    kept, again, t1 = _run(src, out, capsys)
    assert kept and t1 == t0                                          # not rewritten
    summary = first.split("\nwrote ")[0]
    assert summary.strip() and again.startswith(summary)              # the same summary, printed again
    _write(src, tables, at="2026-02-02T00:00:00+00:00")               # the same rows, only new times: kept
    assert _run(src, out, capsys)[0]
    assert not _run(src, out, capsys, "--bootstrap-resamples", "60")[0]   # a setting changed
    assert _run(src, out, capsys, "--bootstrap-resamples", "60")[0]
    assert main(["--input", str(src), "--output", str(out), *SMALL, "--bootstrap-resamples", "60"]) == 0
    assert KEPT not in capsys.readouterr().out                        # without --if-changed: always recomputed
    changed = dict(tables, greedy=tables["greedy"].slice(1))          # one row fewer in the greedy parts
    _write(src, changed)
    kept, _, _ = _run(src, out, capsys, "--bootstrap-resamples", "60")
    assert not kept
    gone = sorted(src.glob("passk/*.parquet"))[0]                     # a part removed
    gone.unlink()
    gone.with_name(gone.name + ".manifest.json").unlink()
    assert not _run(src, out, capsys, "--bootstrap-resamples", "60")[0]
    assert _run(src, out, capsys, "--bootstrap-resamples", "60")[0]
    (out / "tables" / "table1.md").unlink()                           # an output lost: recomputed
    assert not _run(src, out, capsys, "--bootstrap-resamples", "60")[0]
    assert (out / "tables" / "table1.md").is_file()
