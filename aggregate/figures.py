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


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def fig_traces(res: dict, st: AggregateSettings, out: Path) -> list[str]:
    """Probe token entropy (macro) and raw/smoothed dense benchmark accuracy vs normalised progress."""
    from aggregate.evals import centered_moving_average
    from aggregate.evaltables import canonical_benchmark
    from aggregate.pipeline import method_rank, steps_per_epoch
    from aggregate.tables import method_name, scale_name

    eps = res.get("endpoints", [])
    bench = canonical_benchmark(st.failure_benchmark)
    greedy = [g for g in res.get("greedy", []) if g["benchmark"] == bench]
    scales = sorted({e["scale"] for e in eps} | {g["scale"] for g in greedy})
    if not scales:
        return []
    plt = _plt()
    fig, axes = plt.subplots(2, len(scales), figsize=(5 * len(scales), 6.5), squeeze=False)
    for j, sc in enumerate(scales):
        steps_all = [e["step"] for e in eps if e["scale"] == sc] + [g["step"] for g in greedy if g["scale"] == sc]
        spe = steps_per_epoch(sc, st, max(steps_all) if steps_all else 1)
        base = [e for e in eps if e["scale"] == sc and e["method"] == BASE_METHOD]
        methods = sorted({e["method"] for e in eps if e["scale"] == sc and e["method"] != BASE_METHOD},
                         key=method_rank)
        ax = axes[0, j]
        for m in methods:
            pts = sorted(([(0, base[0]["token_entropy_mean"])] if base else [])
                         + [(e["step"], e["token_entropy_mean"]) for e in eps if e["scale"] == sc and e["method"] == m])
            ax.plot([p[0] / spe for p in pts], [p[1] for p in pts], marker="o", label=method_name(m), color=_color(m))
        ax.set(title=f"{scale_name(sc)}: probe token entropy", xlabel="normalised progress",
               ylabel="mean token entropy (nats)")
        ax = axes[1, j]
        for m in sorted({g["method"] for g in greedy if g["scale"] == sc}, key=method_rank):
            tr = sorted((g["step"], g["accuracy"]) for g in greedy if g["scale"] == sc and g["method"] == m)
            x = np.array([p[0] for p in tr]) / spe
            y = 100 * np.array([p[1] for p in tr])
            line, = ax.plot(x, centered_moving_average(y, st.smoothing_window), label=method_name(m), color=_color(m))
            ax.plot(x, y, ".", color=line.get_color(), alpha=0.4)
            fd = res.get("failure_detector", {}).get(f"{sc}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / spe, color=line.get_color(), ls="--", lw=1)
        ax.set(title=f"{scale_name(sc)}: greedy {bench} (raw dots, CMA({st.smoothing_window}) line)",
               xlabel="normalised progress", ylabel="accuracy (%)")
        for a in axes[:, j]:
            if a.get_legend_handles_labels()[0]:
                a.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "fig_traces")


def fig_ratios(res: dict, st: AggregateSettings, out: Path) -> list[str]:
    """Broad and paired failed-to-success ratios with bootstrap intervals per reported endpoint."""
    from aggregate.tables import method_name, scale_name

    runs = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and _finite(r.get("broad_ratio"))]
    if not runs:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 0.7 * len(runs) + 2), 4))
    x = np.arange(len(runs))
    ax.scatter(x - 0.12, [r["broad_ratio"] for r in runs], marker="s", label="broad")
    paired = np.array([r.get("paired_ratio", np.nan) for r in runs], float)
    ci = np.array([r.get("paired_ci") or [np.nan, np.nan] for r in runs], float)
    err = np.vstack([paired - ci[:, 0], ci[:, 1] - paired])
    ax.errorbar(x + 0.12, paired, yerr=np.where(np.isfinite(err), err, 0), fmt="o", capsize=3, label="paired [95% CI]")
    ax.axhline(1.0, color="grey", lw=1)
    ticks = [f"{method_name(r['method'])}\n{scale_name(r['scale'])}" + ("†" if r.get("failed") else "") for r in runs]
    ax.set_xticks(x, ticks, fontsize=7)
    ax.set(ylabel="failed / successful token entropy", title="Reward-stratified entropy ratios")
    ax.legend(fontsize=8)
    return save(fig, out, "fig_reward_ratios")


