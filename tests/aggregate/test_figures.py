"""The figures as a reader meets them (issue 25): traces smoothed only when long enough, the base policy
drawn as a reference, the pass@k axis naming what was measured, labels clear of markers and of each other."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
import pytest

from aggregate import figures, figstyle
from aggregate.io import from_tables
from aggregate.pipeline import run_aggregation
from aggregate.settings import AggregateSettings
from aggregate.tables import method_name
from benchmarks import synth

ST = AggregateSettings(failure_benchmark="toy", smoothing_window=5, steps_per_epoch={}, bootstrap_resamples=50,
                       min_k_r=2, min_mode_m=2, pass_k=4, workers=1)


def _hand_cma(y: list[float], w: int) -> list[float]:
    """The centred moving average written out: the mean of the points within w // 2 on each side."""
    h = w // 2
    return [sum(y[max(0, i - h):i + h + 1]) / len(y[max(0, i - h):i + h + 1]) for i in range(len(y))]


def _lines(ax) -> dict[str, list]:
    return {ln.get_label(): ln for ln in ax.get_lines()}


def _traces_res(steps: list[int], acc: dict[str, list[float]], base_acc: float) -> dict:
    greedy = [{"scale": "tiny", "method": "base", "step": 0, "benchmark": "toy", "accuracy": base_acc}]
    eps = [{"scale": "tiny", "method": "base", "step": 0, "token_entropy_mean": 0.157}]
    for m, ys in acc.items():
        greedy += [{"scale": "tiny", "method": m, "step": s, "benchmark": "toy", "accuracy": y} for s, y in zip(steps, ys)]
        eps += [{"scale": "tiny", "method": m, "step": steps[-1], "token_entropy_mean": 0.13}]
    return {"endpoints": eps, "greedy": greedy}


@pytest.mark.parametrize("window", range(1, 10))
def test_the_smoothing_window_never_exceeds_the_points(window):
    for n in range(0, 25):
        w = figures.smoothing_window(n, window)
        assert w <= max(n, 1)
        assert w == (window if n >= window else 1)


def test_two_greedy_points_are_drawn_as_measured_from_the_base():
    """The demo's case: two dense points per run. No 5-point average (it drew flat lines); every line starts
    at the base policy's accuracy, which is also a labelled reference line, not a lone dot."""
    res = _traces_res([50, 100], {"grpo": [0.70, 0.797], "dapo": [0.72, 0.75]}, base_acc=0.578)
    fig = figures.draw_traces(res, ST)
    greedy_ax = fig.axes[1]
    lines = _lines(greedy_ax)
    assert list(lines["GRPO"].get_ydata()) == pytest.approx([57.8, 70.0, 79.7])
    assert list(lines["DAPO"].get_ydata()) == pytest.approx([57.8, 72.0, 75.0])
    assert list(lines["GRPO"].get_xdata())[1:] == pytest.approx([0.5, 1.0])
    # both start at the base point (0, 57.8): set side by side there, within 3% of the axis, so both show
    starts = [lines[m].get_xdata()[0] for m in ("GRPO", "DAPO")]
    assert starts[0] != starts[1] and all(abs(x) <= 0.03 + 1e-12 for x in starts)
    base = [ln for label, ln in lines.items() if label.startswith("Base")]
    assert len(base) == 1 and list(base[0].get_ydata()) == pytest.approx([57.8, 57.8])
    assert "57.8%" in base[0].get_label()
    assert "CMA" not in greedy_ax.get_title() and "too few to smooth" in greedy_ax.get_title()
    for label, ln in lines.items():
        if not label.startswith("Base") and not label.startswith("_"):
            assert len(set(np.round(ln.get_ydata(), 9))) > 1, f"{label} is drawn flat"
    entropy_base = [ln for label, ln in _lines(fig.axes[0]).items() if label.startswith("Base")]
    assert len(entropy_base) == 1 and list(entropy_base[0].get_ydata()) == pytest.approx([0.157, 0.157])
    figures._plt().close(fig)


def test_a_long_trace_is_smoothed_with_the_configured_window():
    ys = [0.60, 0.62, 0.58, 0.70, 0.66, 0.71, 0.75, 0.69, 0.80, 0.78]
    res = _traces_res(list(range(10, 101, 10)), {"grpo": ys}, base_acc=0.55)
    fig = figures.draw_traces(res, ST)
    greedy_ax = fig.axes[1]
    raw = [55.0] + [100 * y for y in ys]
    assert list(_lines(greedy_ax)["GRPO"].get_ydata()) == pytest.approx(_hand_cma(raw, 5))
    dots = [ln for ln in greedy_ax.get_lines() if ln.get_linestyle() == "None"]
    assert any(list(d.get_ydata()) == pytest.approx(raw) for d in dots), "the raw points are drawn too"
    assert "centred moving average of 5 points" in greedy_ax.get_title()
    figures._plt().close(fig)


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12, methods=("grpo", "dapo")))


