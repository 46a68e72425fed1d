"""What a study leaves beside its sample tables, and the report outputs made from it.

When ``--input`` is a study's tables folder (``rcea.layout.tables_dir``), the data folder around it also
holds each training run's per-step log (``train/<scale>/<run>/steps.jsonl``) and manifests, the judge's
calibration metrics and the partition audit's report. From them: the training-entropy trace over the
whole epoch (Figure 3 and Figure 1's entropy panel), the failure-window statistics of every run (supplement §13: the share of
sampled completions in prompt groups with nonzero reward variance, the share of updates whose covariance
mask selects no token), the judge-calibration and audit-gate sections of the report, and Table A1's
inventory of the machines and libraries the manifests record. A missing piece is a note, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rcea import layout


@dataclass
class Context:
    steps: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (scale, run) -> step lines
    manifests: list[dict] = field(default_factory=list)  # each with "role": training | inference
    judge_calibration: dict | None = None
    audit: dict | None = None
    accepted_set: dict | None = None  # the judge's accepted-set precision per annotator (annotation import)
    codebook: dict | None = None  # counts of the mode labelling (semantic/codebook/assignments.parquet)
    initial_modes: dict | None = None  # version-1 modes per question (semantic/codebooks/*.json; aggregate.section12)
    notes: list[str] = field(default_factory=list)
    unlogged: list[str] = field(default_factory=list)  # "<scale>/<run>" with checkpoints but no steps.jsonl
    runs: list[str] = field(default_factory=list)  # "<scale>/<run>" whose folder holds complete checkpoints
    outside_bases: list[dict] = field(default_factory=list)  # outside runs measured with --base-differs


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def study_root(tables: Path) -> tuple[Path, str] | None:
    """(data folder, scale) when ``tables`` is a study's tables folder, else None."""
    tables = Path(tables).resolve()
    if len(tables.parents) < 3:
        return None
    root, scale = tables.parents[2], tables.parent.name
    return (root, scale) if layout.tables_dir(scale, root).resolve() == tables else None


def load_context(tables: Path) -> Context:
    """Everything around ``tables`` that the report uses (empty, with a note, for a bare dataset folder)."""
    from rcea.jsonl import JsonlError, read_jsonl

    ctx = Context()
    found = study_root(tables)
    if found is None:
        ctx.notes.append("input is not a study's tables folder: no training logs, manifests, judge calibration or "
                         "audit report beside it (training-entropy trace, failure window, Table A1 and the gates "
                         "not shown)")
        return ctx
    root, scale = found
    train = layout.run_dir(scale, "-", root).parent
    for run in sorted(p for p in train.glob("*") if p.is_dir()) if train.is_dir() else []:
        log = run / "steps.jsonl"
        if log.exists():
            try:
                ctx.steps[(scale, run.name)] = read_jsonl(log, required=("step",), id_key="step", allow_empty=True,
                                                          drop_partial_tail=True)
            except JsonlError as exc:
                ctx.notes.append(f"training log not read: {exc}")
        elif layout.RunFolder(run).checkpoints.is_dir():   # e.g. an outside run imported without a log (infer/outside.py)
            ctx.unlogged.append(f"{scale}/{run.name}")
        if _has_checkpoints(run):
            ctx.runs.append(f"{scale}/{run.name}")
        m = _json(run / "summary.json.manifest.json")
        if m:
            ctx.manifests.append({"role": "training", **m})
    from aggregate.outside_bases import other_bases

    ctx.outside_bases = other_bases(train, scale)
    for m in sorted([*Path(tables).glob("*.manifest.json"), *Path(tables).glob("*/*.manifest.json")]):
        rec = _json(m)
        if rec:
            ctx.manifests.append({"role": "inference", **rec})
    ctx.judge_calibration = _json(layout.judge_calibration(scale, root))
    ctx.audit = _json(layout.audit_report(scale, root))
    ctx.accepted_set = accepted_set(layout.semantic_dir(scale, root) / ACCEPTED_SET)
    ctx.codebook = codebook_counts(layout.semantic_dir(scale, root) / "codebook" / "assignments.parquet")
    from aggregate.section12 import initial_modes

    ctx.initial_modes = initial_modes(layout.semantic_dir(scale, root) / "codebooks")
    return ctx