def fig_covfit(res: dict, st: AggregateSettings, out: Path) -> list[str]:
    """Observed vs predicted entropy change per transition, identity line, failed runs hollow."""
    from aggregate.tables import scale_name

    tr = res.get("transitions", [])
    if not tr:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for sc in sorted({t["scale"] for t in tr}):
        for excl in (False, True):
            pts = [(t["predicted"], t["observed"]) for t in tr if t["scale"] == sc and t["excluded"] == excl]
            if pts:
                p = np.array(pts)
                ax.scatter(p[:, 0], p[:, 1], label=f"{scale_name(sc)}" + (" (excluded)" if excl else ""),
                           facecolors="none" if excl else None, edgecolors="k" if excl else None)
    allv = np.array([[t["predicted"], t["observed"]] for t in tr])
    lo, hi = float(allv.min()), float(allv.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="identity")
    f = res.get("covariance_fit", {}).get("all_nonfailed", {})
    if _finite(f.get("slope")):
        ax.plot([lo, hi], [f["intercept"] + f["slope"] * lo, f["intercept"] + f["slope"] * hi], "r-", lw=1,
                label=f"OLS slope {f['slope']:.3f}, r {f['pearson']:.3f}")
    ax.set(xlabel="predicted ΔH (covariance, Eq. 10)", ylabel="observed ΔH", title="Exact covariance fit")
    ax.legend(fontsize=7)
    return save(fig, out, "fig_covariance_fit")


def fig_retention(res: dict, st: AggregateSettings, out: Path) -> list[str]:
    """Mode retention (%) against pass@k (%) per trained nonfailed run, one colour per scale."""
    from aggregate.evaltables import canonical_benchmark
    from aggregate.tables import BENCH_NAMES, method_name, scale_name

    key = f"pass_at_{st.pass_k}"
    runs = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD and not r.get("failed")
            and not r.get("extension") and _finite(r.get("mode_retention")) and _finite(r.get(key))]
    if not runs:
        return []
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.8, 4))
    for sc in sorted({r["scale"] for r in runs}):
        sub = [r for r in runs if r["scale"] == sc]
        c = res.get("correlations", {}).get(sc, {})
        lab = f"{scale_name(sc)} (ρ_s={c.get('spearman', float('nan')):.2f})"
        ax.scatter([r[key] for r in sub], [r["mode_retention"] for r in sub], label=lab)
        for r in sub:
            ax.annotate(method_name(r["method"]), (r[key], r["mode_retention"]), fontsize=6)
    ax.set(xlabel=f"{BENCH_NAMES.get(canonical_benchmark(st.passk_benchmark), st.passk_benchmark)} pass@{st.pass_k} (%)", ylabel="mode retention (%)", title="Mode retention vs pass@k")
    ax.legend(fontsize=7)
    return save(fig, out, "fig_retention_vs_passk")


def fig_training_entropy(res: dict, st: AggregateSettings, out: Path) -> list[str]:
    """Training token entropy (steps.jsonl) over the whole epoch per run, raw and CMA-smoothed (visual only);
    a failed run's onset marked (Table A3: complete trace, failure marked)."""
    from aggregate.evals import centered_moving_average
    from aggregate.pipeline import method_rank
    from aggregate.tables import method_name, scale_name

    traces = res.get("training_traces") or {}
    runs = [(k.split("/", 1), tr) for k, tr in traces.items() if any(_finite(e) for e in tr["entropy"])]
    scales = sorted({sc for (sc, _), _ in runs})
    if not scales:
        return []
    plt = _plt()
    fig, axes = plt.subplots(1, len(scales), figsize=(5 * len(scales), 3.6), squeeze=False)
    for j, sc in enumerate(scales):
        ax = axes[0, j]
        for (s, m), tr in sorted(((r, tr) for r, tr in runs if r[0] == sc), key=lambda x: method_rank(x[0][1])):
            pts = [(st_, e) for st_, e in zip(tr["step"], tr["entropy"]) if _finite(e)]
            x = np.array([p[0] for p in pts]) / tr["steps_per_epoch"]
            y = np.array([p[1] for p in pts])
            ax.plot(x, y, color=_color(m), alpha=0.25, lw=0.6)
            ax.plot(x, centered_moving_average(y, st.smoothing_window), color=_color(m), label=method_name(m))
            fd = res.get("failure_detector", {}).get(f"{s}/{m}", {})
            if fd.get("fired"):
                ax.axvline(fd["onset_step"] / tr["steps_per_epoch"], color=_color(m), ls="--", lw=1)
        ax.set(title=f"{scale_name(sc)}: training entropy (steps.jsonl)", xlabel="normalised progress",
               ylabel="mean token entropy (nats)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "fig_training_entropy")


FIGURES = {"fig_traces": fig_traces, "fig_training_entropy": fig_training_entropy, "fig_reward_ratios": fig_ratios, "fig_covariance_fit": fig_covfit,
           "fig_retention_vs_passk": fig_retention}


def build_figures(res: dict, st: AggregateSettings, out: Path) -> dict[str, list[str]]:
    """Render every figure whose inputs exist; returns name -> files written (empty: not drawn)."""
    return {name: f(res, st, out) for name, f in FIGURES.items()}
