"""The supplement's descriptive tables: A1 (compute and software, from the manifests), A2 (evaluation
inventory, from the tables) and A3 (the checkpoint each artifact of each run uses, from the reporting points).
"""

from __future__ import annotations

from typing import Any

from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD
from aggregate.tables import BENCH_NAMES, DASH, EXT, Table, method_name, scale_name


def tableA1(res: dict, st: AggregateSettings) -> Table:
    """The paper's layout (Role, GPU, CPU, System memory, Execution pattern), hardware from the manifests (blank
    where a manifest does not record it), then the software each role recorded."""
    from aggregate.context import hardware

    t = Table("Table A1", "Compute infrastructure recorded by the manifests: per role and device, the hardware "
              "(blank where not recorded), the artifacts made there and the library versions.",
              ["Role", "GPU", "CPU", "System memory", "Execution pattern", "Libraries", "Lockfile"])
    rows = list(res.get("inventory") or [])
    prov = res.get("provenance") or {}
    if prov:
        device = str(prov.get("device", "unknown"))
        rows.append({"role": "aggregation", "device": device, **hardware(device, prov), "artifacts": 1,
                     "libraries": {k: v for k, v in (prov.get("libraries") or {}).items()
                                   if k in ("numpy", "scipy", "pyarrow")}, "lockfiles": [prov.get("lockfile", "")]})
    for r in rows:
        libs = ", ".join(f"{k} {v}" for k, v in sorted(r["libraries"].items())) or DASH
        n = r["artifacts"]
        pattern = {"training": f"{n} training run{'s' * (n != 1)}", "inference": f"{n} table part{'s' * (n != 1)}",
                   "aggregation": "this aggregation"}.get(r["role"], f"{n} artifacts")
        t.rows.append([r["role"], r["gpu"], r["cpu"], r["memory"], pattern, libs,   # each row's `hardware` fields
                       "; ".join(r.get("lockfiles", [])) or DASH])
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


def _steps_of(runs: list[dict], key: str) -> str:
    steps = sorted({r[key] for r in runs if r.get(key) is not None})
    return ", ".join(f"{s:,}" for s in steps) or DASH


def tableA3(res: dict, st: AggregateSettings) -> Table:
    """The paper's layout: one row per artifact, the ordinary reporting point of the nonfailed runs, then one
    column per run that fired the failure detector (the paper's Clip-Cov-7B) with its treatment."""
    trained = [r for r in res.get("runs", []) if r["method"] != BASE_METHOD]
    ok, failed = [r for r in trained if not r.get("failed")], [r for r in trained if r.get("failed")]
    names = [f"{method_name(r['method'])}-{scale_name(r['scale'])}" + (EXT if r.get("extension") else "")
             for r in failed]
    t = Table("Table A3", "Checkpoint policy: the raw step each artifact uses, for the nonfailed runs and for each "
              "run the failure detector marks.", ["Main-paper artifact", "Ordinary reporting point",
                                                  *(f"{n} treatment" for n in names)])
    if not trained:
        t.notes.append("No trained run.")
        return t
    traces = res.get("training_traces") or {}

    def trace(runs: list[dict]) -> str:
        got = [traces[k] for k in (f"{r['scale']}/{r['method']}" for r in runs) if k in traces and traces[k]["step"]]
        if not got:
            return DASH
        if not all(tr.get("epoch_known", True) for tr in got):   # the epoch is the last step: complete by fiat
            return ("Trace to the last logged step (this scale sets no epoch length: the run ends at its "
                    "`train.max_steps`, not after one epoch)")
        done = all(tr["step"][-1] >= tr["steps_per_epoch"] for tr in got)
        return "Complete one-epoch trace" if done else "Trace to the last logged step (incomplete epoch)"

    # the fit's transitions: the paper's methods only, as Table A7 (extension runs are fitted on their own)
    used = [x for x in res.get("transitions", []) if not x["excluded"]]
    ext = [x for x in res.get("extension_transitions", []) if not x["excluded"]]
    fit = (f"{len(used)} adjacent transitions" + (f" (and {len(ext)} of extension runs, fitted apart)" if ext else "")
           if used or ext else DASH)
    t.rows = [["Training-entropy trace", trace(ok)], ["Main benchmark table", f"Final checkpoint: step "
              f"{_steps_of(ok, 'table1_step')}"], ["Broad/paired reward ratios", "Final diagnostic checkpoint: step "
              f"{_steps_of(ok, 'probe_step')}"], ["Exact covariance fit", fit],
              ["Reward-stratified q99 table", f"Final endpoint proxy: step {_steps_of(ok, 'q99_step')}"]]
    for r in failed:
        tr = traces.get(f"{r['scale']}/{r['method']}")
        onset = f"; failure marked at step {r['onset_step']:,}" if r.get("onset_step") is not None else ""
        t.rows[0].append((trace([r]) if tr else DASH) + onset)
        t.rows[1].append(f"Step {_step(r.get('table1_step'))} pre-collapse milestone")
        t.rows[2].append(f"Step {_step(r.get('probe_step'))} pre-collapse probe")
        t.rows[3].append(_transitions(res, r["scale"], r["method"]))
        t.rows[4].append(f"Step {_step(r.get('q99_step'))} retained as failed diagnostic")
    if failed:
        t.notes.append("A run that fires the failure detector: benchmarks and ratios at its last checkpoint before "
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