def _has_checkpoints(run: Path) -> bool:
    """Whether a run folder holds a complete checkpoint (rcea.store.checkpoint_complete): a run to be measured."""
    from rcea.store import checkpoint_complete

    folder = layout.RunFolder(run).checkpoints
    try:
        return folder.is_dir() and any(checkpoint_complete(d) for d in folder.glob("checkpoint-*") if d.is_dir())
    except Exception:   # noqa: BLE001 - a damaged checkpoint: the study's own checks name it
        return True


def unmeasured(runs: list[str], res: dict) -> dict[str, str]:
    """Missing inputs for the runs with checkpoints (`Context.runs`) whose rows a measured table lacks (greedy,
    pass@k, the probe's samples; a table absent altogether is named on its own): a run whose parts were moved
    or deleted is said to be missing, never silently left out of the tables."""
    tables = (("greedy", res.get("greedy") or []), ("passk", res.get("passk") or []),
              ("samples (probe)", res.get("endpoints") or []))
    out = {}
    for run in runs:
        scale, name = run.split("/", 1)
        lacking = [t for t, rows in tables if rows and not any(r.get("scale") == scale and r.get("method") == name
                                                                for r in rows)]
        if lacking:
            out[f"measurements {run}"] = (
                f"its run folder holds complete checkpoints, but the {', '.join(lacking)} table(s) hold none of its "
                f"rows: measure it (an outside run: `invoke measure-run --name {name} --path ...`; the study's "
                "own: `invoke study` resumes), then aggregate again")
    return out


ACCEPTED_SET = "accepted_set_labels.csv"  # annotator,traj_id,valid: one row per annotator and accepted trajectory


def accepted_set(path: Path) -> dict | None:
    """Per annotator: judge-accepted trajectories labelled, how many marked valid, the precision (their share).
    None without the file; a file that cannot be read gives a note in place of numbers."""
    import csv

    if not path.exists():
        return None
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        per: dict[str, list[int]] = {}
        for i, r in enumerate(rows, 2):
            word = str(r.get("valid", "")).strip().lower()
            if word not in ("1", "0", "true", "false", "valid", "invalid"):
                raise ValueError(f"line {i}: valid must be 1/0, true/false or valid/invalid, got {word!r}")
            per.setdefault(str(r.get("annotator", "")).strip() or "?", []).append(word in ("1", "true", "valid"))
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        return {"annotators": {}, "note": f"`{path.name}` not read ({exc}); its header must be annotator,traj_id,valid"}
    return {"annotators": {a: {"n": len(v), "valid": sum(v), "precision": sum(v) / len(v)} for a, v in per.items()}}


def codebook_counts(path: Path) -> dict | None:
    """Counts of the mode labelling: questions with a mode, distinct (question, mode) pairs, included and
    uncertain trajectories, those sent to reconciliation (disputed), and the label sources."""
    if not path.exists():
        return None
    try:
        import pyarrow.parquet as pq

        t = pq.read_table(path).to_pandas()
    except Exception as exc:  # noqa: BLE001 - an unreadable file is a note, not an error
        return {"note": f"{path.name} not read: {exc}"}
    labelled = t[t["mode"].notna()]
    return {"trajectories": int(len(t)), "questions": int(labelled["question_id"].nunique()),
            "modes": int(len(labelled[["question_id", "mode"]].drop_duplicates())),
            "included": int(len(labelled)), "uncertain": int(len(t) - len(labelled)),
            "disputed": int(t["disputed"].fillna(False).astype(bool).sum()) if "disputed" in t else None,
            "by_source": {str(k): int(v) for k, v in t["source"].value_counts().items()} if "source" in t else {}}


