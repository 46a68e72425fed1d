"""Nothing stale passes for current in an aggregation's output folder (issue 31): a figure not drawn this time
loses the files an earlier run drew, the printed file count is what figures/ holds, and the temporary files a
killed aggregation left are removed by the next run and never copied to results/."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from aggregate.cli import main
from benchmarks import synth

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "50", "--pass-k", "4"]


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12))


def _aggregate(tmp: Path, tables: dict[str, pa.Table], capsys, extra=()) -> tuple[Path, str]:
    src, out = tmp / "in", tmp / "out"
    shutil.rmtree(src, ignore_errors=True)
    synth.write_dataset(tables, src)
    assert main(["--input", str(src), "--output", str(out), *SMALL, *extra]) == 0
    return out, capsys.readouterr().out


def _figure_files(out: Path) -> set[str]:
    return {p.name for p in (out / "figures").iterdir()}


def _printed_count(stdout: str) -> int:
    return int(re.search(r"figures/ \((\d+) files\)", stdout).group(1))


def test_a_figure_no_longer_drawn_leaves_no_file_and_the_count_is_what_is_there(tmp_path, tables, capsys):
    out, said = _aggregate(tmp_path, tables, capsys)
    assert {"fig_retention_vs_passk.png", "fig_retention_vs_passk.pdf"} <= _figure_files(out)
    assert _printed_count(said) == len(_figure_files(out))
    no_passk = {k: v for k, v in tables.items() if k != "passk"}   # the retention figure needs pass@k
    out, said = _aggregate(tmp_path, no_passk, capsys)
    files = _figure_files(out)
    assert not any(f.startswith("fig_retention_vs_passk") for f in files), files
    assert _printed_count(said) == len(files) > 0
    assert "| fig_retention_vs_passk |" in (out / "report.md").read_text()
    _, said = _aggregate(tmp_path, tables, capsys, ["--no-figures"])
    assert _figure_files(out) == set()   # skipped: an earlier run's figures would pass for this one's


def test_temporary_files_of_a_killed_aggregation_are_removed_and_never_published(tmp_path, tables, capsys):
    from rcea.publish import publish

    out, _ = _aggregate(tmp_path, tables, capsys)
    left = [out / "figures" / ".fig_traces.png.k3j2x.tmp", out / "tables" / ".table1.md.a8f0q.tmp",
            out / ".summary.json.zz91.tmp"]
    for p in left:
        p.write_bytes(b"half")
    published = publish(out, tmp_path / "results")   # what a study copies when the aggregation was killed
    assert not [p for p in (tmp_path / "results").rglob("*.tmp")]
    assert published == sum(1 for p in out.rglob("*") if p.is_file()) - len(left)
    _aggregate(tmp_path, tables, capsys)   # the next aggregation clears them
    assert not [p for p in out.rglob("*.tmp")]


def test_a_rerun_on_the_same_tables_writes_the_same_figure_bytes(tmp_path, tables, capsys):
    """PDFs carried their creation time: every rerun changed them (PNG files were already identical)."""
    out, _ = _aggregate(tmp_path, tables, capsys)
    first = {p.name: p.read_bytes() for p in (out / "figures").iterdir()}
    _aggregate(tmp_path, tables, capsys)
    assert {p.name: p.read_bytes() for p in (out / "figures").iterdir()} == first
    assert any(name.endswith(".pdf") for name in first)
