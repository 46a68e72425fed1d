"""`python -m rcea.status --scale S`: what the state store says about a scale (`invoke status`), at either engine.

Run on the host, in the tools environment, whatever the launcher: it reads the store files directly
(rcea.state.stores): the local engine's `<data>/state/<scale>.sqlite` (the queue's jobs and the unit records,
the host's folder that Compose bind-mounts) and a Ray study's store on the driver's own disk for the same data
folder. Before counting, the files decide (rcea.state.Store.settle): a pending or failed job whose table parts
are complete is marked done, so the counts never contradict the files. Exit 1 when no store exists.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


def describe(path: Path, root) -> list[str]:
    """The lines `invoke status` prints for one store file."""
    from rcea.state import Store
    from rcea.store import job_complete

    store = Store(path)
    try:
        def complete(kind: str, payload: dict) -> bool:
            try:
                return job_complete(kind, payload, root)
            except (KeyError, ValueError):   # a job that names no tables (an older plan): not known complete
                return False

        settled = store.settle(complete)
        counts = store.job_counts()
        jobs = store.rows("SELECT key, state, attempts, worker, error FROM jobs WHERE state IN ('running', 'failed') "
                          "ORDER BY id")
        units = store.units()
    finally:
        store.close()
    lines = [f"state store {path}:"]
    if settled:
        lines.append(f"  {len(settled)} job(s) marked done: their table parts were completed since")
    if any(counts.values()):
        lines.append("  jobs (the queue): " + ", ".join(f"{n} {state}" for state, n in counts.items()))
        for j in jobs:
            extra = f" worker={j['worker']}" if j["state"] == "running" else ""
            extra += f" error={j['error']}" if j["error"] else ""
            lines.append(f"    {j['state']:8s} {j['key']} attempts={j['attempts']}{extra}")
    by_role: dict[str, Counter] = {}
    for u in units:
        by_role.setdefault(u["role"] or "?", Counter())[u["state"] or "?"] += 1
    for role, states in by_role.items():
        lines.append(f"  units {role}: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items())))
    for u in units:
        if u["state"] == "failed":
            lines.append(f"    failed   {u['key']} attempts={u['attempts']} error={(u['error'] or '')[:300]}")
    if not any(counts.values()) and not units:
        lines.append("  empty: nothing enqueued or run yet")
    return lines


def main(argv=None) -> int:
    from rcea.config import SCALES
    from rcea.layout import state_path
    from rcea.paths import data_dir
    from rcea.state import driver_path, stores

    p = argparse.ArgumentParser(prog="python -m rcea.status", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", required=True, choices=SCALES)
    args = p.parse_args(argv)
    root = data_dir()
    found = stores(args.scale, root)
    if not found:
        print(f"no state store for scale {args.scale}: neither {state_path(args.scale, root)} (the local engine's) "
              f"nor {driver_path(root, args.scale)} (a Ray study's) exists; start one with "
              f"`invoke study --scale {args.scale}` (or `invoke infer --scale {args.scale} --method M`)",
              file=sys.stderr)
        return 1
    for path in found:
        print("\n".join(describe(path, root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
