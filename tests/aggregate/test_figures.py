"""The figures as a reader meets them (issue 25): traces smoothed only when long enough, the base policy
drawn as a reference, the pass@k axis naming what was measured, labels clear of markers and of each other."""

from __future__ import annotations

import itertools

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
    assert "CMA(5)" in greedy_ax.get_title()
    figures._plt().close(fig)


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12, methods=("grpo", "dapo")))


@pytest.mark.parametrize("column,label", [("toy", "toy pass@4 (%)"), (None, "MATH 500 pass@4 (%)")])
def test_the_passk_axis_names_the_benchmark_the_table_measured(tables, column, label):
    """Through the pipeline: the passk table's own `benchmark` column names the axis (the toy world's is
    `toy`); a table without the column falls back to the configured benchmark (MATH500)."""
    t = dict(tables)
    if column is not None:
        t["passk"] = t["passk"].append_column("benchmark", pa.array([column] * t["passk"].num_rows))
    st = ST.replace(passk_benchmark="math500")
    res = run_aggregation(from_tables(t), st)
    assert {b for b, v in res["eval_inventory"].items() if "passk" in v} == {"toy" if column else "math500"}
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


def test_training_entropy_marks_its_points_and_shares_the_progress_axis_of_the_traces():
    """Issue 31: six objectives coincided without markers though the title said 'points as measured', and the x
    axis started at 0.25 where fig_traces starts at 0 under the same label."""
    tr = {"step": [1, 2, 3, 4], "entropy": [0.167, 0.167, 0.143, 0.142], "steps_per_epoch": 4}
    res = {"training_traces": {f"tiny/{m}": dict(tr) for m in ("grpo", "dapo", "gtpo")},
           **_traces_res([2, 4], {"grpo": [0.6, 0.7]}, base_acc=0.5)}
    fig = figures.draw_training_entropy(res, ST)
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert "points as measured" in ax.get_title()
    assert all(ln.get_marker() not in (None, "None", "") for ln in lines)
    assert len({ln.get_marker() for ln in lines}) == 3
    assert len({tuple(np.round(ln.get_xdata(), 9)) for ln in lines}) == 3   # set side by side: all three show
    traces = figures.draw_traces(res, ST)
    assert ax.get_xlim() == pytest.approx(traces.axes[1].get_xlim())   # one progress axis, from before 0
    assert ax.get_xlim()[0] < 0
    figures._plt().close(fig)
    figures._plt().close(traces)


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
    for lo, hi in (ax.get_xlim(), ax.get_ylim()):
        assert 0 <= lo < 100 and hi == 100
    assert ax.get_title() == "Mode retention vs pass@4" and "pass@4" in ax.get_xlabel()
    assert any(why in t.get_text() for t in ax.get_legend().get_texts())
    figures._plt().close(fig)
    assert undefined_reason([1.0, 2.0], [3.0, 4.0], ("a", "b")) == "2 run(s) with both values; it needs 3"
    assert undefined_reason([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], ("a", "b")) == "all b values tie, n = 3"
