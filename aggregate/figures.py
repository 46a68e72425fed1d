"""Paper figures (matplotlib, Agg backend) as PNG and PDF: entropy and accuracy traces over
normalised progress (Figures 1/3), reward-stratified ratios with intervals (Figures 4/5), the
covariance fit against the identity line (Figure 6), mode retention against pass@k (RQ3)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from rcea.store import atomic_write


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, out_dir: Path, stem: str) -> list[str]:
    """Atomic PNG + PDF writes with the caller's umask (rcea.store.atomic_write)."""
    written = []
    for ext in ("png", "pdf"):
        target = out_dir / f"{stem}.{ext}"
        atomic_write(target, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=110, bbox_inches="tight"))
        written.append(target.name)
    _plt().close(fig)
    return written


def _color(method: str) -> str:
    """One colour per method across every panel and figure."""
    from aggregate.pipeline import method_rank

    return f"C{method_rank(method)[0] % 10}"


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))


def _style(method: str) -> dict:
    """Colour, marker and line style of a method, the same in every figure: series that coincide stay
    distinguishable by their markers and dashes."""
    from aggregate.pipeline import method_rank

    r = method_rank(method)[0]
    return {"color": _color(method), "marker": _MARKERS[r % len(_MARKERS)],
            "ls": _LINESTYLES[r % len(_LINESTYLES)]}


def dodge(series: dict[str, tuple[np.ndarray, np.ndarray]], width: float, tol: float) -> dict[str, np.ndarray]:
    """x positions that keep coinciding points apart: at each x, the series whose y values agree within `tol`
    are spread sideways over `width` (in order of the series), the others keep their x. Visual only."""
    out = {k: np.asarray(x, float).copy() for k, (x, _) in series.items()}
    names = list(series)
    xs = sorted({float(v) for x, _ in series.values() for v in np.asarray(x, float)})
    for xv in xs:
        here = [(k, i) for k in names for i, v in enumerate(np.asarray(series[k][0], float)) if v == xv]
        groups: list[list[tuple[str, int]]] = []
        for k, i in here:
            y = float(series[k][1][i])
            for g in groups:
                if abs(float(series[g[0][0]][1][g[0][1]]) - y) <= tol:
                    g.append((k, i))
                    break
            else:
                groups.append([(k, i)])
        for g in groups:
            if len(g) > 1:
                step = width / (len(g) - 1)
                for j, (k, i) in enumerate(g):
                    out[k][i] = xv - width / 2 + j * step
    return out


def _progress_axis(ax, xmax: float) -> None:
    """The normalised-progress axis of every trace figure: from 0 (the base policy) to the end of the run."""
    end = max(1.0, float(xmax))
    ax.set_xlim(-0.05 * end, 1.05 * end)


def method_label(method: str) -> str:
    from aggregate.tables import method_name

    return method_name(method)


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def smoothing_window(n_points: int, window: int) -> int:
    """The centred moving-average window a trace of n_points gets: the configured window when the trace has at
    least that many points, else 1 (no smoothing: a 5-point average over 2 points draws a flat line)."""
    return window if window > 1 and n_points >= window else 1


def _trace_line(ax, x, y, window: int, **kw):
    """Raw points, plus their CMA line when the trace is long enough (else the points joined as measured)."""
    from aggregate.evals import centered_moving_average

    w = smoothing_window(len(y), window)
    if w > 1:
        marker = kw.pop("marker", ".")
        line, = ax.plot(x, centered_moving_average(y, w), **kw)
        ax.plot(x, y, marker, ls="none", ms=3, color=line.get_color(), alpha=0.4)
    else:
        line, = ax.plot(x, y, ms=5, mfc="none", **kw)
    return line, w


def _smoothing_note(windows: set[int]) -> str:
    used = sorted(w for w in windows if w > 1)
    if not used:
        return "points as measured: too few to smooth"
    return f"dots raw, line CMA({used[0]})" + ("" if 1 not in windows else "; short traces unsmoothed")


def _dodged(series: dict[str, tuple[np.ndarray, np.ndarray]], xmax: float) -> dict[str, np.ndarray]:
    """`dodge` as the trace figures use it: over 6% of the progress axis, for values within 1% of their span
    (closer than a marker)."""
    ys = np.concatenate([np.asarray(y, float) for _, y in series.values()]) if series else np.zeros(0)
    span = float(np.ptp(ys)) if ys.size else 0.0
    return dodge(series, 0.06 * max(1.0, xmax), 0.01 * span if span > 0 else 1e-12)


