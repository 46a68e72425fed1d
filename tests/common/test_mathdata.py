"""The shipped data files (mathdata/) are exactly the ones mathdata/PROVENANCE.md describes."""

import hashlib
import json
import re

from rcea.data import BENCHMARK_COUNTS, benchmark_counts
from rcea.paths import mathdata_dir

ROW = re.compile(r"^\| `(?P<file>[\w/.-]+\.jsonl)` \| (?P<records>\d+) \| `(?P<sha>[0-9a-f]{64})` \|$")


def provenance_rows() -> dict[str, tuple[int, str]]:
    text = (mathdata_dir() / "PROVENANCE.md").read_text(encoding="utf-8")
    return {m["file"]: (int(m["records"]), m["sha"]) for m in map(ROW.match, text.splitlines()) if m}


def test_every_data_file_has_the_documented_hash_and_record_count():
    rows = provenance_rows()
    on_disk = sorted(str(p.relative_to(mathdata_dir())) for p in mathdata_dir().glob("*/*.jsonl"))
    assert sorted(rows) == on_disk and len(on_disk) == 7, "PROVENANCE.md and the files disagree on which exist"
    for name, (records, sha) in rows.items():
        raw = (mathdata_dir() / name).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == sha, f"{name} changed since PROVENANCE.md was written"
        lines = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
        assert len(lines) == records and len({r["id"] for r in lines}) == records, name


def test_benchmark_counts_match_the_provenance_table_and_report_a_broken_file(tmp_path, monkeypatch):
    rows = provenance_rows()
    assert {n: rows[f"benchmarks/{n}.jsonl"][0] for n in BENCHMARK_COUNTS} == BENCHMARK_COUNTS
    assert benchmark_counts() == BENCHMARK_COUNTS
    (tmp_path / "benchmarks").mkdir()
    for n in BENCHMARK_COUNTS:
        (tmp_path / "benchmarks" / f"{n}.jsonl").write_text('{"id": "x-1", "problem": "1+1?", "answer": "2"}\n')
    (tmp_path / "benchmarks" / "aime24.jsonl").unlink()
    monkeypatch.setattr("rcea.data.mathdata_dir", lambda: tmp_path)
    counts = benchmark_counts()
    assert counts["math500"] == 1 and "missing data file" in counts["aime24"]