@pytest.mark.parametrize("column,label", [("toy", "Toy sums (held out) pass@4 (%)"), ("toy_wide", "Toy wide sums (held out) pass@4 (%)"),
                                          (None, "MATH 500 pass@4 (%)")])
def test_the_passk_axis_names_the_benchmark_the_table_measured(tables, column, label):
    """Through the pipeline: the passk table's own `benchmark` column names the axis (the toy world's is
    `toy`); a table without the column falls back to the configured benchmark (MATH500)."""
    t = dict(tables)
    if column is not None:
        t["passk"] = t["passk"].append_column("benchmark", pa.array([column] * t["passk"].num_rows))
    st = ST.replace(passk_benchmark="math500")
    res = run_aggregation(from_tables(t), st)
    assert {b for b, v in res["eval_inventory"].items() if "passk" in v} == {column.replace("_", "") if column else "math500"}
    fig = figures.draw_retention(res, st)
    assert fig is not None and fig.axes[0].get_xlabel() == label
    figures._plt().close(fig)


def _box(bb):
    return (bb.x0, bb.y0, bb.x1, bb.y1)


def test_retention_labels_cover_no_marker_no_label_and_no_legend():
    """Eight runs bunched within a marker's width or two and one far away (so the bunch is small on the
    axes): each label is placed clear of every marker, every other label and the legend, inside the axes."""
    from matplotlib.text import Text

    pts = [("grpo", 95.1, 97.0), ("dapo", 95.6, 96.2), ("clip_cov", 94.8, 95.8), ("kl_cov", 95.3, 94.9),
           ("ep_grpo", 96.0, 97.5), ("gtpo", 94.4, 98.1), ("archer", 80.0, 80.0), ("grpo", 95.4, 96.6),
           ("dapo", 95.0, 96.3)]
    runs = [{"scale": "tiny", "method": m, "failed": False, "extension": False, "pass_at_4": x,
             "mode_retention": y} for m, x, y in pts]
    res = {"runs": runs, "correlations": {"tiny": {"spearman": 0.1, "n": 6}}, "eval_inventory": {"toy": {"passk": 32}}}
    fig = figures.draw_retention(res, ST)
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in ax.texts]
    assert sorted(t.get_text() for t in texts) == sorted(["GRPO", "DAPO", "Clip-Cov", "KL-Cov", "EP-GRPO", "GTPO",
                                                          "Archer", "GRPO", "DAPO"])
    centres = ax.transData.transform([(x, y) for _, x, y in pts])
    r = 3.5 * fig.dpi / 72  # the markers' radius (s = 49 pt^2: 7 pt across)
    markers = [(x - r, y - r, x + r, y + r) for x, y in centres]
    boxes = [_box(Text.get_window_extent(t, renderer)) for t in texts]
    frame = _box(ax.get_window_extent(renderer))
    legend = _box(ax.get_legend().get_window_extent(renderer))
    for b in boxes:
        assert frame[0] <= b[0] and b[2] <= frame[2] and frame[1] <= b[1] and b[3] <= frame[3]
        assert all(figstyle._overlap(b, m) == 0 for m in markers)
        assert figstyle._overlap(b, legend) == 0
    for a, b in itertools.combinations(boxes, 2):
        assert figstyle._overlap(a, b) == 0
    assert figstyle._overlap((0, 0, 2, 2), (1, 1, 3, 3)) == 1 and figstyle._overlap((0, 0, 1, 1), (2, 2, 3, 3)) == 0
    figures._plt().close(fig)


def test_series_that_coincide_are_all_visible():
    """Issue 31: GRPO, KL-Cov and Archer lay on one line (7 legend entries, about 4 visible lines). Each method
    has its own marker and line style, and points that coincide are set side by side."""
    same = [0.667, 0.667]
    res = _traces_res([50, 100], {"grpo": same, "kl_cov": same, "archer": same, "dapo": [0.6, 0.7]}, base_acc=0.583)
    fig = figures.draw_traces(res, ST)
    lines = {k: v for k, v in _lines(fig.axes[1]).items() if not k.startswith(("Base", "_"))}
    assert len({ln.get_marker() for ln in lines.values()}) == 4
    assert len({str(figstyle.style(m)["ls"]) for m in ("grpo", "kl_cov", "archer", "dapo")}) == 4
    for i in (1, 2):   # at both measured points the three coinciding series sit apart
        xs = sorted(lines[m].get_xdata()[i] for m in ("GRPO", "KL-Cov", "Archer"))
        assert xs[0] < xs[1] < xs[2] and xs[2] - xs[0] == pytest.approx(0.06)
        assert lines["DAPO"].get_xdata()[i] == pytest.approx(i / 2)   # a series apart from others is not moved
    assert "side by side" in fig.axes[1].get_title()
    lo, hi = fig.axes[1].get_ylim()
    assert 0 <= lo and hi <= 100
    figures._plt().close(fig)


