"""End to end through the pipeline and renderers with inputs built from the paper's own numbers."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from aggregate import io, pipeline, tables
from aggregate.settings import AggregateSettings

ST = AggregateSettings(bootstrap_resamples=100)


def _greedy(rows: list[tuple[str, str, int, str, int, int]]) -> pa.Table:
    """rows of (scale, method, step, benchmark, correct, n) -> one row per question."""
    cols: dict[str, list] = {k: [] for k in ("scale", "method", "step", "benchmark", "question_id", "correct", "boxed",
                                             "n_tokens")}
    for scale, method, step, bench, c, n in rows:
        for i in range(n):
            for k, v in (("scale", scale), ("method", method), ("step", step), ("benchmark", bench),
                         ("question_id", f"{bench}-{i}"), ("correct", i < c), ("boxed", True), ("n_tokens", 500)):
                cols[k].append(v)
    return pa.table(cols)


# The paper's Table 1 accuracy cells and macro averages (%), copied as data: (scale, method, AIME'24,
# AIME'25, MATH 500, AMC'23, Minerva, Average). The benchmarks have 30, 30, 500, 40 and 40 questions.
PAPER_TABLE1 = [
    ("3b", "base", 13.3, 3.3, 48.6, 35.0, 15.0, 23.05), ("3b", "grpo", 3.3, 0.0, 63.8, 35.0, 20.0, 24.43),
    ("3b", "dapo", 10.0, 0.0, 64.4, 27.5, 20.0, 24.38), ("3b", "clip_cov", 10.0, 3.3, 65.4, 42.5, 17.5, 27.75),
    ("3b", "kl_cov", 3.3, 3.3, 62.6, 32.5, 15.0, 23.35), ("3b", "ep_grpo", 0.0, 0.0, 61.4, 37.5, 15.0, 22.78),
    ("3b", "gtpo", 6.7, 0.0, 61.0, 37.5, 15.0, 24.03), ("7b", "base", 10.0, 6.7, 36.0, 25.0, 20.0, 19.53),
    ("7b", "grpo", 10.0, 6.7, 71.8, 45.0, 25.0, 31.69), ("7b", "dapo", 13.3, 6.7, 77.2, 45.0, 25.0, 33.44),
    ("7b", "clip_cov", 6.7, 3.3, 72.8, 42.5, 17.5, 28.56), ("7b", "kl_cov", 16.7, 13.3, 68.6, 57.5, 22.5, 35.72),
    ("7b", "ep_grpo", 20.0, 6.7, 73.2, 37.5, 17.5, 30.97), ("7b", "gtpo", 16.7, 6.7, 71.0, 47.5, 15.0, 31.37),
]
SIZES = {"AIME24": 30, "AIME25": 30, "MATH500": 500, "AMC23": 40, "minerva_math": 40}


def test_table1_all_fourteen_macro_averages_from_unrounded_counts() -> None:
    """Every row: counts recovered from the printed cells, the macro average recomputed by the pipeline
    from the unrounded accuracies and rendered as the paper prints it. Nine of the fourteen averages
    differ from the mean of the rounded cells, so a renderer averaging its own rounded cells fails here."""
    rows = []
    for scale, method, *cells, _ in PAPER_TABLE1:
        for (bench, n), pct in zip(SIZES.items(), cells):
            rows.append((scale, method, 0 if method == "base" else 1000, bench, round(pct * n / 100), n))
    res = pipeline.run_aggregation(io.from_tables({"greedy": _greedy(rows)}), ST)
    runs = {(r["scale"], r["method"]): r for r in res["runs"]}
    md = re.sub(r"\*\*|</?u>", "", tables.table1(res, ST).markdown())   # the marks: next test
    naive_differs = 0
    for scale, method, *cells, average in PAPER_TABLE1:
        assert f"{runs[(scale, method)]['macro_average']:.2f}" == f"{average:.2f}", (scale, method)
        name = f"Base {scale.upper()}" if method == "base" else f"+ {tables.method_name(method)} ({scale.upper()})"
        assert f"| {name} | {' | '.join(f'{c:.1f}' for c in cells)} | {average:.2f} |" in md, name
        naive_differs += f"{sum(cells) / 5:.2f}" != f"{average:.2f}"
    assert naive_differs == 9


# The paper's Table 1 bold (best) and underlined (second-best) cells per scale and column, as its text reads them
# off the printed values: Clip-Cov leads 3B's average (27.75), KL-Cov 7B's (35.72), DAPO 7B's MATH 500 (77.2).
PAPER_MARKS = {("3b", "Average"): ({"clip_cov"}, {"grpo"}), ("7b", "Average"): ({"kl_cov"}, {"dapo"}),
               ("7b", "MATH 500"): ({"dapo"}, {"ep_grpo"}), ("3b", "MATH 500"): ({"clip_cov"}, {"dapo"}),
               ("3b", "AIME'25"): ({"clip_cov", "kl_cov"}, set()),   # two values: 3.3 best, 0.0 is also the lowest
               ("7b", "Minerva"): ({"grpo", "dapo"}, {"kl_cov"})}


def test_table1_marks_the_best_and_second_best_of_each_column_within_each_scale() -> None:
    """Bold and underline as the paper's caption says, on its own cells: per scale and column over the trained
    rows (the base is the reference, never marked), ties share a mark, markdown ** and <u>, LaTeX textbf and
    underline."""
    rows = []
    for scale, method, *cells, _ in PAPER_TABLE1:
        for (bench, n), pct in zip(SIZES.items(), cells):
            rows.append((scale, method, 0 if method == "base" else 1000, bench, round(pct * n / 100), n))
    res = pipeline.run_aggregation(io.from_tables({"greedy": _greedy(rows)}), ST)
    t = tables.table1(res, ST)
    col = {h: j for j, h in enumerate(t.header)}
    who = [(r["scale"], r["method"]) for r in res["runs"]]
    for (scale, name), (best, second) in PAPER_MARKS.items():
        j = col[name]
        got = {m: t.marks.get((i, j)) for i, (s, m) in enumerate(who) if s == scale}
        assert {m for m, k in got.items() if k == "best"} == best, (scale, name)
        assert {m for m, k in got.items() if k == "second"} == second, (scale, name)
        assert got["base"] is None
    md, tex = t.markdown(), t.latex()
    assert "| + Clip-Cov (3B) | **10.0** | **3.3** |" in md and "<u>24.43</u>" in md and "**35.72**" in md
    assert r"\textbf{27.75}" in tex and r"\underline{33.44}" in tex and "**" not in tex


def test_failure_detector_and_table_a9_from_dense_trace() -> None:
    steps = [0, 1000, 2400, 3600, 4000, 8000]
    counts = [180, 383, 383, 304, 1, 1]
    g = _greedy([("7b", "clip_cov", s, "math500", c, 500) for s, c in zip(steps, counts)]
                + [("7b", "grpo", s, "math500", c, 500) for s, c in zip(steps, [180, 300, 350, 359, 360, 370])])
    res = pipeline.run_aggregation(io.from_tables({"greedy": g}), ST)
    fd = res["failure_detector"]
    assert fd["7b/clip_cov"]["fired"] and not fd["7b/grpo"]["fired"]
    assert fd["7b/clip_cov"]["last_argmax_step"] == 2400 and fd["7b/clip_cov"]["onset_step"] == 4000
    md = tables.tableA9(res, ST).markdown()
    for step, acc in (("2,400", "76.6%"), ("3,600", "60.8%"), ("4,000", "0.2%"), ("8,000", "0.2%")):
        assert f"| Clip-Cov-7B | {step} | {acc} |" in md
    run = {r["method"]: r for r in res["runs"]}
    assert run["clip_cov"]["failed"] and run["clip_cov"]["table1_step"] == 3600  # last full step before the onset


def test_covariance_fit_through_pipeline_matches_the_worked_example() -> None:
    P = [-.020, -.012, -.030, .004, -.008, -.015]
    O = [-.018, -.014, -.027, -.001, -.009, -.016]
    rows: dict[str, list] = {k: [] for k in ("scale", "method", "step_from", "step_to", "predicted_delta",
                                             "observed_delta")}
    for i, (p, o) in enumerate(zip(P, O)):
        for j in range(3):  # three positions per transition; token-pooled means equal P and O
            d = (j - 1) * 0.001
            for k, v in (("scale", "3b"), ("method", "grpo"), ("step_from", 50 * i), ("step_to", 50 * i + 50),
                         ("predicted_delta", p + d), ("observed_delta", o - d)):
                rows[k].append(v)
    # a failed run's transitions are excluded
    g = _greedy([("3b", "kl_cov", 0, "math500", 200, 500), ("3b", "kl_cov", 50, "math500", 10, 500)])
    for k, v in (("scale", "3b"), ("method", "kl_cov"), ("step_from", 0), ("step_to", 50), ("predicted_delta", 1.0),
                 ("observed_delta", -1.0)):
        rows[k].append(v)
    res = pipeline.run_aggregation(io.from_tables({"covariance": pa.table(rows), "greedy": g}), ST)
    f = res["covariance_fit"]["all_nonfailed"]
    assert f["n"] == 6 and res["covariance_fit"]["excluded_runs"] == ["3b/kl_cov"]
    assert f["pearson"] == pytest.approx(0.995116534, abs=1e-9) and f["slope"] == pytest.approx(0.760488177, abs=1e-9)
    assert f["r2_identity"] == pytest.approx(0.885067479,
                                             abs=1e-9) and f["median_rel_error"] == pytest.approx(0.111111111, abs=1e-9)
    assert "| All nonfailed | 6 | 83.3% | 1.000 | 0.995 | 0.760 |" in tables.tableA7(res, ST).markdown()


def test_per_question_worked_example_through_the_samples_table() -> None:
    """The per-question worked example (docs/estimators.md#per-question-entropies) as a samples table (k_min 2): the
    pipeline's per-endpoint means equal the oracle."""
    toks = [[0.5, 0.1, 0.3], [0.2, 0.4], [0.6, 0, 0.3, 0.3], [1.2, 0.8, 1.0], [0.9, 1.1]]
    s = pa.table({"scale": ["x"] * 5, "method": ["base"] * 5, "step": [0] * 5, "question_id": ["q"] * 5,
                  "benchmark": ["b"] * 5,
                  "sample": list(range(5)), "reward": [1, 1, 1, 0, 0], "n_tokens": [len(t) for t in toks],
                  "logprob_sum": [-10.0, -12, -14, -30, -26], "token_entropy_mean": [float(np.mean(t)) for t in toks],
                  "truncated": [False] * 5, "process_valid": pa.nulls(5, pa.bool_()), "mode": pa.nulls(5, pa.string())})
    res = pipeline.run_aggregation(io.from_tables({"samples": s}), ST.replace(min_k_r=2))
    (e,) = res["endpoints"]
    assert e["seq_entropy_mean"] == pytest.approx(18.4) and e["token_entropy_mean"] == pytest.approx(0.58)
    assert e["success_entropy_mean"] == pytest.approx(0.30) and e["failure_entropy_mean"] == pytest.approx(1.00)
    assert e["seq_entropy_success_mean"] == pytest.approx(11.489174376, abs=1e-9)
    assert e["chain_rule_entropy_mean"] == pytest.approx(1.54) and e["max_decomposition_residual"] < 1e-12
    assert e["paired_ratio"] == pytest.approx(1.0 / 0.3) and e["paired_n"] == 1