def _mean(rows: list[dict], key: str | Callable[[dict], Any]) -> float | None:
    """Mean of a field (or of `key(row)`) over the rows where it is a finite number; None where none is."""
    got = [key(r) if callable(key) else r.get(key) for r in rows]
    v = [float(x) for x in got if isinstance(x, (int, float)) and np.isfinite(x)]
    return float(np.mean(v)) if v else None


def _sampled(row: dict) -> float | None:
    """A rollout's share of sampled completions in mixed groups, before any filter: DAPO logs it apart
    (``frac_nonzero_var_sampled``) since its trained batch is filtered; without a filter it is
    ``frac_nonzero_var`` itself. None for a filtered run's log from before the field was logged."""
    if "frac_nonzero_var_sampled" in row:
        return row["frac_nonzero_var_sampled"]
    return None if "dapo/refill_rounds" in row else row.get("frac_nonzero_var")


def failure_window(rows: list[dict], spe: float, window: tuple[float, float]) -> dict[str, Any]:
    """The failure-window shares of one run, inside the progress ``window`` and over the whole run.

    nonzero-variance share (the paper's): mean over fresh rollouts of the share of *sampled* completions whose
    prompt group has nonzero reward variance, before DAPO's dynamic-sampling filter and refill (each rollout
    samples the same number of completions, so this is the share of completions). Trained share: the same
    after the filter (``frac_nonzero_var``; 1 by construction for DAPO, the sampled share for every other
    objective). Empty-mask share: mean of ``cov_mask_empty`` over the logged steps (each the mean of its
    updates' 0/1 flags); None for a method without a covariance mask.
    """
    fresh = [r for r in rows if r.get("fresh_rollout", 1.0) == 1.0]
    lo, hi = window
    inside = [r for r in rows if lo <= r["step"] / spe <= hi]
    inside_fresh = [r for r in fresh if lo <= r["step"] / spe <= hi]
    return {"window": list(window), "steps_in_window": len(inside), "steps": len(rows),
            "filtered": any("dapo/refill_rounds" in r or "frac_nonzero_var_sampled" in r for r in rows),
            "nonzero_var_share_window": _mean(inside_fresh, _sampled),
            "nonzero_var_share_run": _mean(fresh, _sampled),
            "nonzero_var_trained_share_window": _mean(inside_fresh, "frac_nonzero_var"),
            "nonzero_var_trained_share_run": _mean(fresh, "frac_nonzero_var"),
            "empty_mask_share_window": _mean(inside, "cov_mask_empty"),
            "empty_mask_share_run": _mean(rows, "cov_mask_empty")}


def summarise(ctx: Context, res: dict, settings, steps_per_epoch) -> None:
    """Adds the training traces, the failure-window statistics, the judge calibration, the audit and the
    manifest inventory to the results dict (``steps_per_epoch(scale, settings, max_step)``: the x axis)."""
    traces, windows = {}, {}
    for (scale, run), rows in sorted(ctx.steps.items()):
        rows = sorted((r for r in rows if "step" in r), key=lambda r: r["step"])
        if not rows:
            continue
        spe = steps_per_epoch(scale, settings, rows[-1]["step"])
        known = any(k.lower() == scale.lower() for k in settings.steps_per_epoch)   # else spe is the last step
        traces[f"{scale}/{run}"] = {"steps_per_epoch": spe, "epoch_known": known, "step": [r["step"] for r in rows],
                                    "entropy": [r.get("entropy") for r in rows],
                                    "reward": [r.get("reward") for r in rows]}
        windows[f"{scale}/{run}"] = failure_window(rows, spe, tuple(settings.failure_window))
    res["training_traces"] = traces
    res["failure_window"] = windows
    if not traces:
        res["unavailable"]["training_traces"] = "no training log (steps.jsonl) beside the tables: no training-" \
                                                "entropy trace (Figures 1, 3) or failure-window statistics"
    for run in ctx.unlogged:
        res["unavailable"][f"training_traces {run}"] = "no training log (steps.jsonl) in its run folder: no " \
            "training-entropy trace or failure-window statistics for it (train/callback.py writes one for a TRL run)"
    res["unavailable"].update(unmeasured(ctx.runs, res))
    res["outside_bases"] = ctx.outside_bases
    res["judge_calibration"] = ctx.judge_calibration
    res["audit"] = ctx.audit
    res["accepted_set"] = ctx.accepted_set
    res["codebook"] = ctx.codebook
    res["initial_modes"] = ctx.initial_modes
    res["inventory"] = inventory(ctx.manifests)
    res["notes"].extend(ctx.notes)


