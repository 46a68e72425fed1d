"""``python -m benchmarks.aggregate``: paper-scale timing of the aggregation role.

Generates a synthetic paper-scale dataset in memory (12 runs x 5 probe checkpoints + 2 bases,
200 questions x 32 samples, ~600 tokens per sample; token rows at the 12 final checkpoints, ~46M
rows), runs the full aggregation (every analysis, tables and figures into a temp folder), and,
in the same process, times the naive per-resample Python loop of the paired bootstrap on a subset
of resamples, extrapolated to all endpoints x B (said in the output). Prints peak memory (RSS).
Targets (issue 6): full aggregation <= 60 s on 2 cores; bootstrap >= 10x faster than the loop.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB; ru_maxrss is KiB on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (worker processes)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.aggregate", description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--tokens", type=int, default=600, help="mean tokens per sample")
    p.add_argument("--naive-resamples", type=int, default=200, help="resamples of the timed naive loop (extrapolated)")
    p.add_argument("--parquet", action="store_true",
                   help="also write the dataset as Parquet and time the CLI read path")
    args = p.parse_args(argv)

    import numpy as np

    from aggregate import bootstrap, io, probe
    from benchmarks import synth
    from aggregate.cli import run
    from aggregate.parallel import n_workers
    from aggregate.settings import AggregateSettings

    st = AggregateSettings()
    t0 = time.perf_counter()
    tables = synth.generate(synth.SynthSpec(n_questions=args.questions, k=args.k, mean_tokens=args.tokens))
    t_gen = time.perf_counter() - t0
    n_tok = tables["tokens"].num_rows
    print(f"dataset: {tables['samples'].num_rows:,} samples, {n_tok:,} token rows, generated in {t_gen:.1f} s "
          f"(peak RSS so far {peak_rss_mib():,.0f} MiB)")

    with tempfile.TemporaryDirectory() as tmp:
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), cpu_seconds()
        res = run(io.from_tables(tables), st, Path(tmp) / "out", inputs="<in-memory paper-scale synthetic>", echo=False)
        t_full, c_full = time.perf_counter() - t0, cpu_seconds() - c0
        if args.parquet:
            src = synth.write_dataset(tables, Path(tmp) / "in")
            t0 = time.perf_counter()
            run(io.load_dataset(src), st, Path(tmp) / "out2", inputs=str(src), echo=False)
            t_parquet = time.perf_counter() - t0
    timings = res["timings_s"]
    print(f"full aggregation (all analyses, 8 tables x 2 formats, 4 figures x 2 formats): {t_full:.1f} s wall, "
          f"{c_full:.1f} CPU-s over {n_workers(st.workers)} worker(s)  [target <= 60 s: "
          f"{'PASS' if t_full <= 60 else 'FAIL'}]")
    print(f"  machine load average at start {load0:.1f} on {os.cpu_count()} CPUs (wall time is inflated when it "
          f"exceeds the CPU count)")
    print("  stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items() if k != "total"))
    if args.parquet:
        print(f"  same through Parquet on disk (load + aggregate): {t_parquet:.1f} s")

    # bootstrap: vectorised vs naive loop on the same paired lists, same process
    idx = probe.index_samples(tables["samples"])
    from aggregate import entropy
    from aggregate.io import numeric

    hbar = numeric(tables["samples"].column("token_entropy_mean"))
    q = entropy.question_stats(idx.row_qg, idx.reward, numeric(tables["samples"].column("logprob_sum")), hbar,
                               n_groups=len(idx.qg_ep), min_k_r=st.min_k_r)
    hs = hbar[np.lexsort((idx.sample, idx.reward, idx.row_qg))]
    start = np.concatenate([[0], np.cumsum(q.K)])
    lists = [probe._paired_lists(idx, hs, start, q, e) for e in range(idx.n_endpoints)]
    lists = [(s, f) for s, f in lists if s]
    B = st.bootstrap_resamples
    # CPU time of this process (both single-threaded here) so that machine load does not skew the ratio
    t0 = time.process_time()
    for e, (s, f) in enumerate(lists):
        bootstrap.paired_ratio_bootstrap(s, f, B, np.random.default_rng([st.bootstrap_seed, e]))
    t_vec = time.process_time() - t0
    s, f = max(lists, key=lambda x: len(x[0]))
    t0 = time.process_time()
    bootstrap.paired_ratio_bootstrap_naive(s, f, args.naive_resamples, np.random.default_rng(0))
    per = (time.process_time() - t0) / args.naive_resamples
    mean_nc = np.mean([len(x[0]) for x in lists])
    t_naive = per * B * len(lists) * mean_nc / len(s)  # loop cost ~ linear in n_c
    print(f"paired bootstrap, {len(lists)} endpoints x {B:,} resamples (mean n_c {mean_nc:.0f}): vectorised "
          f"{t_vec:.1f} CPU-s "
          f"(one process); naive per-resample loop {t_naive:,.0f} CPU-s, extrapolated from {args.naive_resamples} "
          f"resamples "
          f"of the largest endpoint (n_c = {len(s)}) scaled by n_c")
    print(f"  speed-up {t_naive / t_vec:.0f}x  [target >= 10x: {'PASS' if t_naive / t_vec >= 10 else 'FAIL'}]")
    naive_full = t_full - timings.get("probe_entropy_bootstrap", 0.0) + t_naive
    print(f"  whole aggregation with the naive loop instead: ~{naive_full:,.0f} s -> {naive_full / t_full:.0f}x slower")
    print(f"peak memory (max RSS): {peak_rss_mib():,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