def _dodge_note(series: dict, dodged: dict, inline: bool = False) -> str:
    moved = any(np.any(dodged[k] != np.asarray(x, float)) for k, (x, _) in series.items())
    if not moved:
        return ""
    return "; coinciding points set side by side" if inline else "\n(coinciding points set side by side)"


def _percent_axis(ax, values: list[float], pad: float = 5.0) -> None:
    """A percentage axis that shows only values a percentage can take: [0, 100], around the data."""
    vals = [v for v in values if _finite(v)]
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, 2 * pad)
    ax.set_ylim(max(0.0, lo - 0.1 * span), min(100.0, hi + 0.1 * span) if hi < 100 else 100.0)
    for c in ax.collections + ax.lines:
        c.set_clip_on(False)   # a point at 0% or 100% sits on the frame, drawn whole


def draw_traces(res: dict, st: AggregateSettings):
    """Probe token entropy (macro) and greedy accuracy on the trace benchmark vs normalised progress; the
    base policy is every run's step 0, drawn as the start of each line and as a dotted reference line."""
    from aggregate.evaltables import canonical_benchmark
    from aggregate.pipeline import method_rank, steps_per_epoch
    from aggregate.tables import BENCH_NAMES, method_name, scale_name

    eps = res.get("endpoints", [])
    bench = canonical_benchmark(st.failure_benchmark)
    greedy = [g for g in res.get("greedy", []) if g["benchmark"] == bench]
    scales = sorted({e["scale"] for e in eps} | {g["scale"] for g in greedy})
    if not scales:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, len(scales), figsize=(5.5 * len(scales), 7), squeeze=False)
    for j, sc in enumerate(scales):
        steps_all = [e["step"] for e in eps if e["scale"] == sc] + [g["step"] for g in greedy if g["scale"] == sc]
        spe = steps_per_epoch(sc, st, max(steps_all) if steps_all else 1)
        base = [e for e in eps if e["scale"] == sc and e["method"] == BASE_METHOD]
        methods = sorted({e["method"] for e in eps if e["scale"] == sc and e["method"] != BASE_METHOD},
                         key=method_rank)
        ax = axes[0, j]
        if base:
            ax.axhline(base[0]["token_entropy_mean"], color="grey", ls=":", lw=1,
                       label=f"Base (step 0): {base[0]['token_entropy_mean']:.3f}")
        ent = {}
        for m in methods:
            pts = sorted(([(0, base[0]["token_entropy_mean"])] if base else [])
                         + [(e["step"], e["token_entropy_mean"]) for e in eps if e["scale"] == sc and e["method"] == m])
            ent[m] = (np.array([p[0] / spe for p in pts]), np.array([p[1] for p in pts]))
        xmax = max([float(x.max()) for x, _ in ent.values() if x.size] or [1.0])
        dodged = _dodged(ent, xmax)
        for m in methods:
            ax.plot(dodged[m], ent[m][1], ms=5, mfc="none", label=method_name(m), **_style(m))
        _progress_axis(ax, xmax)
        ax.set(title=f"{scale_name(sc)}: probe token entropy (milestones){_dodge_note(ent, dodged)}",
               xlabel="normalised progress", ylabel="mean token entropy (nats)")
        ax = axes[1, j]
        g_base = sorted((g["step"], g["accuracy"]) for g in greedy if g["scale"] == sc and g["method"] == BASE_METHOD)
        if g_base:
            ax.axhline(100 * g_base[0][1], color="grey", ls=":", lw=1, label=f"Base (step 0): {100 * g_base[0][1]:.1f}%")
        windows = set()
        acc = {}
        for m in sorted({g["method"] for g in greedy if g["scale"] == sc and g["method"] != BASE_METHOD},
                        key=method_rank):
            tr = sorted((g["step"], g["accuracy"]) for g in greedy if g["scale"] == sc and g["method"] == m)
            if g_base and tr[0][0] > 0:
                tr = [(0, g_base[0][1]), *tr]  # every run starts from the base policy
            acc[m] = (np.array([p[0] for p in tr]) / spe, 100 * np.array([p[1] for p in tr]))
        xmax = max([float(x.max()) for x, _ in acc.values() if x.size] or [1.0])
        dodged = _dodged(acc, xmax) if all(smoothing_window(len(y), st.smoothing_window) == 1
                                           for _, y in acc.values()) else {m: x for m, (x, _) in acc.items()}
        for m, (x, y) in acc.items():
            line, w = _trace_line(ax, dodged[m], y, st.smoothing_window, label=method_name(m), **_style(m))
            windows.add(w)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe, color=line.get_color(), ls="--", lw=1)
        _progress_axis(ax, xmax)
        _percent_axis(ax, [v for _, y in acc.values() for v in y] + [100 * g[1] for g in g_base])
        name = BENCH_NAMES.get(bench, bench)
        ax.set(title=f"{scale_name(sc)}: greedy accuracy, {name}\n({_smoothing_note(windows)}"
                     f"{_dodge_note(acc, dodged, inline=True)})",
               xlabel="normalised progress", ylabel="accuracy (%)")
        for a in axes[:, j]:
            if a.get_legend_handles_labels()[0]:
                a.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def draw_ratios(res: dict, st: AggregateSettings):
    """Broad and paired failed-to-success ratios with bootstrap intervals per reported endpoint."""
    from aggregate.tables import method_name, scale_name

    runs = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and _finite(r.get("broad_ratio"))]
    if not runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 0.7 * len(runs) + 2), 4))
    x = np.arange(len(runs))
    ax.scatter(x - 0.12, [r["broad_ratio"] for r in runs], marker="s", facecolors="none", edgecolors="0.35",
               label="broad (all failed / all successful)")
    paired = np.array([r.get("paired_ratio", np.nan) for r in runs], float)
    ci = np.array([r.get("paired_ci") or [np.nan, np.nan] for r in runs], float)
    err = np.vstack([paired - ci[:, 0], ci[:, 1] - paired])
    ax.errorbar(x + 0.12, paired, yerr=np.where(np.isfinite(err), err, 0), fmt="o", color="C0", capsize=3,
                label="paired per question [95% CI]")
    ax.axhline(1.0, color="grey", lw=1, ls=":", label="1 = no difference")
    ticks = [f"{method_name(r['method'])}" + ("*" if r.get("extension") else "") + ("†" if r.get("failed") else "")
             + f"\n{scale_name(r['scale'])}" for r in runs]
    ax.set_xticks(x, ticks, fontsize=7)
    notes = (["† failed run (its last endpoint before the onset)"] if any(r.get("failed") for r in runs) else []) \
        + (["* extension, not one of the paper's objectives"] if any(r.get("extension") for r in runs) else [])
    ax.set(ylabel="failed / successful token entropy", title="Reward-stratified entropy ratios")
    if notes:
        ax.set_xlabel("; ".join(notes), fontsize=7)
    ax.legend(fontsize=7, loc="best")
    return fig


