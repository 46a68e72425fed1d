"""Paper figures (matplotlib, Agg backend) as PNG and PDF: entropy and accuracy traces over
normalised progress (Figures 1/3), reward-stratified ratios with intervals (Figures 4/5), the
covariance fit against the identity line (Figure 6), mode retention against pass@k (RQ3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from rcea.store import atomic_write

from aggregate.figstyle import (_finite, dodge_note, dodge_traces, percent_axis, place_labels,
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
    by side (`dodge_traces`) when every trace is drawn as measured (none long enough for a centred moving average of `window` points)."""
    xmax = max([float(x.max()) for x, _ in series.values() if x.size] or [1.0])
    if all(smoothing_window(len(y), window) == 1 for _, y in series.values()):
        return xmax, dodge_traces(series, xmax)
    return xmax, {m: x for m, (x, _) in series.items()}


def _trace_line(ax, x, y, window: int, **kw):
    """Raw points, plus their centred-moving-average line when the trace is long enough (else the points joined as measured)."""
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
    return (f"dots: as measured; line: centred moving average of {used[0]} points" +
            ("" if 1 not in windows else "; short traces unsmoothed"))


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
        + (["* extension, not one of the paper's methods"] if any(r.get("extension") for r in runs) else [])
    ax.set(ylabel="failed / successful token entropy", title="Reward-stratified entropy ratios")
    if notes:
        ax.set_xlabel("; ".join(notes), fontsize=7)
    ax.legend(fontsize=7, loc="best")
    return fig


def draw_covfit(res: dict, st: AggregateSettings):
    """Observed vs predicted entropy change per transition, one colour and marker per run (legend: method and
    scale), failed runs hollow, the identity line and the fit over the nonfailed runs."""
    from aggregate.pipeline import method_rank
    from aggregate.tables import method_name, scale_name

    tr = res.get("transitions", [])
    if not tr:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    scales = sorted({t["scale"] for t in tr})
    runs = sorted({(t["scale"], t["method"]) for t in tr}, key=lambda k: (k[0], method_rank(k[1])))
    for sc, m in runs:
        pts = np.array([(t["predicted"], t["observed"]) for t in tr if (t["scale"], t["method"]) == (sc, m)])
        excl = any(t["excluded"] for t in tr if (t["scale"], t["method"]) == (sc, m))
        sty = style(m)
        marker = sty["marker"] if len(scales) == 1 else ("o", "s", "^", "D")[scales.index(sc) % 4]
        label = f"{method_name(m)}-{scale_name(sc)} ({len(pts)})" + (": failed run, excluded from the fit" if excl else "")
        ax.scatter(pts[:, 0], pts[:, 1], s=30, marker=marker, label=label, edgecolors=sty["color"],
                   facecolors="none" if excl else sty["color"], alpha=0.85, zorder=3)
    allv = np.array([[t["predicted"], t["observed"]] for t in tr])
    lo, hi = float(allv.min()), float(allv.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="identity (observed = predicted)")
    f = res.get("covariance_fit", {}).get("all_nonfailed", {})
    if _finite(f.get("slope")):
        ax.plot([lo, hi], [f["intercept"] + f["slope"] * lo, f["intercept"] + f["slope"] * hi], "r-", lw=1,
                label=f"least-squares fit: slope {f['slope']:.3f}, Pearson r {f['pearson']:.3f}"
                      + (f", n = {f['n']}" if "n" in f else ""))
    ax.set(xlabel="predicted entropy change (nats; covariance, Eq. 10)", ylabel="observed entropy change (nats)",
           title="Exact covariance fit: one point per adjacent-checkpoint transition")
    ax.title.set_fontsize(9)
    pad = 0.06 * max(hi - lo, 1e-12)
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(lo - pad, hi + pad)
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):  # at most 6 ticks: long labels such as -0.025 must not run together
        axis.set_major_locator(MaxNLocator(nbins=5))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0,
              title="run (transitions)", title_fontsize=7)
    fig.tight_layout()
    return fig