def test_training_entropy_is_one_panel_per_run_over_the_base_sharing_the_progress_axis_of_the_traces():
    """Issue 40: seven smoothed lines overlapped, "CMA(5)" unexplained. Small multiples: one visible panel per
    run named in its title, each with its run's points marked, the base policy's reference (the first logged
    step) and the other runs in grey; one progress axis from before 0, as fig_traces."""
    tr = {"step": [1, 2, 3, 4], "entropy": [0.167, 0.167, 0.143, 0.142], "steps_per_epoch": 4}
    res = {"training_traces": {f"tiny/{m}": dict(tr) for m in ("grpo", "dapo", "gtpo")},
           **_traces_res([2, 4], {"grpo": [0.6, 0.7]}, base_acc=0.5)}
    fig = figures.draw_training_entropy(res, ST)
    panels = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["GRPO-tiny", "DAPO-tiny", "GTPO-tiny"]
    for ax in panels:
        coloured = [ln for ln in ax.get_lines() if ln.get_color() not in ("0.82", "grey")]
        assert len(coloured) == 1 and coloured[0].get_marker() not in (None, "None", "")   # as measured: marked
        base = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
        assert len(base) == 1 and list(base[0].get_ydata()) == pytest.approx([0.167, 0.167])
        assert len([ln for ln in ax.get_lines() if ln.get_color() == "0.82"]) == 2   # the other two runs
    assert "too few to smooth" in fig._suptitle.get_text()
    traces = figures.draw_traces(res, ST)
    assert panels[0].get_xlim() == pytest.approx(traces.axes[1].get_xlim())   # one progress axis, from before 0
    assert panels[0].get_xlim()[0] < 0
    figures._plt().close(fig)
    figures._plt().close(traces)


def _long_traces(methods, n=60) -> dict:
    rng = np.random.default_rng(1)
    return {f"tiny/{m}": {"steps_per_epoch": n, "step": list(range(1, n + 1)),
                          "entropy": list(0.2 * np.exp(-np.arange(n) / (10 + 5 * i)) + rng.normal(0, 0.005, n))}
            for i, m in enumerate(methods)}


# Abbreviations a figure may print: the objectives' and benchmarks' own names, units and the paper's symbols.
ALLOWED = {"GRPO", "DAPO", "KL", "EP", "GTPO", "MATH", "AIME", "AMC", "Eq", "ρ", "n"}


def _texts(fig) -> list[str]:
    out = [fig._suptitle.get_text()] if fig._suptitle else []
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    for leg in fig.legends:
        out += [t.get_text() for t in leg.get_texts()]
    return [s for s in out if s]


def _unexplained(texts: list[str]) -> set[str]:
    words = {w for s in texts for w in re.findall(r"\b[A-Z]{2,}\b", s)}
    return words - ALLOWED


def test_long_training_traces_explain_their_smoothing_and_every_line_has_a_name():
    methods = ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo", "archer")
    fig = figures.draw_training_entropy({"training_traces": _long_traces(methods)}, ST)
    panels = [a for a in fig.axes if a.get_visible()]
    assert len(panels) == 7 and len(fig.axes) == 8   # 2 rows of 4, the eighth hidden
    assert panels[-1].get_title() == "Archer-tiny (extension)"
    sup = fig._suptitle.get_text()
    assert "centred moving average over 5 logged steps" in sup and "CMA" not in " ".join(_texts(fig))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("each logged step" in s for s in labels) and any("moving average (5 steps)" in s for s in labels)
    assert any("base policy" in s for s in labels) and any("other runs" in s for s in labels)
    for ax in panels:   # every point of every panel inside the shared limits, with margin
        lo, hi = ax.get_ylim()
        ys = np.concatenate([ln.get_ydata() for ln in ax.get_lines()])
        assert lo < ys.min() and ys.max() < hi
    assert not _unexplained(_texts(fig)), _unexplained(_texts(fig))
    figures._plt().close(fig)