def draw_covfit(res: dict, st: AggregateSettings):
    """Observed vs predicted entropy change per transition, identity line, failed runs hollow."""
    from aggregate.tables import scale_name

    tr = res.get("transitions", [])
    if not tr:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for i, sc in enumerate(sorted({t["scale"] for t in tr})):
        for excl in (False, True):
            pts = [(t["predicted"], t["observed"]) for t in tr if t["scale"] == sc and t["excluded"] == excl]
            if pts:
                p = np.array(pts)
                label = f"{scale_name(sc)}" + (" (failed run, excluded from the fit)" if excl else "")
                ax.scatter(p[:, 0], p[:, 1], label=label, facecolors="none" if excl else f"C{i}",
                           edgecolors=f"C{i}")
    allv = np.array([[t["predicted"], t["observed"]] for t in tr])
    lo, hi = float(allv.min()), float(allv.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="identity")
    f = res.get("covariance_fit", {}).get("all_nonfailed", {})
    if _finite(f.get("slope")):
        ax.plot([lo, hi], [f["intercept"] + f["slope"] * lo, f["intercept"] + f["slope"] * hi], "r-", lw=1,
                label=f"OLS fit: slope {f['slope']:.3f}, r {f['pearson']:.3f}" + (f", n = {f['n']}" if "n" in f else ""))
    ax.set(xlabel="predicted ΔH (covariance, Eq. 10)", ylabel="observed ΔH", title="Exact covariance fit")
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):  # at most 6 ticks: long labels such as -0.025 must not run together
        axis.set_major_locator(MaxNLocator(nbins=5))
    ax.legend(fontsize=7)
    return fig


# Label offsets (points) tried in order around a marker: right, left, above, below, the diagonals, then
# the same directions further out (joined to the marker by a thin leader line).
_OFFSETS = [(dx * r, dy * r) for r in (1, 2, 3.2) for dx, dy in
            ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))]