def hardware(device: str, manifest: dict) -> dict[str, str]:
    """GPU, CPU and system memory of one manifest: its own `gpu`, `cpu`, `memory` fields when it records them,
    else what its `device` string says (`cuda:<GPU name>`, `cpu:<arch>:<cores>`); "" where unknown."""
    gpu = str(manifest.get("gpu") or "")
    cpu = str(manifest.get("cpu") or "")
    if not gpu and device.startswith("cuda:"):
        gpu = device.partition(":")[2]
    if not cpu and device.startswith("cpu:"):
        parts = device.split(":")
        cpu = f"{parts[2]} cores, {parts[1]}" if len(parts) == 3 else device[4:]
    return {"gpu": gpu, "cpu": cpu, "memory": str(manifest.get("memory") or "")}


def inventory(manifests: list[dict]) -> list[dict]:
    """Table A1 rows: per role and device, its hardware (`hardware`), the artifacts made there and the
    library versions recorded."""
    rows: dict[tuple[str, str], dict] = {}
    for m in manifests:
        key = (m["role"], str(m.get("device", "unknown")))
        r = rows.setdefault(key, {"role": key[0], "device": key[1], **hardware(key[1], m), "artifacts": 0,
                                  "libraries": {}, "git_commits": set(), "lockfiles": set()})
        r["artifacts"] += 1
        r["libraries"].update({k: v for k, v in (m.get("libraries") or {}).items()
                               if k in ("torch", "transformers", "trl", "vllm", "peft", "numpy")})
        r["git_commits"].add(str(m.get("git_commit", "unknown")))
        r["lockfiles"].add(str(m.get("lockfile", "unknown")))
    return [dict(r, git_commits=sorted(r["git_commits"]), lockfiles=sorted(r["lockfiles"]))
            for _, r in sorted(rows.items())]


