"""Writing the outputs: summary.json, tables/*.md|tex, report.md, and the terminal summary.

report.md maps every reported number to the paper table/figure it reproduces and to the output
file and input table it came from. All writes are atomic, with the caller's umask (rcea.store.atomic_write).
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Any

import numpy as np

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from rcea.store import atomic_write

SUMMARY_KEYS = ("coverage_success", "coverage_failure", "broad_ratio", "paired_ratio", "paired_ci", "paired_n",
                "failure_higher_fraction", "sign_test_p", "mode_retention", "mode_retention_ci", "q99_share_success",
                "q99_share_failure", "max_decomposition_residual")

# output -> (paper location, input tables it reads)
PROVENANCE = {
    "table1": ("Table 1 (RQ1, RQ3)", "greedy, passk, samples.mode"),
    "table2": ("Table 2 (RQ4)", "tokens joined to samples"),
    "tableA4": ("Table A4, Figures 4-5 (RQ2)", "samples"),
    "tableA5": ("Table A5", "samples"),
    "tableA6": ("Table A6, Table 1 'Mode Retention'", "samples.mode, samples.process_valid"),
    "tableA7": ("Table A7, Figure 6 (RQ4)", "covariance"),
    "tableA8": ("Table A8", "tokens joined to samples"),
    "tableA9": ("Table A9 (Clip-Cov-7B failure diagnosis)", "greedy"),
    "fig_traces": ("Figure 1's MATH500 accuracy panel (dense greedy trace, bottom row); the top row, probe token "
                   "entropy at the milestones, is a diagnostic with no paper figure (the paper's entropy panels are "
                   "training entropy: fig_training_entropy)", "samples, greedy"),
    "fig_reward_ratios": ("Figures 4 and 5 (broad and paired ratios)", "samples"),
    "fig_covariance_fit": ("Figure 6 (covariance fit vs identity)", "covariance"),
    "fig_training_entropy": ("Figure 3 and Figure 1's entropy panel (training entropy over the whole epoch)",
                             "steps.jsonl of each run"),
    "fig_retention_vs_passk": ("RQ3 Spearman (retention vs pass@k; the paper's k is 64)", "samples.mode, passk"),
}


DEVIATIONS = (
    "Paired bootstrap: vectorised (each question's inner resamples drawn in one call), so its random stream "
    "differs from the one-resample-at-a-time loop; that loop (`aggregate.bootstrap`) reproduces the worked "
    "example of docs/estimators.md#hierarchical-bootstrap exactly and the two agree in distribution (tests). "
    "Generators are keyed per checkpoint: "
    "`default_rng([seed, crc32('scale/method/step')])`.",
    "Rarefaction draws: `default_rng([{seed}, question_key, checkpoint_key])` with question_key = int(question_id) "
    "when numeric else its crc32 and checkpoint_key = crc32('scale/method/step'); {draws} "
    "`rng.choice(n, m, replace=False)` calls (docs/estimators.md#semantic-modes).",
    "Sign test, rank and correlation statistics use scipy.stats: `binomtest` (exact one-sided binomial tail), "
    "`spearmanr` (average ranks) and `permutation_test` (the exact two-sided permutation p of RQ3); tests compare "
    "them with hand-computed values, with the p values of the paper's Table A5 from its printed win counts, and "
    "with the two p values of the paper's 3B correlation (rho = 0.812, n = 6: 0.0499 and 0.072).",
)


def _why(fit: dict) -> str:
    """Why a fit's rank and linear statistics are "–" (covariance.fit_summary needs 3 transitions, neither side tied)."""
    n = fit.get("n") or 0
    if isinstance(fit.get("spearman"), float) and math.isfinite(fit["spearman"]):
        return ""
    return f" (undefined: {n} transition(s), it needs 3)" if n < 3 else " (undefined: the predicted or observed values tie)"