def _overlap(a, b) -> float:
    """Overlap area of two display-space boxes (x0, y0, x1, y1)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(ax, xs, ys, texts, marker_pt: float = 7.0, fontsize: float = 6.5) -> list:
    """Annotate (x, y) points with texts placed so that no label covers a marker, another label or the legend,
    or leaves the axes, where such a place exists among _OFFSETS (else the least-overlapping one). Returns
    the annotations (tests read their boxes)."""
    from matplotlib.text import Text

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0
    pts = ax.transData.transform(np.column_stack([xs, ys]))
    r = marker_pt / 2 * px + 1
    taken = [(x - r, y - r, x + r, y + r) for x, y in pts]
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    if legend is not None:
        lb = legend.get_window_extent(renderer)
        taken.append((lb.x0, lb.y0, lb.x1, lb.y1))
    placed = []
    base = 5.0
    for xd, yd, text in zip(xs, ys, texts):
        best = None
        for dx, dy in _OFFSETS:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            far = abs(dx) > 1 or abs(dy) > 1
            ann = ax.annotate(text, (xd, yd), xytext=(dx * base, dy * base),
                              textcoords="offset points", ha=ha, va=va, fontsize=fontsize,
                              arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4", "shrinkA": 0,
                                          "shrinkB": marker_pt / 2} if far else None)
            ann.update_positions(renderer)
            bb = Text.get_window_extent(ann, renderer)  # the text alone, not its leader line
            box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
            cost = sum(_overlap(box, t) for t in taken)
            outside = (bb.x0 < frame.x0) or (bb.x1 > frame.x1) or (bb.y0 < frame.y0) or (bb.y1 > frame.y1)
            cost += 1e6 if outside else 0.0
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, ann, box)
            else:
                ann.remove()
            if cost == 0:
                break
        placed.append(best[1])
        taken.append(best[2])
    return placed


def passk_axis_label(res: dict, st: AggregateSettings) -> str:
    """The pass@k axis names the benchmark the passk table measured (its `benchmark` column; the
    configured one when the table has none) and the k the aggregation used."""
    from aggregate.evaltables import canonical_benchmark
    from aggregate.tables import BENCH_NAMES

    inv = res.get("eval_inventory") or {}
    benches = sorted(b for b, v in inv.items() if "passk" in v) or [canonical_benchmark(st.passk_benchmark)]
    return f"{' + '.join(BENCH_NAMES.get(b, b) for b in benches)} pass@{st.pass_k} (%)"


def draw_retention(res: dict, st: AggregateSettings):
    """Mode retention (%) against pass@k (%) per trained nonfailed run of the paper's objectives, one colour
    per scale; the base policy's retention (100% by construction) as a reference line."""
    from aggregate.tables import method_name, scale_name

    key = f"pass_at_{st.pass_k}"
    runs = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and not r.get("failed")
            and not r.get("extension") and _finite(r.get("mode_retention")) and _finite(r.get(key))]
    if not runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.axhline(100.0, color="grey", ls=":", lw=1, label="Base (100% by construction)")
    xs, ys, texts = [], [], []
    for i, sc in enumerate(sorted({r["scale"] for r in runs})):
        sub = [r for r in runs if r["scale"] == sc]
        c = res.get("correlations", {}).get(sc, {})
        rho = c.get("spearman")
        lab = f"{scale_name(sc)}: " + (f"ρ_s = {rho:.2f}, n = {c.get('n', len(sub))}" if _finite(rho)
                                       else f"ρ_s undefined:\n{c.get('undefined') or 'too few runs'}")
        ax.scatter([r[key] for r in sub], [r["mode_retention"] for r in sub], label=lab, s=49, zorder=3,
                   color=f"C{i}", clip_on=False)
        at: dict[tuple[float, float], list[str]] = {}   # runs at one point share one label
        for r in sub:
            at.setdefault((r[key], r["mode_retention"]), []).append(method_name(r["method"]))
        for (x, y), names in at.items():
            xs.append(x)
            ys.append(y)
            texts.append(", ".join(names) if len(names) <= 2 else
                         f"{len(names)} runs:\n" + "\n".join(", ".join(names[k:k + 3]) for k in range(0, len(names), 3)))
    _percent_limits(ax, xs, "x")
    _percent_limits(ax, ys, "y")
    ax.set(xlabel=passk_axis_label(res, st), ylabel="mode retention (%)",
           title=f"Mode retention vs pass@{st.pass_k}")
    ax.legend(fontsize=7, loc="lower left")
    place_labels(ax, xs, ys, texts)
    return fig


