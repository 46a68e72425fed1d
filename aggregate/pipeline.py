"""From a Dataset (the schema tables) to one results dict: every number the outputs render.

Each analysis runs only when its inputs exist; otherwise a note names the missing input and the
outputs it disables (``results['notes']``, ``results['unavailable']``). Reporting points follow
Table A3 (docs/estimators.md#reporting-points): ordinary runs use their final checkpoint; a run that fires the
failure detector
uses its last probe/benchmark checkpoint before the onset for Table 1, ratios and retention, its
final checkpoint (flagged) for q99, and is excluded from the covariance fit and correlations.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from aggregate import covariance, evals
from aggregate.evaltables import detect_failures, eval_inventory, greedy_summary, passk_summary, transitions
from aggregate.io import Dataset
from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD, METHODS

METHOD_ORDER = (BASE_METHOD, *METHODS)  # the untrained policy first, then the methods in rcea.config's order


def method_rank(method: str) -> tuple[int, str]:
    m = method.lower().replace("-", "_")
    return (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m)


def steps_per_epoch(scale: str, settings: AggregateSettings, max_step: int) -> float:
    """Raw steps per epoch of a scale (case-insensitive lookup), else the largest step seen."""
    for k, v in settings.steps_per_epoch.items():
        if k.lower() == scale.lower():
            return float(v)
    return float(max(max_step, 1))


def run_aggregation(ds: Dataset, settings: AggregateSettings,
                    timings: dict[str, float] | None = None, context: Any = None) -> dict[str, Any]:
    """All analyses; returns the results dict consumed by tables, figures, report and summary.json.
    ``context`` (aggregate.context.Context): the training logs, manifests, judge calibration and audit
    around the tables, when the input is a study's tables folder."""
    t = timings if timings is not None else {}
    notes = list(ds.notes)
    unavailable: dict[str, str] = {}
    res: dict[str, Any] = {"settings": settings.as_dict(), "notes": notes, "unavailable": unavailable}

    # --- benchmark tables first: the failure detector decides reporting points -------------------
    t0 = time.perf_counter()
    greedy = greedy_summary(ds.tables["greedy"]) if ds.has("greedy") else []
    failures = detect_failures(greedy, settings) if greedy else {}
    if not greedy:
        unavailable.update({"table1_accuracy": "no greedy table", "tableA9": "no greedy table",
                            "failure_detector": "no greedy table: no run is treated as failed"})
    elif not failures:
        notes.append(f"no '{settings.failure_benchmark}' trace in greedy: failure detector not applied")
    passk = passk_summary(ds.tables["passk"], settings.pass_k) if ds.has("passk") else []
    short = sorted({f"{p['scale']}/{p['method']}/{p['step']}" for p in passk if p["min_n"] < settings.pass_k})
    if short:
        notes.append(f"pass@{settings.pass_k} is null where a question has n < {settings.pass_k} samples "
                     f"({', '.join(short[:6])}{' ...' if len(short) > 6 else ''}); lower --pass-k for small runs")
    if not passk:
        unavailable["pass_at_k"] = (f"no passk table: no Pass@{settings.pass_k} column, no retention-pass@"
                                    f"{settings.pass_k} correlation")
    failed = {k for k, v in failures.items() if v["fired"]}
    res["failure_detector"] = {f"{k[0]}/{k[1]}": v for k, v in failures.items()}
    t["benchmarks"] = time.perf_counter() - t0

    # --- fixed probe --------------------------------------------------------------------------
    entries: list[dict] = []
    idx = None
    if ds.has("samples"):
        from aggregate import probe

        t0 = time.perf_counter()
        idx, _, entries = probe.probe_stats(ds.tables["samples"], settings)
        t["probe_entropy_bootstrap"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ret, ret_notes = probe.retention_stats(ds.tables["samples"], idx, settings)
        notes.extend(ret_notes)
        for e, v in ret.items():
            entries[e].update(v)
        if not ret:
            unavailable["mode_retention"] = "; ".join(ret_notes) or "no trained endpoint with modes"
        t["mode_retention"] = time.perf_counter() - t0
        from aggregate.section12 import pipeline_counts

        res["pipeline_counts"] = pipeline_counts(ds.tables["samples"], settings)
        low = [en for en in entries if en["coverage_success"] == 0 or en["coverage_failure"] == 0]
        if low:
            notes.append(f"{len(low)} endpoint(s) have zero coverage in an outcome under K_r >= {settings.min_k_r}; "
                         "their ratios are null (lower --min-k-r for tiny runs)")
    else:
        unavailable.update({"reward_ratios": "no samples table (Tables A4, A5, Figures 3-5)",
                            "mode_retention": "no samples table (Table 1 retention, Table A6)",
                            "q99": "no samples table to join tokens to (Tables 2, A8)"})
    if ds.has("tokens") and idx is not None:
        from aggregate import tokens

        t0 = time.perf_counter()
        q99, q_notes = tokens.q99_stats(ds.tables["tokens"], idx, settings)
        notes.extend(q_notes)
        for e, v in q99.items():
            entries[e].update(v)
        t["q99_tokens"] = time.perf_counter() - t0
    elif not ds.has("tokens"):
        unavailable["q99"] = "no tokens table: no q99 share (Table 2) or rank-budget variant (Table A8)"
    for en in entries:
        en["failed_run"] = (en["scale"], en["method"]) in failed
    res["endpoints"] = sorted(entries, key=lambda e: (e["scale"], method_rank(e["method"]), e["step"]))

    # --- reporting points per run (Table A3) ----------------------------------------------------
    res["runs"] = _reporting_points(res["endpoints"], greedy, passk, failures, settings)

    # --- covariance fit (Table A7, Figure 6) -----------------------------------------------------
    if ds.has("covariance"):
        trans = [tr for tr in transitions(ds.tables["covariance"]) if tr["method"] != BASE_METHOD]
        ext_trans = [tr for tr in trans if settings.is_extension(tr["method"])]
        trans = [tr for tr in trans if not settings.is_extension(tr["method"])]  # the paper's fit: six methods
        used = [tr for tr in trans if (tr["scale"], tr["method"]) not in failed]
        fit = {"all_nonfailed": covariance.fit_summary([x["predicted"] for x in used], [x["observed"] for x in used])}
        for sc in sorted({x["scale"] for x in used}):
            sub = [x for x in used if x["scale"] == sc]
            fit[sc] = covariance.fit_summary([x["predicted"] for x in sub], [x["observed"] for x in sub])
        fit["excluded_runs"] = sorted(f"{s}/{m}" for s,
                                      m in failed if any(x["method"] == m and x["scale"] == s for x in trans))
        res["covariance_fit"] = fit
        res["transitions"] = [dict(tr, excluded=(tr["scale"], tr["method"]) in failed) for tr in trans]
        res["extension_covariance_fit"] = _extension_fits(ext_trans, failed)
        res["extension_transitions"] = [dict(tr, excluded=(tr["scale"], tr["method"]) in failed, extension=True)
                                        for tr in ext_trans]
    else:
        unavailable["covariance_fit"] = "no covariance table (Table A7, Figure 6)"

    # --- correlations: retention vs pass@k per scale, trained nonfailed runs ---------------------
    corr: dict[str, Any] = {}
    for sc in sorted({r["scale"] for r in res["runs"]}):
        rows = [r for r in res["runs"] if r["scale"] == sc and r["method"] != BASE_METHOD and not r["failed"]
                and not r["extension"]]
        x = [r.get("mode_retention", np.nan) for r in rows]
        y = [r.get(f"pass_at_{settings.pass_k}", np.nan) for r in rows]
        s = evals.spearman_with_p(np.array(x, float), np.array(y, float))
        if not np.isfinite(s["spearman"]):   # the reason, for every place that shows it as "–"
            s["undefined"] = undefined_reason(x, y, ("mode retention", f"pass@{settings.pass_k}"))
        s["methods"] = [r["method"] for r in rows if np.isfinite(r.get("mode_retention", np.nan))
                        and np.isfinite(r.get(f"pass_at_{settings.pass_k}", np.nan))]
        s["p_reported"] = "p_exact (two-sided permutation, n <= 8); p_t_approx is the t approximation"
        corr[sc] = s
    res["correlations"] = corr
    res["extension_runs"] = [f"{r['scale']}/{r['method']}" for r in res["runs"] if r["extension"]]
    res["greedy"] = greedy
    res["passk"] = passk
    res["eval_inventory"] = eval_inventory(ds, settings)
    if context is not None:
        from aggregate.context import summarise

        summarise(context, res, settings, steps_per_epoch)
    return res


def undefined_reason(x, y, names: tuple[str, str]) -> str:
    """Why a rank correlation of x and y is undefined: fewer than 3 pairs, or one variable all tied."""
    pairs = [(a, b) for a, b in zip(x, y) if np.isfinite(a) and np.isfinite(b)]
    if len(pairs) < 3:
        return f"{len(pairs)} run(s) with both values; it needs 3"
    tied = [n for n, vals in zip(names, zip(*pairs)) if len(set(vals)) == 1]
    return " and ".join(f"all {n} values tie" for n in tied) + f", n = {len(pairs)}" if tied else "undefined"


def _extension_fits(trans: list[dict], failed: set) -> dict[str, Any]:
    """The covariance fit of each extension run (e.g. "3b/archer") on its own transitions: beside the paper's
    fit, never pooled into it."""
    out: dict[str, Any] = {}
    for sc, m in sorted({(x["scale"], x["method"]) for x in trans if (x["scale"], x["method"]) not in failed}):
        sub = [x for x in trans if (x["scale"], x["method"]) == (sc, m)]
        out[f"{sc}/{m}"] = covariance.fit_summary([x["predicted"] for x in sub], [x["observed"] for x in sub])
    return out


def table1_columns(present: set[str], settings: AggregateSettings) -> list[str]:
    """Table 1 benchmark columns: the paper's five in order when present, then any others (sorted)."""
    return [b for b in settings.benchmark_order if b in present] + sorted(present - set(settings.benchmark_order))


def _reporting_points(entries: list[dict], greedy: list[dict], passk: list[dict], failures: dict,
                      settings: AggregateSettings) -> list[dict]:
    """One row per (scale, method) incl. base: the checkpoint each table uses, with its numbers."""
    ep = {(e["scale"], e["method"], e["step"]): e for e in entries}
    gr: dict[tuple[str, str, int], dict[str, dict]] = {}
    for g in greedy:
        gr.setdefault((g["scale"], g["method"], g["step"]), {})[g["benchmark"]] = g
    pk = {(p["scale"], p["method"], p["step"]): p for p in passk}
    # the paper's rows first (scale, then method order), then extension rows (Archer) after all of them
    keys = sorted({k[:2] for k in list(ep) + list(gr) + list(pk)},
                  key=lambda k: (settings.is_extension(k[1]), k[0], method_rank(k[1])))
    bench_by_scale: dict[str, set] = {}
    for (s, _, _), b in gr.items():
        bench_by_scale.setdefault(s, set()).update(b)
    rows = []
    for scale, method in keys:
        fd = failures.get((scale, method), {})
        failed = bool(fd.get("fired"))
        onset = fd.get("onset_step") if failed else None
        is_base = method == BASE_METHOD

        def pick(steps: list[int]) -> int | None:
            if not steps:
                return None
            if is_base:
                return min(steps)
            if onset is not None:
                before = [s for s in steps if s < onset]
                return max(before) if before else None
            return max(steps)

        probe_steps = [k[2] for k in ep if k[:2] == (scale, method)]
        cols = table1_columns(bench_by_scale.get(scale, set()), settings)
        full = [k[2] for k, b in gr.items() if k[:2] == (scale, method) and set(b) >= set(cols)]
        q99_steps = [k[2] for k, e in ep.items() if k[:2] == (scale, method) and "q99_tokens" in e]
        row: dict[str, Any] = {"scale": scale, "method": method, "extension": settings.is_extension(method),
                               "failed": failed, "onset_step": onset,
                               "probe_step": pick(probe_steps), "table1_step": pick(full),
                               "q99_step": (min(q99_steps) if is_base else max(q99_steps)) if q99_steps else None}
        if row["probe_step"] is not None:
            e = ep[(scale, method, row["probe_step"])]
            for k in ("broad_ratio", "paired_ratio", "paired_ci", "paired_n", "coverage_success", "coverage_failure",
                      "failure_higher_fraction", "sign_test_p", "sign_wins", "sign_n", "mode_retention",
                      "mode_retention_ci", "mode_retention_n", "success_entropy_mean", "failure_entropy_mean"):
                if k in e:
                    row[k] = e[k]
            if is_base and "mode_retention" not in row:
                row["mode_retention"] = 100.0  # the base reference, by construction
        if row["table1_step"] is not None:
            b = gr[(scale, method, row["table1_step"])]
            row["accuracy"] = {k: 100.0 * v["accuracy"] for k, v in b.items()}
            row["macro_average"] = evals.macro_average(np.array([row["accuracy"][k] for k in cols], float))
            row["macro_average_over"] = cols
            p = pk.get((scale, method, row["table1_step"]))
            if p is not None:
                row[f"pass_at_{settings.pass_k}"] = 100.0 * p[f"pass_at_{settings.pass_k}"]
        if row["q99_step"] is not None:
            e = ep[(scale, method, row["q99_step"])]
            row.update({k: v for k, v in e.items() if k.startswith(("q99_", "rank_share_"))})
        rows.append(row)
    return rows