def passk_axis_label(res: dict, st: AggregateSettings) -> str:
    """The pass@k axis names the benchmark the passk table measured (its `benchmark` column; the
    configured one when the table has none) and the k the aggregation used."""
    from aggregate.evaltables import canonical_benchmark
    from aggregate.tables import BENCH_NAMES

    inv = res.get("eval_inventory") or {}
    benches = sorted(b for b, v in inv.items() if "passk" in v) or [canonical_benchmark(st.passk_benchmark)]
    return f"{' + '.join(BENCH_NAMES.get(b, b) for b in benches)} pass@{st.pass_k} (%)"


def padded_limits(values: list[float], margin: float = 0.12, min_span: float = 4.0) -> tuple[float, float]:
    """Axis limits holding every value with `margin` of their span (at least `min_span`) on each side: a point
    at 100% or above it (retention can exceed 100%) is drawn whole, inside the frame, never on its edge."""
    lo, hi = min(values), max(values)
    pad = margin * max(hi - lo, min_span)
    return lo - pad, hi + pad


def draw_retention(res: dict, st: AggregateSettings):
    """Mode retention (%) against pass@k (%) per trained nonfailed run of the paper's methods, one colour
    per scale, every point labelled; the base policy's retention (100% by construction) as a reference line.
    The legend says which runs n counts (failed runs and extensions are left out of the correlation)."""
    from aggregate.tables import method_name, scale_name

    key = f"pass_at_{st.pass_k}"
    runs = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and not r.get("failed")
            and not r.get("extension") and _finite(r.get("mode_retention")) and _finite(r.get(key))]
    if not runs:
        return None
    left = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and (r.get("failed") or r.get("extension"))]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.8))
    ax.axhline(100.0, color="grey", ls=":", lw=1.2, label="Base policy: 100% by construction", zorder=1)
    xs, ys, texts = [], [], []
    for i, sc in enumerate(sorted({r["scale"] for r in runs})):
        sub = [r for r in runs if r["scale"] == sc]
        c = res.get("correlations", {}).get(sc, {})
        rho = c.get("spearman")
        lab = f"{scale_name(sc)}: " + (f"Spearman ρ = {rho:.2f}, n = {c.get('n', len(sub))} runs" if _finite(rho)
                                       else f"Spearman ρ undefined:\n{c.get('undefined') or 'too few runs'}")
        ax.scatter([r[key] for r in sub], [r["mode_retention"] for r in sub], label=lab, s=49, zorder=3,
                   color=f"C{i}")
        at: dict[tuple[float, float], list[str]] = {}   # runs at one point share one label
        for r in sub:
            at.setdefault((r[key], r["mode_retention"]), []).append(method_name(r["method"]))
        for (x, y), names in at.items():
            xs.append(x)
            ys.append(y)
            texts.append(", ".join(names) if len(names) <= 2 else
                         f"{len(names)} runs:\n" + "\n".join(", ".join(names[k:k + 3]) for k in range(0, len(names), 3)))
    if left:
        ax.plot([], [], ls="none", label="n: the paper's methods; left out: "
                + ", ".join(f"{method_name(r['method'])}-{scale_name(r['scale'])} "
                            f"({'failed run' if r.get('failed') else 'extension'})" for r in left))
    ax.set_xlim(*padded_limits(xs))
    ax.set_ylim(*padded_limits(ys + [100.0]))
    ax.set(xlabel=passk_axis_label(res, st), ylabel="mode retention (%)",
           title=f"Mode retention vs pass@{st.pass_k}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), borderaxespad=0, ncol=1)
    fig.tight_layout()   # before the labels: they are placed against the final geometry
    place_labels(ax, xs, ys, texts)
    return fig


def draw_training_entropy(res: dict, st: AggregateSettings):
    """Training token entropy (steps.jsonl) over the whole epoch as small multiples: one panel per run (rows per
    scale), each over the base policy's entropy (the first logged step: its rollouts come from the base policy,
    before any update) and, in light grey, the other runs of its scale for comparison. Raw per-step values thin,
    their centred moving average thick (visual only; the window is in the figure's caption line); a failed
    run's onset marked. Every panel shares the progress and entropy axes."""
    from aggregate.evals import centered_moving_average
    from aggregate.pipeline import method_rank
    from aggregate.tables import method_name, scale_name

    traces = res.get("training_traces") or {}
    runs = [(k.split("/", 1), tr) for k, tr in traces.items() if any(_finite(e) for e in tr["entropy"])]
    scales = sorted({sc for (sc, _), _ in runs})
    if not scales:
        return None
    per = {sc: sorted(((m, tr) for (s, m), tr in runs if s == sc), key=lambda x: method_rank(x[0])) for sc in scales}
    most = max(len(v) for v in per.values())
    ncols = min(most, 3 if most <= 6 else 4)   # six runs: 3 x 2, seven: 4 + 3
    rows_of = {sc: -(-len(per[sc]) // ncols) for sc in scales}
    plt = _plt()
    nrows = sum(rows_of.values())
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.5 * nrows + 0.9), squeeze=False, sharex=True,
                             sharey=True)
    windows, row0, xmax = set(), 0, 1.0
    for sc in scales:
        series = {}
        for m, tr in per[sc]:
            pts = [(s, e) for s, e in zip(tr["step"], tr["entropy"]) if _finite(e)]
            series[m] = (np.array([q[0] for q in pts]) / tr["steps_per_epoch"], np.array([q[1] for q in pts]),
                         tr["steps_per_epoch"])
        smooth = {m: (x, centered_moving_average(y, smoothing_window(len(y), st.smoothing_window))
                      if smoothing_window(len(y), st.smoothing_window) > 1 else y) for m, (x, y, _) in series.items()}
        for k, (m, (x, y, spe)) in enumerate(series.items()):
            ax = axes[row0 + k // ncols, k % ncols]
            sty = style(m)
            for other, (ox, oy) in smooth.items():
                if other != m:
                    ax.plot(ox, oy, color="0.82", lw=0.8, zorder=1)
            ax.axhline(y[0], color="grey", ls=":", lw=1, zorder=2)
            w = smoothing_window(len(y), st.smoothing_window)
            windows.add(w)
            if w > 1:
                ax.plot(x, y, color=sty["color"], alpha=0.35, lw=0.6, zorder=3)
                ax.plot(x, smooth[m][1], color=sty["color"], lw=1.8, zorder=4)
            else:
                ax.plot(x, y, color=sty["color"], marker=sty["marker"], ms=4, mfc="none", lw=1.2, zorder=4)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe, color="k", ls="--", lw=1)
            ax.set_title(f"{method_name(m)}-{scale_name(sc)}" + (" (failed run)" if fd.get("fired") else "")
                         + (" (extension)" if st.is_extension(m) else ""),
                         fontsize=9, color=sty["color"])
            xmax = max(xmax, float(x.max()) if x.size else 1.0)
        for k in range(len(series), rows_of[sc] * ncols):
            axes[row0 + k // ncols, k % ncols].set_visible(False)
        for k in range(max(0, len(series) - ncols), len(series)):   # each block's lowest panels: a labelled x axis
            ax = axes[row0 + k // ncols, k % ncols]
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("progress (fraction of the " + ("epoch)" if all(tr.get("epoch_known", True) for _, tr in per[sc])
                                                          else "run: no epoch length at this scale)"), fontsize=8)
        row0 += rows_of[sc]
    progress_axis(axes[0, 0], xmax)   # shared by every panel: from 0, as fig_traces
    allv = [v for (sc_m, tr) in runs for v in tr["entropy"] if _finite(v)]
    axes[0, 0].set_ylim(*padded_limits(allv, margin=0.08, min_span=1e-3))
    for ax in axes[:, 0]:
        ax.set_ylabel("token entropy (nats)", fontsize=8)
    used = sorted(w for w in windows if w > 1)
    how = (f"thin: each logged step; thick: centred moving average over {used[0]} logged steps (visual only)"
           if used else "points as logged (too few to smooth)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.3", lw=0.6, alpha=0.6, label="each logged step"),
               Line2D([], [], color="0.3", lw=1.8, label=f"centred moving average ({used[0]} steps)" if used
                      else "as logged"),
               Line2D([], [], color="grey", ls=":", label="base policy (first logged step's rollouts)"),
               Line2D([], [], color="0.82", label="the other runs (moving average)")]
    if any(v.get("fired") for v in res.get("failure_detector", {}).values()):
        handles.append(Line2D([], [], color="k", ls="--", label="failure onset"))
    fig.suptitle(f"Training token entropy per run (steps.jsonl)\n{how}", fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
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
