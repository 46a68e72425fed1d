"""The one checked JSON Lines loader (rcea.jsonl) and the data reads that go through it: damaged
files stop with the file, the line and the record id, never a bare traceback."""

import json

import pytest

from rcea import jsonl
from rcea.jsonl import JsonlError, read_jsonl

ROWS = [{"id": "q1", "problem": "1+1?", "answer": "2"}, {"id": "q2", "problem": "2+2?", "answer": "4"},
        {"id": "q3", "problem": "3+3?", "answer": "6"}]


def _write(path, rows, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def test_reads_records_in_order_and_skips_blank_lines(tmp_path):
    p = tmp_path / "ok.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n   \n" + json.dumps(ROWS[2]))
    assert read_jsonl(p, required=("problem", "answer")) == ROWS


def test_truncated_line_names_file_and_line(tmp_path):
    p = _write(tmp_path / "cut.jsonl", ROWS[:2], tail=json.dumps(ROWS[2])[:17])  # writer killed mid-line
    with pytest.raises(JsonlError, match=r"cut.jsonl:3: not valid JSON, truncated"):
        read_jsonl(p)
    assert read_jsonl(p, drop_partial_tail=True) == ROWS[:2]  # logs we append to may drop a torn last line
    p = _write(tmp_path / "mid.jsonl", ROWS[:1], tail='{"id": "q2", "problem": \n' + json.dumps(ROWS[2]) + "\n")
    with pytest.raises(JsonlError, match=r"mid.jsonl:2: not valid JSON, truncated"):
        read_jsonl(p, drop_partial_tail=True)  # only a torn LAST line is a killed writer's


def test_empty_missing_and_non_utf8_files_are_named(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    with pytest.raises(JsonlError, match=r"file .*empty.jsonl is empty"):
        read_jsonl(tmp_path / "empty.jsonl")
    assert read_jsonl(tmp_path / "empty.jsonl", allow_empty=True) == []
    with pytest.raises(JsonlError, match=r"file .*nope.jsonl does not exist"):
        read_jsonl(tmp_path / "nope.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"id": "q1"}\n{"id": "caf\xe9"}\n')
    with pytest.raises(JsonlError, match=r"latin.jsonl:2: not UTF-8"):
        read_jsonl(tmp_path / "latin.jsonl")


def test_missing_key_names_file_line_and_id(tmp_path):
    p = _write(tmp_path / "keys.jsonl", [ROWS[0], {"id": "q2", "problem": "2+2?"}])
    with pytest.raises(JsonlError, match=r"keys.jsonl:2: record q2 has no answer"):
        read_jsonl(p, required=("problem", "answer"))
    p = _write(tmp_path / "list.jsonl", [ROWS[0], [1, 2]])
    with pytest.raises(JsonlError, match=r"list.jsonl:2: expected a JSON object"):
        read_jsonl(p)


def test_tiny_model_corpus_names_the_damaged_file(tmp_path, monkeypatch):
    """The tiny model's corpus is read before any data check: a truncated file must still name itself."""
    from rcea import tiny

    (tmp_path / "benchmarks").mkdir()
    _write(tmp_path / "benchmarks" / "amc23.jsonl", ROWS, tail='{"id": "q4", "prob')
    monkeypatch.setattr(tiny, "mathdata_dir", lambda: tmp_path)
    with pytest.raises(JsonlError, match=r"amc23.jsonl:4: not valid JSON, truncated"):
        tiny._corpus()


def test_an_empty_benchmark_file_is_named(tmp_path, monkeypatch):
    from rcea import data

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "aime24.jsonl").write_text("")
    monkeypatch.setattr(data, "mathdata_dir", lambda: tmp_path)
    data._benchmark_rows.cache_clear()
    try:
        with pytest.raises(JsonlError, match=r"file .*aime24.jsonl is empty"):
            data.load_benchmark("aime24")
    finally:
        data._benchmark_rows.cache_clear()


def test_data_errors_are_jsonl_errors():
    """Callers that catch rcea.data.DataError also catch the loader's errors."""
    from rcea.data import DataError

    assert issubclass(JsonlError, DataError) or issubclass(DataError, JsonlError)
    assert jsonl.JsonlError.__doc__
