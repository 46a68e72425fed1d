"""The supplement's descriptive tables: A1 (compute and software, from the manifests), A2 (evaluation
inventory, from the tables) and A3 (the checkpoint each artifact of each run uses, from the reporting points).
"""

from __future__ import annotations

from typing import Any

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from aggregate.tables import BENCH_NAMES, DASH, EXT, Table, method_name, scale_name


def tableA1(res: dict, st: AggregateSettings) -> Table:
    t = Table("Table A1", "Compute and software recorded by the manifests: per role and device, the artifacts made "
              "there and the library versions.", ["Role", "Device", "Artifacts", "Libraries", "Lockfile"])
    rows = list(res.get("inventory") or [])
    prov = res.get("provenance") or {}
    if prov:
        rows.append({"role": "aggregation", "device": prov.get("device", "unknown"), "artifacts": 1,
                     "libraries": {k: v for k, v in (prov.get("libraries") or {}).items()
                                   if k in ("numpy", "scipy", "pyarrow")}, "lockfiles": [prov.get("lockfile", "")]})
    for r in rows:
        libs = ", ".join(f"{k} {v}" for k, v in sorted(r["libraries"].items())) or DASH
        t.rows.append([r["role"], r["device"], str(r["artifacts"]), libs, "; ".join(r.get("lockfiles", [])) or DASH])
    if not res.get("inventory"):
        t.notes.append("No training or inference manifest beside the input tables (a bare dataset folder): only this "
                       "aggregation's own provenance is shown.")
    return t


def tableA2(res: dict, st: AggregateSettings) -> Table:
    t = Table("Table A2", "Evaluation inventory: questions per benchmark in the greedy, fixed-probe and pass@k tables.",
              ["Benchmark", "Greedy", "Probe", f"Pass@{st.pass_k}", "Main use"])
    inv = res.get("eval_inventory") or {}
    order = [b for b in st.benchmark_order if b in inv] + sorted(set(inv) - set(st.benchmark_order))
    for b in order:
        c = inv[b]
        use = ", ".join(u for u, k in (("Greedy", "greedy"), (f"pass@{st.pass_k}", "passk"), ("probe", "probe"))
                        if k in c)
        t.rows.append([BENCH_NAMES.get(b, b), *(str(c[k]) if k in c else DASH for k in ("greedy", "probe", "passk")),
                       use])
    if not inv:
        t.notes.append("No greedy, samples or passk table.")
    return t


def _transitions(res: dict, scale: str, method: str) -> str:
    tr = [x for x in res.get("transitions", []) + res.get("extension_transitions", [])
          if (x["scale"], x["method"]) == (scale, method)]
    if not tr:
        return DASH
    n = len(tr)
    return f"{n} excluded (failed run)" if any(x["excluded"] for x in tr) else f"{n} used"


def _step(s: int | None) -> str:
    return DASH if s is None else f"{s:,}"


def tableA3(res: dict, st: AggregateSettings) -> Table:
    t = Table("Table A3", "Checkpoint policy: the raw step each artifact of each run uses.",
              ["Run", "Training-entropy trace", "Main benchmark table", "Reward ratios / retention",
               "Covariance transitions", "q99 table"])
    traces = res.get("training_traces") or {}
    for r in res.get("runs", []):
        if r["method"] == BASE_METHOD:
            continue
        key = f"{r['scale']}/{r['method']}"
        tr = traces.get(key)
        if tr and tr["step"]:
            done = tr["step"][-1] >= tr["steps_per_epoch"]
            trace = f"steps {tr['step'][0]:,}-{tr['step'][-1]:,}" + ("" if done else " (incomplete epoch)")
            if r.get("failed"):
                trace += f"; failure marked at {r['onset_step']:,}"
        else:
            trace = DASH
        t.rows.append([f"{method_name(r['method'])}-{scale_name(r['scale'])}" + ("†" if r.get("failed") else "")
                       + (EXT if r.get("extension") else ""), trace, _step(r.get("table1_step")),
                       _step(r.get("probe_step")), _transitions(res, r["scale"], r["method"]),
                       _step(r.get("q99_step")) + (" (failed diagnostic)" if r.get("failed") and r.get("q99_step")
                                                  else "")])
    if any(r.get("failed") for r in res.get("runs", [])):
        t.notes.append("† A run that fires the failure detector: benchmarks and ratios at its last checkpoint before "
                       "the onset, its transitions left out of the covariance fit, its final q99 kept as a diagnostic.")
    return t


SUPPLEMENT = {"tableA1": tableA1, "tableA2": tableA2, "tableA3": tableA3}


def build_supplement(res: dict, st: AggregateSettings) -> dict[str, Table]:
    return {k: f(res, st) for k, f in SUPPLEMENT.items()}
PROVENANCE: dict[str, Any] = {
    "tableA1": ("Table A1 (compute and software)", "manifests of the training runs and table parts"),
    "tableA2": ("Table A2 (evaluation inventory)", "greedy, samples, passk"),
    "tableA3": ("Table A3 (checkpoint policy)", "reporting points, covariance, steps.jsonl"),
}
