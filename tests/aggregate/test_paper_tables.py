"""The paper's Tables 2, A4, A6, A7 and A8: pins where its inputs can be recovered, rendering checks elsewhere.

The numbers are copied from the paper as data (its tables and the sentences around them); no test reads the
paper. A pin builds inputs recovered from the printed cells, runs them through the harness's estimator and
compares the output with the printed cell; each pin names the estimator it pins (perturbing it fails the test):
  A4 coverage and n_c   whole-question outcome counts (coverage x 200) -> pipeline (entropy.conditional_summary)
                        -> the printed coverage pair and n_c of all twelve rows, and Table A5's n;
  A4 identity           the harness's n_c = |Q_1| + |Q_0| - 200 on random outcome counts with K >= 15, the rule
                        the printed rows obey;
  A7 n and sign         transitions with the printed sign agreements -> pipeline (covariance.fit_summary, the
                        failed-run exclusion) -> the printed n and sign-agreement cells;
  A8 means              twelve endpoint shares with the printed means -> tables.tableA8's averaging, gap and
                        direction count -> the printed rows.
Table 2's q99 shares and Table A6's retention come from token- and mode-level inputs the paper does not print:
their tests feed the printed cells to the renderer and check rendering only (layout, gap column, failed-run
mark, the counts the text quotes); the estimators are pinned to hand-computed examples in test_estimators.py.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from aggregate import io, pipeline, tables
from aggregate.settings import AggregateSettings
from tests.aggregate.test_paper_numbers import _greedy

ST = AggregateSettings(bootstrap_resamples=20, workers=1)
SIX = ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo")

# Table A4: (scale, method, success coverage %, failure coverage %, n_c); 200 probe questions.
TABLE_A4 = [
    ("3b", "grpo", 43.5, 82.5, 52), ("3b", "dapo", 42.0, 80.5, 45), ("3b", "clip_cov", 44.5, 83.5, 56),
    ("3b", "kl_cov", 43.5, 85.0, 57), ("3b", "ep_grpo", 40.5, 85.5, 52), ("3b", "gtpo", 41.5, 79.5, 42),
    ("7b", "grpo", 50.5, 75.5, 52), ("7b", "dapo", 49.0, 73.0, 44), ("7b", "clip_cov", 52.0, 73.5, 51),
    ("7b", "kl_cov", 53.0, 75.0, 56), ("7b", "ep_grpo", 49.5, 79.0, 57), ("7b", "gtpo", 47.5, 72.5, 40),
]


def _samples_for_coverage(rows, k: int = 32, kinds_of=None) -> pa.Table:
    """Per A4 row, 200 questions of K = 32 samples: n_c with 16/16 outcomes, 200 - 2F success-dominated
    (28/4), 200 - 2S failure-dominated (4/28); the coverages are then exactly S and F percent.
    `kinds_of(row)`: the successes of each question instead (a list of 200 counts)."""
    cols: dict[str, list] = {c: [] for c in ("scale", "method", "step", "question_id", "benchmark", "sample", "reward",
                                             "n_tokens", "logprob_sum", "token_entropy_mean", "truncated")}
    rng = np.random.default_rng(0)
    for scale, method, s, f, n_c in rows:
        kinds = kinds_of((scale, method, s, f, n_c)) if kinds_of else \
            [16] * n_c + [28] * round(200 - 2 * f) + [4] * round(200 - 2 * s)
        assert len(kinds) == 200
        for q, k1 in enumerate(kinds):
            for i in range(k):
                ok = i < k1
                for c, v in (("scale", scale), ("method", method), ("step", 4000), ("question_id", f"q{q}"),
                             ("benchmark", "math500"), ("sample", i), ("reward", int(ok)), ("n_tokens", 100),
                             ("logprob_sum", -50.0), ("token_entropy_mean", (0.3 if ok else 0.5) + 0.01 * rng.random()),
                             ("truncated", False)):
                    cols[c].append(v)
    t = pa.table(cols)
    return t.append_column("process_valid", pa.nulls(t.num_rows, pa.bool_())).append_column(
        "mode", pa.nulls(t.num_rows, pa.string()))


def test_table_a4_coverage_and_n_c_columns_from_the_outcome_counts() -> None:
    """Pin of the coverage and n_c estimators: the printed pair and n_c of every row come out of the pipeline."""
    res = pipeline.run_aggregation(io.from_tables({"samples": _samples_for_coverage(TABLE_A4)}), ST)
    md = tables.tableA4(res, ST).markdown()
    a5 = tables.tableA5(res, ST).markdown()
    for scale, method, s, f, n_c in TABLE_A4:
        name = tables.method_name(method)
        assert f"| {scale.upper()} | {name} | " in md
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {scale.upper()} | {name} |"))
        assert f"| {s:.1f}/{f:.1f} | {n_c} |" in row, row
        assert next(ln for ln in a5.splitlines() if ln.startswith(f"| {scale.upper()} | {name} |")).split(" | ")[2] \
            == str(n_c)  # Table A5's n is n_c: no ties


# Table 2: (method, 3B successful, 3B failed, 7B successful, 7B failed), in %. Clip-Cov-7B is the failed run.
TABLE_2 = [("base", 2.4, 61.2, 2.7, 43.2), ("grpo", 9.5, 82.7, 9.9, 91.8), ("dapo", 12.5, 83.9, 10.8, 93.2),
           ("clip_cov", 10.0, 84.5, 1.5, 83.0), ("kl_cov", 4.6, 70.4, 10.2, 86.2), ("ep_grpo", 7.1, 82.9, 7.6, 81.3),
           ("gtpo", 18.2, 98.6, 15.6, 99.3)]


def _runs_from_table2() -> dict:
    runs = []
    for m, *cells in TABLE_2:
        for scale, (a, b) in zip(("3b", "7b"), (cells[:2], cells[2:])):
            runs.append({"scale": scale, "method": m, "failed": (scale, m) == ("7b", "clip_cov"), "extension": False,
                         "q99_step": 8000, "q99_share_success": a / 100, "q99_share_failure": b / 100})
    return {"runs": runs, "unavailable": {}}


def test_table_2_renders_the_printed_cells_gaps_and_the_ranges_the_text_quotes() -> None:
    """Rendering only (the q99 shares' token-level inputs are not printed): the printed shares in, the rows out
    with the gap column; the text's ranges (4.6-18.2% successful, 70.4-99.3% failed, gaps 65.8-83.7 pp over
    trained nonfailed methods) hold over the rendered cells; the failed Clip-Cov-7B row is kept and flagged."""
    res = _runs_from_table2()
    md = tables.table2(res, ST).markdown()
    assert "| GRPO | 9.5 | 82.7 | 73.2 | – | 9.9 | 91.8 | 81.9 | – |" in md   # no selected fraction given
    assert "| Clip-Cov | 10.0 | 84.5 | 74.5 | – | 1.5 | 83.0† | 81.5 | – |" in md
    rows = {ln.split(" | ")[0][2:]: ln.strip("| ").split(" | ")[1:] for ln in md.splitlines() if ln.startswith("| ")}
    gaps, succ, fail = [], [], []
    for m, *_ in TABLE_2[1:]:
        cells = rows[tables.method_name(m)]
        for j, scale in enumerate(("3b", "7b")):
            if (scale, m) == ("7b", "clip_cov"):
                continue
            succ.append(float(cells[4 * j]))
            fail.append(float(cells[4 * j + 1].rstrip("†")))
            gaps.append(float(cells[4 * j + 2]))
    assert (min(succ), max(succ), min(fail), max(fail)) == (4.6, 18.2, 70.4, 99.3)
    assert (min(gaps), max(gaps)) == (65.8, 83.7)


# Table A6: (scale, method, retention %, CI low, CI high, n).
TABLE_A6 = [("3b", "grpo", 94.2, 89.2, 99.9, 72), ("3b", "dapo", 91.1, 85.6, 96.7, 72),
            ("3b", "clip_cov", 96.0, 90.1, 102.5, 73), ("3b", "kl_cov", 94.8, 89.1, 100.6, 72),
            ("3b", "ep_grpo", 99.9, 92.3, 108.1, 72), ("3b", "gtpo", 83.7, 77.4, 89.9, 67),
            ("7b", "grpo", 89.6, 84.7, 94.5, 81), ("7b", "dapo", 88.8, 83.7, 93.9, 80),
            ("7b", "clip_cov", 93.5, 87.2, 100.7, 82), ("7b", "kl_cov", 92.3, 87.7, 96.9, 81),
            ("7b", "ep_grpo", 96.2, 89.5, 104.1, 81), ("7b", "gtpo", 85.9, 79.9, 92.0, 77)]


def test_table_a6_renders_the_printed_rows_and_table_1_repeats_them() -> None:
    """Rendering only (retention's mode-level inputs are not printed): the printed rows in, the same rows out,
    and Table 1's Mode Retention column shows the same twelve values. The text's counts (all twelve points
    below 100%, seven intervals wholly below) are checked on the paper's own cells, as data."""
    runs = [{"scale": s, "method": m, "failed": False, "extension": False, "probe_step": 4000, "mode_retention": r,
             "mode_retention_ci": [lo, hi], "mode_retention_n": n} for s, m, r, lo, hi, n in TABLE_A6]
    res = {"runs": runs, "unavailable": {}}
    md = tables.tableA6(res, ST).markdown()
    for s, m, r, lo, hi, n in TABLE_A6:
        assert f"| {s.upper()} | {tables.method_name(m)} | {r:.1f}% | [{lo:.1f}, {hi:.1f}] | {n} |" in md
    assert all(r < 100 for _, _, r, *_ in TABLE_A6)
    assert sum(hi < 100 for *_, hi, _ in TABLE_A6) == 7
    t1 = re.sub(r"\*\*|</?u>", "", tables.table1(res, ST).markdown())   # Table 1's marks aside
    assert all(f"| {r:.1f} |" in t1 for _, _, r, *_ in TABLE_A6)


def test_table_a7_pooled_and_per_scale_counts_and_sign_agreement() -> None:
    """Pin of n and the sign agreement (covariance.fit_summary, the failed-run exclusion); the fit's other cells
    need the per-transition values, which are not printed. 44 transitions from the 11 nonfailed runs (6 x 4 at 3B, 5 x 4 at 7B): the failed Clip-Cov-7B's four are
    excluded. Signs agree in 42 (95.5%), 23 of 24 at 3B (95.8%), 19 of 20 at 7B (95.0%)."""
    rng = np.random.default_rng(1)
    cov: dict[str, list] = {c: [] for c in ("scale", "method", "step_from", "step_to", "predicted_delta",
                                            "observed_delta")}
    wrong = {("3b", "kl_cov", 3), ("7b", "gtpo", 0)}  # one sign disagreement per scale
    for scale, spe in (("3b", 4000), ("7b", 8000)):
        for m in SIX:
            for j, s in enumerate((spe // 4, spe // 2, 3 * spe // 4, spe)):
                p = -0.01 - 0.02 * rng.random()
                o = -p if (scale, m, j) in wrong else p * (0.9 + 0.2 * rng.random())
                for c, v in (("scale", scale), ("method", m), ("step_from", s - 50), ("step_to", s),
                             ("predicted_delta", p), ("observed_delta", o)):
                    cov[c].append(v)
    steps, counts = [0, 2000, 2400, 3600, 4000, 8000], [180, 383, 383, 304, 1, 1]  # Table A9's dense trace
    g = _greedy([("7b", "clip_cov", s, "math500", c, 500) for s, c in zip(steps, counts)])
    res = pipeline.run_aggregation(io.from_tables({"covariance": pa.table(cov), "greedy": g}), ST)
    md = tables.tableA7(res, ST).markdown()
    assert "| All nonfailed | 44 | 95.5% |" in md and "| 3B | 24 | 95.8% |" in md and "| 7B nonfailed | 20 | 95.0% |" in md
    assert res["covariance_fit"]["excluded_runs"] == ["7b/clip_cov"]


# Table A8: (budget, success mass %, failure mass %, gap pp, direction) over the twelve endpoints.
TABLE_A8 = [(0.05, 25.3, 94.6, 69.3), (0.025, 13.9, 94.2, 80.3), (0.01, 5.6, 86.6, 81.0)]


def test_table_a8_averages_twelve_endpoint_shares_to_the_printed_rows() -> None:
    """Pin of tableA8's averaging, gap and direction count (the per-endpoint shares are not printed, so the
    twelve are the printed mean plus a zero-sum spread), Clip-Cov-7B's step-8,000 proxy among them: the
    printed rows, Direction 12/12."""
    spread = np.arange(12.0) ** 2  # skewed, zero-sum: the mean is the printed value, the median is not
    spread = (spread - spread.mean()) / np.abs(spread - spread.mean()).max()
    runs = []
    for i, (scale, m) in enumerate([(s, m) for s in ("3b", "7b") for m in SIX]):
        r = {"scale": scale, "method": m, "failed": (scale, m) == ("7b", "clip_cov"), "extension": False,
             "q99_step": 8000}
        for b, sm, fm, _ in TABLE_A8:
            r[f"rank_share_success_{b:g}"] = (sm + 2.0 * spread[i]) / 100
            r[f"rank_share_failure_{b:g}"] = (fm - 1.5 * spread[i]) / 100
        runs.append(r)
    md = tables.tableA8({"runs": runs, "unavailable": {}}, ST).markdown()
    for b, sm, fm, gap in TABLE_A8:
        assert f"| {100 * b:.1f}% | {sm:.1f}% | {fm:.1f}% | {gap:.1f} pp | 12/12 |" in md


def test_table_a4_identity_n_c_from_the_harness_on_random_outcome_counts() -> None:
    """With K = 32 >= 15 every question has K_r >= 8 in at least one outcome, so the harness's n_c must be
    |Q_1| + |Q_0| - 200 = 2S + 2F - 200 (S, F coverage in percent of 200 questions), and each coverage a whole
    number of questions: the identity every printed A4 row obeys, here on counts the harness has not seen."""
    rng = np.random.default_rng(7)
    rows = [("3b", m, 0.0, 0.0, 0) for m in ("grpo", "dapo", "gtpo")]
    draws = {m: rng.integers(0, 33, size=200) for _, m, *_ in rows}
    t = _samples_for_coverage(rows, kinds_of=lambda row: list(draws[row[1]]))
    res = pipeline.run_aggregation(io.from_tables({"samples": t}), ST)
    for r in res["runs"]:
        s, f = 100 * r["coverage_success"], 100 * r["coverage_failure"]
        assert 2 * s == pytest.approx(round(2 * s)) and 2 * f == pytest.approx(round(2 * f))
        assert r["paired_n"] == round(2 * (s + f) - 200), r["method"]
        k1 = draws[r["method"]]
        assert r["paired_n"] == int(((k1 >= 8) & (32 - k1 >= 8)).sum())  # and it is the count of both-sided questions
    for _, _, s, f, n_c in TABLE_A4:  # the paper's rows obey it (data only: the pin is above)
        assert round(2 * (s + f - 100)) == n_c
