"""Paper figures (matplotlib, Agg backend) as PNG and PDF: entropy and accuracy traces over
normalised progress (Figures 1/3), reward-stratified ratios with intervals (Figures 4/5), the
covariance fit against the identity line (Figure 6), mode retention against pass@k (RQ3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from rcea.store import atomic_write

from aggregate.figstyle import (_finite, dodge_note, dodge_traces, percent_axis, percent_limits, place_labels,
                                progress_axis, style)


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
        # no creation date in the PDF: a rerun on the same tables writes the same bytes
        meta = {"CreationDate": None} if ext == "pdf" else None
        atomic_write(target, lambda tmp, ext=ext, meta=meta: fig.savefig(tmp, format=ext, dpi=110, bbox_inches="tight",
                                                                         metadata=meta))
        written.append(target.name)
    _plt().close(fig)
    return written


def smoothing_window(n_points: int, window: int) -> int:
    """The centred moving-average window a trace of n_points gets: the configured window when the trace has at
    least that many points, else 1 (no smoothing: a 5-point average over 2 points draws a flat line)."""
    return window if window > 1 and n_points >= window else 1


def _positions(series: dict[str, tuple[np.ndarray, np.ndarray]], window: int = 1) -> tuple[float, dict]:
    """The end of the progress axis over `series`, and the x each point is drawn at: coinciding points set side
    by side (`dodge_traces`) when every trace is drawn as measured (none long enough for a CMA(`window`))."""
    xmax = max([float(x.max()) for x, _ in series.values() if x.size] or [1.0])
    if all(smoothing_window(len(y), window) == 1 for _, y in series.values()):
        return xmax, dodge_traces(series, xmax)
    return xmax, {m: x for m, (x, _) in series.items()}


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
        xmax, dodged = _positions(ent)
        for m in methods:
            ax.plot(dodged[m], ent[m][1], ms=5, mfc="none", label=method_name(m), **style(m))
        progress_axis(ax, xmax)
        ax.set(title=f"{scale_name(sc)}: probe token entropy (milestones){dodge_note(ent, dodged)}",
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
        xmax, dodged = _positions(acc, st.smoothing_window)
        for m, (x, y) in acc.items():
            line, w = _trace_line(ax, dodged[m], y, st.smoothing_window, label=method_name(m), **style(m))
            windows.add(w)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe, color=line.get_color(), ls="--", lw=1)
        progress_axis(ax, xmax)
        percent_axis(ax, [v for _, y in acc.values() for v in y] + [100 * g[1] for g in g_base])
        name = BENCH_NAMES.get(bench, bench)
        ax.set(title=f"{scale_name(sc)}: greedy accuracy, {name}\n({_smoothing_note(windows)}"
                     f"{dodge_note(acc, dodged, inline=True)})",
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
    percent_limits(ax, xs, "x")
    percent_limits(ax, ys, "y")
    ax.set(xlabel=passk_axis_label(res, st), ylabel="mode retention (%)",
           title=f"Mode retention vs pass@{st.pass_k}")
    ax.legend(fontsize=7, loc="lower left")
    place_labels(ax, xs, ys, texts)
    return fig


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
        xmax, dodged = _positions(series, st.smoothing_window)
        for m, (x, y) in series.items():
            w = smoothing_window(len(y), st.smoothing_window)
            windows.add(w)
            sty = style(m)
            if w > 1:   # long traces: thin raw line, thick smoothed line (markers would hide the trace)
                ax.plot(x, y, color=sty["color"], alpha=0.25, lw=0.6)
                ax.plot(x, centered_moving_average(y, w), color=sty["color"], ls=sty["ls"], label=method_name(m))
            else:       # as measured: every point marked
                ax.plot(dodged[m], y, ms=5, mfc="none", label=method_name(m), **sty)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe[m], color=sty["color"], ls="--", lw=1)
        progress_axis(ax, xmax)   # from 0, as fig_traces (the base policy is step 0; the first logged step is 1)
        note = _smoothing_note(windows).replace("dots raw, line", "thin: raw, thick:") \
            + dodge_note(series, dodged, inline=True)
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
