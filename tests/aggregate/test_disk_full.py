"""Issue 41 item 2: a full disk while the aggregation writes its figures (matplotlib's `AttributeError: 'Stream'
object has no attribute 'pos'`, the form ENOSPC takes there) ends in one line naming the folder and the space
left; no partial figure is published, and the rerun completes. On main before this change: the traceback."""

from __future__ import annotations

import pytest

from rcea import diskfull
from rcea.store import is_temp


def test_aggregate_ends_a_full_disk_in_one_line_and_the_rerun_completes(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from aggregate import figures
    from aggregate.cli import main
    from benchmarks import synth

    src, out = tmp_path / "in", tmp_path / "out"
    synth.write_dataset(synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12)), src)
    argv = ["--input", str(src), "--output", str(out), "--min-k-r", "2", "--min-mode-m", "2",
            "--bootstrap-resamples", "50", "--pass-k", "4", "--quiet"]
    real = figures.atomic_write

    def full(path, write):   # the disk fills while the figures are written: matplotlib's error, not ENOSPC
        monkeypatch.setattr(diskfull, "free", lambda folder: 1024)

        def broken(tmp):
            tmp.write_bytes(b"%PDF-1.4 partial")
            raise AttributeError("'Stream' object has no attribute 'pos'")
        return real(path, broken)

    monkeypatch.setattr(figures, "atomic_write", full)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the disk holding ") and "1.0 KiB left" in err
    assert "Traceback" not in err and not [p for p in out.rglob("*") if is_temp(p) or p.suffix in (".pdf", ".png")]
    monkeypatch.undo()
    assert main(argv) == 0 and (out / "summary.json").exists()