def _p(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def report_lines(res: dict, st) -> list[str]:
    """report.md sections: training entropy, failure window, judge calibration, partition-audit gates."""
    L: list[str] = []
    traces = res.get("training_traces")
    if traces is None:
        return L
    lo, hi = st.failure_window
    L += ["", "## Training entropy over the epoch (Figure 3, Figure 1's entropy panel; `summary.json` → "
          "`training_traces`, "
          "`figures/fig_training_entropy`)", ""]
    if traces:
        L += ["Mean token entropy of the rollouts each optimizer step trained on (`steps.jsonl`, nats).", "",
              "| Run | steps logged | first | minimum (step) | final |", "|---|---|---|---|---|"]
        for key, tr in traces.items():
            ent = [(s, e) for s, e in zip(tr["step"], tr["entropy"]) if isinstance(e, (int, float))]
            if not ent:
                L.append(f"| {key} | {len(tr['step'])} | – | – | – |")
                continue
            smin = min(ent, key=lambda p: p[1])
            L.append(f"| {key} | {len(tr['step'])} | {ent[0][1]:.4f} | {smin[1]:.4f} ({smin[0]:,}) | {ent[-1][1]:.4f} |")
    else:
        L.append(f"- not available: {res['unavailable'].get('training_traces', 'no training log')}")
    windows = res.get("failure_window") or {}
    if windows:
        L += ["", f"## Failure-window statistics (supplement §13; every run; window {100 * lo:g}-{100 * hi:g}% of the "
              "epoch, then the whole run; `summary.json` → `failure_window`)", "",
              "Sampled: the paper's share, sampled completions whose prompt group has nonzero reward variance (fresh "
              "rollouts, before any filter). Trained: the same share in the batch the update trained on, after "
              "DAPO's dynamic-sampling filter and refill (100% by construction there; equal to the sampled share "
              "for methods without a filter). Empty mask: updates (micro-batch losses) whose covariance mask "
              "selects no token (Clip-Cov; – for methods without a mask, or logs from before the flag was "
              "logged). KL-Cov's mask is never empty by construction (it selects k = max(1, ratio x tokens) "
              "tokens of every update), so its cells say so rather than show a measured 0.", "",
              "| Run | steps in window | sampled, window | sampled, run | trained (after filter), window "
              "| trained (after filter), run | empty mask, window | empty mask, run |",
              "|---|---|---|---|---|---|---|---|"]
        for key, w in windows.items():
            fixed = key.split("/", 1)[-1] == "kl_cov"   # k >= 1 selected tokens per update: never empty
            empty = ["0 by construction" if fixed else _p(w[f"empty_mask_share_{s}"]) for s in ("window", "run")]
            L.append(f"| {key} | {w['steps_in_window']} | {_p(w['nonzero_var_share_window'])} | "
                     f"{_p(w['nonzero_var_share_run'])} | {_p(w.get('nonzero_var_trained_share_window'))} | "
                     f"{_p(w.get('nonzero_var_trained_share_run'))} | {empty[0]} | {empty[1]} |")
    L += ["", "## Process-validity judge calibration (supplement §12; `summary.json` → `judge_calibration`)", ""]
    jc = res.get("judge_calibration")
    if jc:
        L.append(f"- {jc.get('n', '–')} labelled items, coverage {_p(jc.get('coverage'))}: accuracy "
                 f"{_p(jc.get('accuracy'))}, macro-F1 {_p(jc.get('macro_f1'))}, accepted-valid precision "
                 f"{_p(jc.get('accepted_valid_precision'))}, valid recall {_p(jc.get('valid_recall'))} (TP {jc.get('tp')}, "
                 f"FN {jc.get('fn')}, FP {jc.get('fp')}, TN {jc.get('tn')}).")
    else:
        L.append("- not run: no `semantic/judge_calibration.json` beside the tables (`python -m infer.judge calibrate "
                 "--labels FILE --scale S` writes it).")
    L += ["", "## Partition audit gates (supplement §12; `summary.json` → `audit`)", ""]
    au = res.get("audit")
    if au and au.get("gates"):
        L.append(f"- {au.get('pairs', '–')} pairs over {au.get('trajectories', '–')} trajectories; human-human macro-F1 "
                 f"{_f3(au.get('hh_macro_f1'))}, automatic {_f3(au.get('auto_macro_f1'))}, gap {_f3(au.get('gap'))}, "
                 f"'different' precision {_f3(au.get('different_precision'))} / recall "
                 f"{_f3(au.get('different_recall'))}, coverage {_f3(au.get('coverage'))}.")
        pre = au.get("pre_adjudication") or {}
        if pre:  # the paper: automatic 0.777 against annotator A and 0.894 against B, before adjudication
            L.append("- before adjudication, automatic macro-F1 against each annotator: "
                     + ", ".join(f"{k.rpartition('_')[2]} {_f3(v)}" for k, v in sorted(pre.items()))
                     + " (paper: A 0.777, B 0.894; human-human 0.859).")
        L += [f"- gate {g}: {'pass' if ok else 'FAIL'}" for g, ok in au["gates"].items()]
        L.append(f"- all gates pass: {'yes' if au.get('all_gates_pass') else 'NO: the mode partition is not audited'}")
    else:
        L.append("- not run: no `semantic/audit/report.json` beside the tables (`invoke audit --report`).")
    return L


def _f3(x: Any) -> str:
    return "–" if not isinstance(x, (int, float)) else f"{x:.3f}"
