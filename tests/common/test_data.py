import json

import pytest

from rcea.config import load_config
from rcea.data import (DataError, _check_jsonl, benchmark_questions, load_benchmark, minerva_subset_ids,
                       probe_questions)


def test_benchmarks_load_with_the_documented_counts():
    counts = {name: len(load_benchmark(name)) for name in ("amc23", "aime24", "aime25", "math500", "minerva_math")}
    assert counts == {"amc23": 40, "aime24": 30, "aime25": 30, "math500": 500, "minerva_math": 272}
    assert len(benchmark_questions("minerva_math")) == 40


def test_frozen_lists_match_the_paper_design():
    minerva = minerva_subset_ids()
    assert len(minerva) == len(set(minerva)) == 40
    cfg = load_config("3b")
    probe = probe_questions(cfg)
    assert len(probe) == 200 and len({q["id"] for q in probe}) == 200
    per = {}
    for q in probe:
        per[q["benchmark"]] = per.get(q["benchmark"], 0) + 1
    assert per == {"amc23": 20, "aime24": 20, "aime25": 20, "math500": 100, "minerva_math": 40}
    assert {q["id"] for q in probe if q["benchmark"] == "minerva_math"} == set(minerva)


def test_a_record_without_an_answer_stops_the_load_naming_file_line_and_id(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [{"id": "q1", "problem": "1+1?", "answer": "2"}, {"id": "q2", "problem": "2+2?", "answer": ""}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: record q2 has no answer"):
        _check_jsonl(path)
    path.write_text('{"id": "q1", "problem": "x", "answer": "1"}\n{oops\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        _check_jsonl(path)
