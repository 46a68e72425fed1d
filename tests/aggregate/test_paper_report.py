"""report.md's sections that set a run beside the paper (aggregate/paper_report.py): tags, departures, RQ3's
two p values, accepted-set precision, codebook counts, and notes stated only when they hold."""

from __future__ import annotations

import pandas as pd

from aggregate import paper_report as pr
from aggregate.context import accepted_set, codebook_counts
from aggregate.settings import AggregateSettings, load_settings


def _rows(rows: list[tuple]) -> dict[str, tuple]:
    return {r[0]: r for r in rows}


def test_the_tiny_scale_departures_are_read_from_its_scale_file() -> None:
    paper, other = pr.departures(["tiny"], load_settings("tiny"))
    p, o = _rows(paper), _rows(other)
    assert p["aggregate.bootstrap_resamples"][1:4] == ("S", "10000", "500")
    assert p["aggregate.min_k_r"][1:4] == ("S", "8", "2")
    assert p["passk.n"][1:4] == ("S", "64", "8")
    assert o["aggregate.min_mode_m"][1:4] == ("C", "8", "3") and o["probe.k"][1:4] == ("C", "32", "8")
    assert "aggregate.ci_level" not in p and "aggregate.min_mode_m" not in p


def test_the_paper_scales_depart_in_nothing_the_paper_states() -> None:
    """At 3B nothing differs; at 7B the model is the paper's other stated model, not a departure."""
    assert pr.departures(["3b"], load_settings("3b")) == ([], [])
    paper, other = pr.departures(["7b"], load_settings("7b"))
    assert paper == [] and "train.per_device_batch" in _rows(other)


def test_an_aggregation_option_is_a_departure_and_the_settings_table_tags_it() -> None:
    st = AggregateSettings().replace(min_k_r=3)
    paper, _ = pr.departures([], st)
    assert _rows(paper)["aggregate.min_k_r"][3:] == ("3", "this report")
    lines = pr.settings_lines(st)
    assert "| `aggregate.min_k_r` | 3 (departure) | S | 8 |" in lines
    assert "| `aggregate.bootstrap_seed` | 2027 | C | – (none) |" in lines


def test_rq3_shows_both_p_values_and_the_exact_one_decides() -> None:
    """The paper's own 3B case: rho 0.812, n 6, t approximation 0.0499, exact 0.0722."""
    res = {"correlations": {"3b": {"n": 6, "spearman": 0.812, "p_exact": 0.0722, "p_t_approx": 0.0499}}}
    text = "\n".join(pr.rq3_lines(res, AggregateSettings()))
    assert "| 3b | 6 | 0.8120 | 0.0722 | 0.0499 | not significant | significant (disagrees) |" in text
    assert "exact permutation p (decides)" in text


def test_the_retention_note_follows_the_run() -> None:
    missing = {"unavailable": {"mode_retention": "column 'process_valid' is all null: ..."}, "runs": []}
    judged = {"unavailable": {}, "runs": [{"scale": "tiny", "method": "grpo", "mode_retention": 97.0}],
              "failure_detector": {"tiny/grpo": {"fired": False}}}
    a, b = "\n".join(pr.deviation_lines(missing, ())), "\n".join(pr.deviation_lines(judged, ()))
    assert "all null here" in a and "judge-accepted successes" not in a
    assert "all null" not in b and "judge-accepted successes" in b
    assert "not applied" in a and "fired on none of the 1 runs" in b


def test_accepted_set_precision_from_an_annotation_file(tmp_path) -> None:
    assert accepted_set(tmp_path / "none.csv") is None
    assert "not imported" in "\n".join(pr.accepted_set_lines({"accepted_set": None}))
    f = tmp_path / "labels.csv"
    f.write_text("annotator,traj_id,valid\n" + "".join(f"A,t{i},{int(i < 9)}\n" for i in range(10))
                 + "".join(f"B,t{i},{'valid' if i < 7 else 'invalid'}\n" for i in range(8)))
    acc = accepted_set(f)
    assert acc["annotators"]["A"] == {"n": 10, "valid": 9, "precision": 0.9}
    assert acc["annotators"]["B"]["precision"] == 7 / 8
    text = "\n".join(pr.accepted_set_lines({"accepted_set": acc}))
    assert "| A | 10 | 9 | 90.0% | 91.3% |" in text and "| B | 8 | 7 | 87.5% | 89.1% |" in text
    f.write_text("annotator,traj_id,valid\nA,t1,maybe\n")
    assert "not read" in accepted_set(f)["note"]


def test_codebook_counts_from_the_assignment_table(tmp_path) -> None:
    path = tmp_path / "assignments.parquet"
    pd.DataFrame({"traj_id": [f"t{i}" for i in range(6)], "question_id": ["q1", "q1", "q1", "q2", "q2", "q2"],
                  "mode": ["m1", "m2", "m1", "m1", None, "m1"],
                  "source": ["assignment", "arbitration", "assignment", "assignment", "uncertain", "assignment"],
                  "disputed": [False, True, False, False, True, False]}).to_parquet(path)
    cb = codebook_counts(path)
    assert (cb["questions"], cb["modes"], cb["included"], cb["uncertain"], cb["disputed"]) == (2, 3, 5, 1, 2)
    text = "\n".join(pr.codebook_lines({"codebook": cb}))
    assert "| modes in the final export | 3 | 313 |" in text and "| sent to reconciliation (disputed) | 2 | 7,726 |" in text


def test_the_tags_in_the_settings_docstrings_are_those_of_the_toml() -> None:
    """aggregate/settings.py repeats each field's tag in its docstring; configs/base.toml decides."""
    import re
    from pathlib import Path

    import aggregate.settings as mod

    src = Path(mod.__file__).read_text(encoding="utf-8")
    found = re.findall(r'_setting\("([\w.]+)"\)\n\s+"""\[(\w)\]', src)
    assert len(found) >= 15
    tags = pr.tagged_settings()
    assert [(k, t) for k, t in found if tags[k].status != t] == []