def write_text(path: Path, text: str) -> None:
    """Atomic text write, with the caller's umask (rcea.store.atomic_write)."""
    atomic_write(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def jsonable(x: Any) -> Any:
    """NaN/inf -> None, numpy scalars/arrays -> Python, tuples -> lists, recursively."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def provenance() -> dict[str, Any]:
    """Git commit, lockfile hash, library versions, device, Python (rcea.provenance: what every manifest
    records) and the platform."""
    from rcea.provenance import provenance as shared

    return {**shared(), "platform": platform.platform()}


def summary(res: dict) -> dict[str, Any]:
    """summary.json content: one entry per endpoint (scale, method, step) plus fits and correlations."""
    eps = []
    for e in res.get("endpoints", []):
        d = {"scale": e["scale"], "method": e["method"], "step": e["step"]}
        d.update({k: e.get(k) for k in SUMMARY_KEYS})
        d.update({k: v for k, v in e.items() if k not in d})
        eps.append(d)
    return jsonable({"endpoints": eps, "runs": res.get("runs", []), "covariance_fit": res.get("covariance_fit"),
                     "correlations": res.get("correlations", {}),
                     "extension_covariance_fit": res.get("extension_covariance_fit"),
                     "extension_runs": res.get("extension_runs", []),
                     "outside_bases": res.get("outside_bases", []),
                     "training_traces": res.get("training_traces"), "failure_window": res.get("failure_window"),
                     "judge_calibration": res.get("judge_calibration"), "audit": res.get("audit"),
                     "accepted_set": res.get("accepted_set"), "codebook": res.get("codebook"),
                     "pipeline_counts": res.get("pipeline_counts"), "initial_modes": res.get("initial_modes"),
                     "inventory": res.get("inventory"), "eval_inventory": res.get("eval_inventory"), "failure_detector": res.get("failure_detector", {}),
                     "notes": res.get("notes", []), "unavailable": res.get("unavailable", {}),
                     "seed_noise": res.get("seed_noise", []), "skipped_parts": res.get("skipped_parts", []),
                     "settings": res.get("settings"), "provenance": res.get("provenance"),
                     "timings_s": res.get("timings_s")})


def _f(x: Any, d: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{d}f}" if isinstance(x, float) else str(x)


def _pct(v: Any) -> str:
    """A share as a percentage with one decimal; "–" when missing or not finite."""
    return _f(100 * v, 1) if isinstance(v, float) and math.isfinite(v) else "–"


def report_md(res: dict, st: AggregateSettings, tables: dict, figures: dict[str, list[str]], inputs: str) -> str:
    """report.md: what each output reproduces, where each number lives, what is missing."""
    gone = res.get("unavailable", {}).get("mode_retention", "")
    L = ["# RCEA aggregation report", ""]
    if "all null" in gone:   # a labelling stage left no labels: say so before any number
        L += [f"**Not a result: labels are missing.** {gone}. Table 1 (Mode Retention), Table A6 and the "
              "retention figure are not reported; rerun the labelling stage, then aggregate again.", ""]
    from aggregate.answers import answer_lines

    L += answer_lines(res, st)
    L += ["## Input and settings", "",
         f"Input: `{inputs}`. Settings: min K_r = {st.min_k_r}, bootstrap {st.bootstrap_resamples} resamples "
         f"(seed {st.bootstrap_seed}, keyed per endpoint), rarefaction seed {st.rarefaction_seed} "
         f"(R = {st.rarefaction_draws}, m_min = {st.min_mode_m}), q{100 * st.q99_quantile:g} with "
         f"`{st.quantile_method}` quantiles, "
         f"pass@{st.pass_k}. Every estimator (definition, units, interval) is defined in `docs/estimators.md` of the "
         "harness, its open choices in that file's #choices table; every setting in `docs/settings.md` (each "
         "setting's tag and the departures from the paper at this scale: the next two sections).",
         ""]
    from aggregate.paper_report import (accepted_set_lines, codebook_lines, departure_lines, deviation_lines,
                                        rq3_lines, settings_lines)

    L += settings_lines(st)
    L += departure_lines(res, st)
    L += ["",
         "## Outputs and the paper artifacts they reproduce", "",
         "| Output | Reproduces | Reads | Files | Status |", "|---|---|---|---|---|"]
    from aggregate.context import report_lines
    from aggregate.supplement import PROVENANCE as SUPPLEMENT_PROVENANCE

    provenance_of = {**PROVENANCE, **SUPPLEMENT_PROVENANCE}
    for key, t in tables.items():
        where, reads = provenance_of[key]
        status = "rendered" if t.rows else "empty: " + ("; ".join(t.notes) or "no rows")
        L.append(f"| {t.key} | {where} | {reads} | `tables/{key}.md`, `tables/{key}.tex` | {status} |")
    for key, files in figures.items():
        where, reads = provenance_of[key]
        L.append(f"| {key} | {where} | {reads} | {', '.join(f'`figures/{f}`' for f in files) or '–'} | "
                 f"{'rendered' if files else 'not drawn: inputs missing'} |")
    L += ["", "## Numbers per reporting point (paper Table A3 rule; docs/estimators.md#reporting-points)", "",
          "Each value below is also in `summary.json` (`runs`, and per checkpoint under `endpoints`).", "",
          "| Run | probe step | Broad (Tab. A4, Fig. 4) | Paired [CI] (Tab. A4, Fig. 5) | n_c | Cov. S/F % (Tab. A4) "
          "| Failure higher / p (Tab. A5) | "
          "Retention [CI] (Tab. 1, A6) | q99 S/F % (Tab. 2) | pass@k (Tab. 1) | Avg (Tab. 1) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.get("runs", []):
        ci = r.get("paired_ci") or [None, None]
        rci = r.get("mode_retention_ci") or [None, None]
        L.append(f"| {_run_name(r)} | {_f(r.get('probe_step'))} | "
                 f"{_f(r.get('broad_ratio'))} | {_f(r.get('paired_ratio'))} [{_f(ci[0])}, {_f(ci[1])}] | "
                 f"{_f(r.get('paired_n'))} | "
                 f"{_pct(r.get('coverage_success'))}/{_pct(r.get('coverage_failure'))} | "
                 f"{_pct(r.get('failure_higher_fraction'))} / {_f(r.get('sign_test_p'), 4)} | "
                 f"{_f(r.get('mode_retention'), 1)} [{_f(rci[0], 1)}, {_f(rci[1], 1)}] | "
                 f"{_pct(r.get('q99_share_success'))}/{_pct(r.get('q99_share_failure'))} | "
                 f"{_f(r.get(f'pass_at_{st.pass_k}'), 1)} | {_f(r.get('macro_average'), 2)} |")
    from aggregate.outside_bases import lines as base_lines

    L += base_lines(res, "Outside runs measured over another base model than the scale's (`summary.json` → "
                    "`outside_bases`):")
    L += accuracy_lines(res)
    fit = res.get("covariance_fit") or {}
    if fit:
        L += ["", "## Covariance fit (Table A7, Figure 6; `summary.json` → `covariance_fit`)", ""]
        for scope, f in fit.items():
            if scope != "excluded_runs":
                L.append(f"- {scope}: n = {f['n']}, sign {_f(f['sign_agreement'])}, Spearman {_f(f['spearman'])}{_why(f)}, "
                         f"Pearson {_f(f['pearson'])}, slope {_f(f['slope'])}, intercept {_f(f['intercept'], 5)}, "
                         f"R² {_f(f['r2'])}, R²_id {_f(f['r2_identity'])}, median AE {_f(f['median_abs_error'], 5)}, "
                         f"median RE {_f(f['median_rel_error'])}")
    ext_fit = res.get("extension_covariance_fit") or {}
    if ext_fit:
        L += ["", "Extension runs (not among the paper's six methods), each fitted on its own transitions and "
              "pooled into none of the fits above (`summary.json` → `extension_covariance_fit`):", ""]
        L += [f"- {k}: n = {f['n']}, sign {_f(f['sign_agreement'])}, Spearman {_f(f['spearman'])}{_why(f)}, "
              f"slope {_f(f['slope'])}, R² {_f(f['r2'])}" for k, f in ext_fit.items()]
    L += rq3_lines(res, st)
    L += report_lines(res, st)
    from aggregate.section12 import pipeline_lines

    L += pipeline_lines(res) + accepted_set_lines(res) + codebook_lines(res)
    eps = res.get("endpoints", [])
    if eps:
        worst = max((e.get("max_decomposition_residual", 0.0) for e in eps), default=0.0)
        L += ["", "## Proposition 1 accounting check (docs/estimators.md#reward-decomposition)", "",
              f"Max |ε| over all endpoints and questions = {worst:.3g} nats (`summary.json` → "
              f"`endpoints[*].max_decomposition_residual`). "
              "A zero residual verifies accounting only, not the reward ordering."]
    L += deviation_lines(res, tuple(d.format(seed=st.rarefaction_seed, draws=st.rarefaction_draws)
                                    for d in DEVIATIONS))
    L += ["", "## Missing inputs (outputs they disable)", ""]
    L += [f"- {k}: {v}" for k, v in res.get("unavailable", {}).items()] or ["- none"]
    if res.get("skipped_parts"):  # --skip-bad-parts: these tables are partial, and the reader must know
        L += ["", "## Skipped input files", "", "Left out by `--skip-bad-parts`; the tables below miss their rows.", ""]
        L += [f"- `{b['file']}` ({b['table']}): {b['reason']}" for b in res["skipped_parts"]]
    L += ["", "## Notes", ""]
    L += [f"- {n}" for n in res.get("notes", [])] or ["- none"]
    return "\n".join(L) + "\n"


def _run_name(r: dict) -> str:
    return (f"{r['scale']}/{r['method']}{' (failed)' if r.get('failed') else ''}"
            f"{' (extension)' if r.get('extension') else ''}")


def _base_accuracy(res: dict) -> dict[str, float]:
    return {e["scale"]: e["accuracy"] for e in res.get("endpoints", [])
            if e["method"] == BASE_METHOD and e.get("accuracy") is not None}


def accuracy_lines(res: dict) -> list[str]:
    """Held-out sampled accuracy (fixed probe, samples.reward) per endpoint, against the base policy, and
    the run-to-run noise measured by `python -m train.noise_study` when its result is beside the report."""
    eps = res.get("endpoints", [])
    if not eps:
        return []
    base = _base_accuracy(res)
    L = ["", "## Held-out sampled accuracy on the fixed probe (`samples.reward`; `summary.json` → "
         "`endpoints[*].accuracy`)", "",
         "Mean over probe questions of the share of the K samples the verifier accepts (temperature 1.0).", "",
         "| Endpoint | Sampled accuracy | Change vs base | Token entropy |", "|---|---|---|---|"]
    for e in eps:
        b = base.get(e["scale"])
        delta = f"{e['accuracy'] - b:+.3f}" if b is not None and e["method"] != BASE_METHOD else "–"
        L.append(f"| {e['scale']}/{e['method']}/{e['step']} | {_f(e.get('accuracy'))} | {delta} | "
                 f"{_f(e.get('token_entropy_mean'), 4)} |")
    for n in res.get("seed_noise", []):
        L += ["", f"Run-to-run noise (`python -m train.noise_study`, {n['method']}, training seeds "
              f"{', '.join(map(str, n['seeds']))}, {n['questions']} held-out questions x {n['k']}): warm start "
              f"{n['warm_start']:.3f}, seeds {', '.join(f'{a:.3f}' for a in n['accuracy'])}; mean gain "
              f"{n['gain']:+.3f}, run-to-run sd {n['sd']:.3f} (gain / sd = {n['gain_over_sd']:.1f})."]
    return L


def terminal_summary(res: dict, st: AggregateSettings) -> str:
    """First reward-conditioned entropy table: per endpoint H+ / H- means, broad, paired [CI], coverage."""
    head = (f"{'endpoint':<28}{'acc':>7}{'H_tok+':>8}{'H_tok-':>8}{'broad':>8}{'paired':>8}  "
            f"{'95% CI':<18}{'n_c':>5}{'cov S/F %':>13}")
    lines = [f"Reward-conditioned token entropy (K_r >= {st.min_k_r}; bootstrap {st.bootstrap_resamples})", head,
             "-" * len(head)]
    for e in res.get("endpoints", []):
        ci = e.get("paired_ci") or [float("nan")] * 2
        cis = f"[{_f(ci[0])}, {_f(ci[1])}]" if all(isinstance(c, float) and math.isfinite(c) for c in ci) else "–"
        cov = f"{100 * e['coverage_success']:.1f}/{100 * e['coverage_failure']:.1f}"
        name = f"{e['scale']}/{e['method']}/{e['step']}"
        lines.append(f"{name:<28}{_f(e.get('accuracy')):>7}"
                     f"{_f(e.get('success_entropy_mean')):>8}{_f(e.get('failure_entropy_mean')):>8}"
                     f"{_f(e.get('broad_ratio')):>8}{_f(e.get('paired_ratio')):>8}  "
                     f"{cis:<18}{e.get('paired_n', 0):>5}{cov:>13}")
    if not res.get("endpoints"):
        lines.append("(no samples table: nothing to show)")
    else:
        lines.append("acc: held-out sampled accuracy on the fixed probe (mean verifier reward, temperature 1.0)")
    for n in res.get("seed_noise", []):
        lines.append(f"run-to-run noise ({n['method']}, {len(n['seeds'])} training seeds, python -m train.noise_study): "
                     f"gain over the warm start {n['gain']:+.3f}, sd {n['sd']:.3f}")
    runs = res.get("runs", [])
    if runs:
        k = st.pass_k
        head = (f"{'run (final checkpoint)':<28}{'greedy avg %':>13}{f'pass@{k} %':>11}{'retention %':>13}"
                f"{'q99 S/F %':>13}")
        lines += ["", "Per method (Table 1: greedy accuracy, pass@k, mode retention; Table 2: q99 shares)", head,
                  "-" * len(head)]
        for r in runs:
            q99 = f"{_pct(r.get('q99_share_success'))}/{_pct(r.get('q99_share_failure'))}"
            name = _run_name(r)
            lines.append(f"{name:<28}{_f(r.get('macro_average'), 1):>13}{_f(r.get(f'pass_at_{k}'), 1):>11}"
                         f"{_f(r.get('mode_retention'), 1):>13}{q99:>13}")
    fit = (res.get("covariance_fit") or {}).get("all_nonfailed")
    if fit:
        lines.append(f"covariance fit (all non-failed runs): n = {fit['n']}, "
                     f"sign agreement {_f(fit['sign_agreement'])}, Spearman {_f(fit['spearman'])}, "
                     f"slope {_f(fit['slope'])}, R² {_f(fit['r2'])}")
    for k, v in res.get("unavailable", {}).items():
        lines.append(f"missing: {k}: {v}")
    return "\n".join(lines)
