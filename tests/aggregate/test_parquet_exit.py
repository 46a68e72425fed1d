"""Reading Parquet through the project's helpers never aborts the interpreter at exit.

pandas.read_parquet opens a Python file object for a local path and hands it to Arrow; processes that
read that way died at exit with "terminate called without an active exception" (SIGABRT) in 5 to 11 runs
of 60 on a loaded 2-core machine (scripts/faults/parquet_exit.py measures it). rcea.store reads by
path through Arrow's own filesystem instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rcea import store

ROOT = Path(__file__).resolve().parents[2]


def _parts(folder: Path, n: int = 4) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        t = pa.table({"method": ["grpo"] * 300, "step": list(range(300)), "reward": [0.5] * 300})
        pq.write_table(t, folder / f"p{i}.parquet")
        (folder / f"p{i}.parquet.manifest.json").write_text("{}")
    return folder


def test_reads_hand_arrow_a_path_not_a_python_file(tmp_path, monkeypatch):
    folder = _parts(tmp_path / "samples")
    seen = []
    real = pq.read_table

    def spy(source, *args, **kwargs):
        seen.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", spy)
    df = store.read_table(folder)
    assert len(df) == 1200 and seen
    assert all(isinstance(s, (str, os.PathLike)) for s in seen), [type(s).__name__ for s in seen]
    single = store.read_parquet(folder / "p0.parquet")
    assert len(single) == 300 and isinstance(seen[-1], (str, os.PathLike))


def test_processes_reading_parts_exit_cleanly(tmp_path):
    """The e2e helper's path (read every part, print, exit), run repeatedly for a few seconds."""
    folder = _parts(tmp_path / "samples")
    code = "import sys; from rcea.store import read_table; print(len(read_table(sys.argv[1])))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    deadline, runs = time.monotonic() + 6.0, 0
    while runs < 3 or (time.monotonic() < deadline and runs < 24):
        procs = [subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"rc {p.returncode}: {err[-500:]}"
            assert out.strip() == "1200"
        runs += len(procs)