def test_retention_every_point_and_the_base_line_are_inside_the_frame_and_labelled():
    """Issue 40: GRPO's 100.2% was cut in half by the top edge and unlabelled, the base line lay under the edge,
    n = 6 was unexplained (Archer left out), the axis said "toywide"."""
    pts = {"grpo": (96.9, 100.2), "dapo": (93.8, 97.0), "clip_cov": (96.9, 98.5), "kl_cov": (90.6, 99.1),
           "ep_grpo": (93.8, 96.2), "gtpo": (87.5, 95.0), "archer": (93.8, 99.0)}
    runs = [{"scale": "tiny", "method": m, "failed": False, "extension": m == "archer", "pass_at_4": x,
             "mode_retention": y} for m, (x, y) in pts.items()]
    res = {"runs": runs, "correlations": {"tiny": {"spearman": 0.41, "n": 6}}, "eval_inventory": {"toywide": {"passk": 32}}}
    fig = figures.draw_retention(res, ST)
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for m, (x, y) in pts.items():
        if m != "archer":
            assert x0 + 0.3 < x < x1 - 0.3 and y0 + 0.3 < y < y1 - 0.3, m   # whole markers, with margin
    assert y0 + 0.3 < 100 < y1 - 0.3   # the base line is visible, off the frame
    assert sorted(t.get_text() for t in ax.texts) == sorted(tables_name(m) for m in pts if m != "archer")
    legend = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert "n = 6 runs" in legend and "Archer-tiny (extension)" in legend and "Base policy: 100%" in legend
    assert ax.get_xlabel() == "Toy wide sums (held out) pass@4 (%)"
    assert not _unexplained(_texts(fig))
    fig.canvas.draw()
    frame = ax.get_window_extent()
    for t in ax.texts:   # every label inside the axes
        b = t.get_window_extent()
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1
    figures._plt().close(fig)


def tables_name(m: str) -> str:
    return method_name(m)


def test_covariance_points_are_traced_to_their_run():
    """Issue 40: the fit's points could not be traced to a run. One legend entry per run (method, scale and its
    transitions), its own colour and marker; a failed run hollow; every point inside the limits with margin."""
    rng = np.random.default_rng(0)
    trans = [{"scale": "tiny", "method": m, "predicted": float(p), "observed": float(0.9 * p),
              "excluded": m == "clip_cov"} for m in ("grpo", "dapo", "clip_cov") for p in rng.normal(0, 0.01, 2)]
    res = {"transitions": trans, "covariance_fit": {"all_nonfailed": {"slope": 0.9, "intercept": 0.0, "pearson": 1.0,
                                                                      "n": 4}}}
    fig = figures.draw_covfit(res, ST)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["GRPO-tiny (2)", "DAPO-tiny (2)", "Clip-Cov-tiny (2): failed run, excluded from the fit"]
    cols = ax.collections
    assert len(cols) == 3 and len({tuple(np.round(c.get_edgecolor()[0], 3)) for c in cols}) == 3
    assert len(cols[2].get_facecolor()) == 0 or cols[2].get_facecolor()[0][3] == 0   # hollow
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for tr in trans:
        assert x0 < tr["predicted"] < x1 and y0 < tr["observed"] < y1
    assert all(not ln.get_label().startswith("_") for ln in ax.get_lines())   # every line named
    assert not _unexplained(_texts(fig))
    figures._plt().close(fig)


def test_retention_runs_at_one_point_share_a_label_within_0_100_and_an_undefined_rho_says_why():
    """Issue 31: six runs at (100, 100) had six labels stacked on the marker, axes 94-106% and 'Spearman –'
    with no reason; the title said pass@k where the axis said pass@4."""
    from aggregate.pipeline import undefined_reason

    methods = ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo")
    runs = [{"scale": "tiny", "method": m, "failed": False, "extension": False, "pass_at_4": 100.0,
             "mode_retention": 100.0} for m in methods]
    why = undefined_reason([100.0] * 6, [100.0] * 6, ("mode retention", "pass@4"))
    assert why == "all mode retention values tie and all pass@4 values tie, n = 6"
    res = {"runs": runs, "correlations": {"tiny": {"spearman": float("nan"), "n": 6, "undefined": why}},
           "eval_inventory": {"toy": {"passk": 24}}}
    fig = figures.draw_retention(res, ST)
    ax = fig.axes[0]
    assert len(ax.texts) == 1 and all(method_name(m) in ax.texts[0].get_text() for m in methods)
    for lo, hi in (ax.get_xlim(), ax.get_ylim()):   # the shared point is inside the frame, not on its edge
        assert lo < 100 < hi and hi - 100 >= 0.4
    assert ax.get_title() == "Mode retention vs pass@4" and "pass@4" in ax.get_xlabel()
    assert any(why in t.get_text() for t in ax.get_legend().get_texts())
    figures._plt().close(fig)
    assert undefined_reason([1.0, 2.0], [3.0, 4.0], ("a", "b")) == "2 run(s) with both values; it needs 3"
    assert undefined_reason([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], ("a", "b")) == "all b values tie, n = 3"
