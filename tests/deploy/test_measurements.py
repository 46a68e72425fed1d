"""docs/measurements.md is written from records, each with its date, machine and command; the numbers a
record holds come from a run's own output (stage banners timed as they print, summary.json)."""

from __future__ import annotations

import json

import pytest

from benchmarks import measurements as ms


def test_the_page_is_the_render_of_the_records():
    """`scripts/measure render` output, committed: a record changed without the page fails here."""
    assert ms.PAGE.read_text() == ms.render(ms.load_records()), "run scripts/measure render"


def test_every_record_says_when_where_and_what_ran():
    files = sorted(ms.RECORDS.glob("*.json"))
    assert files
    for f in files:
        r = json.loads(f.read_text())
        assert r["name"] == f.stem
        assert r["date"][:4].isdigit() and r["date"].endswith("UTC"), r["name"]
        assert r["machine"]["cores"] >= 1 and "gpu" in r["machine"], r["name"]
        assert r["command"].strip() and r["source"].strip() and r["title"].strip(), r["name"]


def test_demo_numbers_come_from_the_summary():
    """The greedy range is read, not typed: base 57.8%, objectives 70.3% and 79.7% give '57.8% → 70.3-79.7%'."""
    summary = {"runs": [{"method": "base", "macro_average": 57.8125, "probe_step": 0, "mode_retention": 100.0},
                        {"method": "grpo", "macro_average": 79.6875, "probe_step": 100, "mode_retention": 95.04},
                        {"method": "dapo", "macro_average": 70.3125, "probe_step": 90, "mode_retention": 104.0}],
               "endpoints": [{"method": "base", "step": 0, "accuracy": 0.4727, "token_entropy_mean": 0.1571},
                             {"method": "grpo", "step": 100, "accuracy": 0.5273, "token_entropy_mean": 0.127},
                             {"method": "dapo", "step": 100, "accuracy": 0.9, "token_entropy_mean": 0.2},
                             {"method": "dapo", "step": 90, "accuracy": 0.5156, "token_entropy_mean": 0.141}]}
    res = ms.demo_results(summary)
    assert res["greedy_base"] == 57.8 and res["greedy"] == {"grpo": 79.7, "dapo": 70.3}
    assert res["sampled"] == {"grpo": 0.527, "dapo": 0.516}  # each run's reported endpoint (dapo: step 90)
    body = "\n".join(ms._demo_body({"results": res}))
    assert "base 57.8% → 70.3-79.7% (GRPO 79.7%, DAPO 70.3%)" in body
    assert "base 0.473 → 0.516-0.527" in body and "base 0.157 → 0.127-0.141 nats" in body
    assert "95.0-104.0% of the base" in body


def test_stage_times_from_a_saved_log():
    log = ("\n=== [1/3] prepare (tiny model)  (+0s)\nwarm start ...\n"
           "=== [2/3] train grpo  (+9m 05s, ~15m left)\n"
           "=== [3/3] aggregate  (+1h 02m, ~1m left)\n\n=== demo done in 1h 04m\n")
    wall, lines = ms.lines_from_log(log)
    assert wall == 3840
    assert ms.stage_times(lines, wall) == [{"stage": "prepare (tiny model)", "seconds": 545},
                                           {"stage": "train grpo", "seconds": 3720 - 545},
                                           {"stage": "aggregate", "seconds": 120}]
    with pytest.raises(ValueError, match="did not finish"):
        ms.lines_from_log("=== [1/3] prepare  (+0s)\n")
    assert [ms.parse_duration(d) for d in ("12s", "4m 10s", "1h 05m")] == [12, 250, 3900]


def test_record_times_the_banners_as_they_print(tmp_path, monkeypatch):
    monkeypatch.setattr(ms, "RECORDS", tmp_path)
    cmd = "echo '=== [1/2] first  (+0s)'; sleep 1.2; echo '=== [2/2] second  (+1s)'; echo 'tests: 3 passed, 0 failed, 1 skipped'"
    rec = ms.record("tests", cmd)
    saved = json.loads((tmp_path / "tests.json").read_text())
    assert saved == rec and rec["command"] == cmd and rec["exit_status"] == 0
    first, second = rec["stages"]
    assert first["stage"] == "first" and 1.1 <= first["seconds"] <= rec["wall_s"]
    assert second["seconds"] <= rec["wall_s"] - first["seconds"] + 0.1
    assert (rec["passed"], rec["failed"], rec["skipped"]) == (3, 0, 1)
    assert rec["machine"]["cores"] >= 1 and rec["date"].endswith("UTC")


def test_unknown_measurement_is_one_line_and_exit_2(capsys):
    assert ms.main(["nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "demo" in err and "render" in err


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_records_name_no_folder_of_a_machine():
    """A record is committed: a run's own output (seeds-*.json names its policy folder) is made relative."""
    for f in sorted(ms.RECORDS.glob("*.json")):
        absolute = [s for s in _strings(json.loads(f.read_text())) if s.startswith("/")]
        assert not absolute, f"{f.name}: {absolute}"
    root = ms.ROOT
    assert ms.relative({"policy": str(root / "data" / "models" / "m"), "k": 8, "x": ["/elsewhere/a/b"]}) == \
        {"policy": "data/models/m", "k": 8, "x": ["a/b"]}
