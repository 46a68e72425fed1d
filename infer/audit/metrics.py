"""Partition-audit metrics and the five predeclared gates (docs/estimators.md#partition-audit; paper supplement §12).

Pairs are within-question trajectory pairs; label 1 = "different" strategy, 0 = "same". The automatic
label comes from the frozen mode partition; a pair with a trajectory without an automatic mode
(uncertain or missing) is excluded from the automatic F1 and counts against coverage.
"""

from __future__ import annotations

from rcea.stats import audit_gate_values, audit_gates, different_precision_recall, macro_f1, pair_labels  # noqa: F401


def audit_report(pairs: list[dict], trajectory_modes: dict[str, str | None]) -> dict:
    """`pairs`: dicts with a, b (trajectory ids), human_a, human_b (0/1 or None), adjudicated (0/1 or None);
    adjudicated falls back to the raters' common label when they agree.
    `trajectory_modes`: automatic mode (or None) of every audit trajectory."""
    for p in pairs:
        ma, mb = trajectory_modes.get(p["a"]), trajectory_modes.get(p["b"])
        p["auto"] = None if ma is None or mb is None else int(ma != mb)
        if p.get("adjudicated") is None and p.get("human_a") is not None and p["human_a"] == p.get("human_b"):
            p["adjudicated"] = p["human_a"]
    both = [p for p in pairs if p.get("human_a") is not None and p.get("human_b") is not None]
    final = [p for p in pairs if p.get("adjudicated") is not None]
    scored = [p for p in final if p["auto"] is not None]
    hh = macro_f1([p["human_a"] for p in both], [p["human_b"] for p in both]) if both else float("nan")
    auto = macro_f1([p["adjudicated"] for p in scored], [p["auto"] for p in scored]) if scored else float("nan")
    prec, rec = different_precision_recall([p["adjudicated"] for p in scored], [p["auto"] for p in scored])
    n_traj = len(trajectory_modes)
    cov = sum(m is not None for m in trajectory_modes.values()) / n_traj if n_traj else float("nan")
    pre = {}
    for who in ("human_a", "human_b"):
        sc = [p for p in pairs if p.get(who) is not None and p["auto"] is not None]
        f1 = macro_f1([p[who] for p in sc], [p["auto"] for p in sc]) if sc else float("nan")
        pre[f"auto_vs_{who[-1].upper()}"] = f1
    gap = hh - auto
    thresholds = audit_gate_values()   # the [audit] settings of configs/base.toml
    gates = audit_gates(hh, auto, prec, rec, cov, thresholds)
    return {
        "pairs": len(pairs), "pairs_both_raters": len(both), "pairs_adjudicated": len(final),
        "pairs_pending_adjudication": sum(1 for p in both
                                          if p["human_a"] != p["human_b"] and p.get("adjudicated") is None),
        "pairs_scored_auto": len(scored), "trajectories": len(trajectory_modes),
        "hh_macro_f1": hh, "auto_macro_f1": auto, "gap": gap, "different_precision": prec, "different_recall": rec,
        "coverage": cov, "pre_adjudication": pre, "gates": gates, "all_gates_pass": all(gates.values()),
        "thresholds": thresholds,
    }
