"""Fault check: do processes that read Parquet die at exit (SIGABRT, "terminate called without an
active exception")? Runs N short reader processes per mode, P at a time, and prints the abort count.

    .envs/aggregate/bin/python scripts/faults/parquet_exit.py [--runs 60] [--parallel 3]

modes: `file-object` reads each part as pandas.read_parquet does for a local path by default (a Python
file object handed to Arrow); `rcea.store` reads through rcea.store.read_table (by path). Measured on
the 2-core development machine under load: file-object 11 and 5 of 60 aborted (rc -6), rcea.store 0 of 60.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = {
    "file-object": ("import sys, pathlib, pyarrow.parquet as pq\n"
                    "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.parquet')):\n"
                    "    with open(p, 'rb') as fh:\n"
                    "        pq.read_table(fh)\n"),
    "rcea.store": "import sys; from rcea.store import read_table; read_table(sys.argv[1])\n",
}


def write_parts(folder: Path, n: int = 4, rows: int = 500) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        pq.write_table(pa.table({"step": list(range(rows)), "reward": [0.5] * rows}), folder / f"p{i}.parquet")
        (folder / f"p{i}.parquet.manifest.json").write_text("{}")


def one(code: str, folder: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code, str(folder)], env=env, capture_output=True,
                          timeout=300).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--modes", default=",".join(READERS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "samples"
        write_parts(folder)
        for mode in args.modes.split(","):
            with ThreadPoolExecutor(args.parallel) as ex:
                rcs = list(ex.map(lambda _: one(READERS[mode], folder), range(args.runs)))
            bad = [rc for rc in rcs if rc != 0]
            print(f"{mode:12s} {len(bad)} of {len(rcs)} runs failed at exit (return codes {sorted(set(bad))})",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