def _percent_limits(ax, values: list[float], axis: str) -> None:
    """Limits of a percentage axis around `values`, never past 0 or 100 (points on 100 sit on the frame)."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, 20.0)
    limits = (max(0.0, lo - 0.2 * span), min(100.0, hi + 0.2 * span))
    (ax.set_xlim if axis == "x" else ax.set_ylim)(*limits)


def draw_training_entropy(res: dict, st: AggregateSettings):
    """Training token entropy (steps.jsonl) over the whole epoch per run, raw and CMA-smoothed (visual only);
    a failed run's onset marked (Table A3: complete trace, failure marked)."""
    from aggregate.evals import centered_moving_average
    from aggregate.pipeline import method_rank
    from aggregate.tables import method_name, scale_name

    traces = res.get("training_traces") or {}
    runs = [(k.split("/", 1), tr) for k, tr in traces.items() if any(_finite(e) for e in tr["entropy"])]
    scales = sorted({sc for (sc, _), _ in runs})
    if not scales:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(scales), figsize=(6.5 * len(scales), 3.8), squeeze=False)
    for j, sc in enumerate(scales):
        ax = axes[0, j]
        windows = set()
        series, spe = {}, {}
        for (s, m), tr in sorted(((r, tr) for r, tr in runs if r[0] == sc), key=lambda x: method_rank(x[0][1])):
            pts = [(st_, e) for st_, e in zip(tr["step"], tr["entropy"]) if _finite(e)]
            series[m] = (np.array([p[0] for p in pts]) / tr["steps_per_epoch"], np.array([p[1] for p in pts]))
            spe[m] = tr["steps_per_epoch"]
        xmax = max([float(x.max()) for x, _ in series.values() if x.size] or [1.0])
        short = all(smoothing_window(len(y), st.smoothing_window) == 1 for _, y in series.values())
        dodged = _dodged(series, xmax) if short else {m: x for m, (x, _) in series.items()}
        for m, (x, y) in series.items():
            w = smoothing_window(len(y), st.smoothing_window)
            windows.add(w)
            sty = _style(m)
            if w > 1:   # long traces: thin raw line, thick smoothed line (markers would hide the trace)
                ax.plot(x, y, color=sty["color"], alpha=0.25, lw=0.6)
                ax.plot(x, centered_moving_average(y, w), color=sty["color"], ls=sty["ls"], label=method_name(m))
            else:       # as measured: every point marked
                ax.plot(dodged[m], y, ms=5, mfc="none", label=method_name(m), **sty)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe[m], color=sty["color"], ls="--", lw=1)
        _progress_axis(ax, xmax)   # from 0, as fig_traces (the base policy is step 0; the first logged step is 1)
        note = _smoothing_note(windows).replace("dots raw, line", "thin: raw, thick:") \
            + _dodge_note(series, dodged, inline=True)
        ax.set(title=f"{scale_name(sc)}: training entropy (steps.jsonl)\n({note})", xlabel="normalised progress",
               ylabel="mean token entropy (nats)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


FIGURES = {"fig_traces": draw_traces, "fig_training_entropy": draw_training_entropy, "fig_reward_ratios": draw_ratios,
           "fig_covariance_fit": draw_covfit, "fig_retention_vs_passk": draw_retention}


def build_figures(res: dict, st: AggregateSettings, out: Path) -> dict[str, list[str]]:
    """Render every figure whose inputs exist; returns name -> files written (empty: not drawn). A figure not
    drawn this time loses the files an earlier aggregation drew (they would pass for current)."""
    written = {}
    for name, draw in FIGURES.items():
        fig = draw(res, st)
        written[name] = save(fig, out, name) if fig is not None else []
    remove_stale(out, {f for files in written.values() for f in files})
    return written


def remove_stale(out: Path, keep: set[str]) -> list[str]:
    """Remove the figure files (fig_*.png / .pdf) in `out` that are not in `keep`; returns their names."""
    gone = []
    for p in sorted(out.glob("fig_*")) if out.is_dir() else []:
        if p.suffix in (".png", ".pdf") and p.name not in keep:
            p.unlink(missing_ok=True)
            gone.append(p.name)
    return gone
