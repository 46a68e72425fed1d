"""``python -m aggregate --input DIR --output DIR``: all RCEA quantities, tables and figures.

DIR holds the schema tables (``rcea.schema``) as DIR/<table>.parquet or DIR/<table>/*.parquet.
Writes OUT/summary.json, OUT/report.md, OUT/tables/<table>.{md,tex}, OUT/figures/<fig>.{png,pdf},
and prints a first reward-conditioned entropy table. Missing inputs disable only the outputs that
need them (said in report.md and on the terminal). An input file that cannot be used (a truncated
part, a part lacking a required column) stops the run with exit 1, naming each file and why;
``--skip-bad-parts`` aggregates the rest and lists every skipped file in report.md and summary.json. Heavy imports happen after argument parsing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    from aggregate.settings import AggregateSettings  # dataclass only: keeps --help light

    d = AggregateSettings()
    p = argparse.ArgumentParser(prog="python -m aggregate", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="dataset folder with samples/tokens/covariance/greedy/passk tables")
    p.add_argument("--output", required=True, help="output folder (created)")
    p.add_argument("--scale", default=None, help="read [aggregate] settings from the project config of this scale")
    p.add_argument("--min-k-r", type=int, default=None,
                   help=f"report a conditional quantity only if K_r >= this (default {d.min_k_r})")
    p.add_argument("--bootstrap-resamples", type=int, default=None,
                   help=f"bootstrap resamples (default {d.bootstrap_resamples})")
    p.add_argument("--bootstrap-seed", type=int, default=None, help=f"bootstrap seed (default {d.bootstrap_seed})")
    p.add_argument("--rarefaction-seed", type=int, default=None,
                   help=f"rarefaction seed (default {d.rarefaction_seed})")
    p.add_argument("--rarefaction-draws", type=int, default=None,
                   help=f"rarefaction draws R (default {d.rarefaction_draws})")
    p.add_argument("--min-mode-m", type=int, default=None, help=f"retention eligibility m_min (default {d.min_mode_m})")
    p.add_argument("--pass-k", type=int, default=None, help=f"k of the reported pass@k (default {d.pass_k})")
    p.add_argument("--skip-bad-parts", action="store_true",
                   help="leave out unreadable parts / parts lacking a column (listed in the report) instead of stopping")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--if-changed", action="store_true",
                   help="keep the outputs of the last run into --output when nothing they are made from has changed "
                        "(aggregate/fresh.py; the study's)")
    p.add_argument("--quiet", action="store_true", help="no terminal summary")
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line; a full disk (a table, a figure: matplotlib's own error included) ends in one line
    (rcea.diskfull), every output written whole or not at all (rcea.store.atomic_write)."""
    from rcea.diskfull import guard

    return guard(lambda: _main(argv), folders=lambda: _written(argv))


def _written(argv) -> list:
    from rcea.diskfull import watched

    try:
        out = parser().parse_known_args(argv)[0].output
    except SystemExit:
        out = None
    return [*watched(), *([out] if out else [])]


def _main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from aggregate import io
    from aggregate.settings import load_settings

    options = dict(min_k_r=args.min_k_r, bootstrap_resamples=args.bootstrap_resamples,
                   bootstrap_seed=args.bootstrap_seed, rarefaction_seed=args.rarefaction_seed,
                   rarefaction_draws=args.rarefaction_draws, min_mode_m=args.min_mode_m, pass_k=args.pass_k)
    try:
        st = load_settings(args.scale, **options)
    except ValueError as exc:  # rcea.config.ConfigError names the valid choices; a range names the option
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from aggregate import fresh

    digest = fresh.fingerprint(args, st, args.input, args.output) if Path(args.input).is_dir() else ""
    last = fresh.kept(args.output, digest) if args.if_changed and digest else None
    if last is not None:   # the same inputs: the outputs are theirs
        if last.get("note"):
            print(f"note: {last['note']}", file=sys.stderr)
        if not args.quiet and last.get("terminal"):
            print(last["terminal"])
        print(f"aggregate: nothing it reads has changed since {args.output}/report.md was written: kept "
              "(without --if-changed it recomputes)")
        return 0
    try:
        ds = io.load_dataset(args.input, skip_bad_parts=args.skip_bad_parts)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except io.BadParts as exc:
        print(f"error: {len(exc.bad)} input file(s) cannot be used; nothing was aggregated:", file=sys.stderr)
        for b in exc.bad:
            print(f"  {b['file']}: {b['reason']}", file=sys.stderr)
        print("Fix or remove them (a rerun of the step that wrote them), or pass --skip-bad-parts to aggregate "
              "the other parts (the report then lists every skipped file).", file=sys.stderr)
        return 1
    for b in ds.skipped:
        print(f"warning: skipped {b['file']}: {b['reason']}", file=sys.stderr)
    if not ds.tables and not ds.skipped:
        print(f"error: {args.input} holds none of the schema tables ({', '.join(io.TABLES)}: <table>.parquet or "
              f"<table>/*.parquet with manifests); make them with `scripts/run demo` (tiny) or `invoke study`, "
              "or write them as docs/schema.md describes", file=sys.stderr)
        return 2
    from aggregate import made_with

    try:   # the settings the tables were made with (aggregate.made_with), then the options above
        st, said = made_with.resolve(ds.parts, args.scale, options, st)
    except made_with.Mismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if said:
        ds.notes.append(said)
        print(f"note: {said}", file=sys.stderr)
    out = Path(args.output)
    problem = unwritable(out, figures=not args.no_figures)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    from aggregate.context import load_context

    fresh.forget(out)
    try:
        res = run(ds, st, out, inputs=str(args.input), draw=not args.no_figures, echo=not args.quiet,
                  context=load_context(Path(args.input)))
        if digest and not ds.skipped:   # a run that left out a part always recomputes
            fresh.record(out, digest, res.get("terminal", ""), said or "")
    except OSError as exc:   # the folder became unwritable, or the disk filled, while it ran
        from rcea.diskfull import cause

        if cause(exc, [out]):
            raise   # main's guard says it in its one line: the folder, the space left and needed
        print(f"error: {_cannot_write(out, exc)}", file=sys.stderr)
        return 1
    return 0


def _cannot_write(out: Path, exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(out) else ""
    return (f"cannot write {out}{where}: {exc.strerror or exc}; choose a writable --output folder (or fix its "
            "permissions / free space) and rerun")


def unwritable(out: Path, figures: bool = True) -> str:
    """'' when the output folder (and its tables/ and figures/) can be created and written, else why not:
    checked before any work, so a folder that cannot take the results stops the run in one line."""
    import tempfile

    try:
        for d in (out, out / "tables", *([out / "figures"] if figures else [])):
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=d):
                pass
    except OSError as exc:
        return _cannot_write(out, exc)
    return ""


def read_seed_noise(out: Path) -> list[dict]:
    """`python -m train.noise_study` results written beside the report (seeds-<method>.json), if any."""
    import json

    found = []
    for p in sorted(out.glob("seeds-*.json")):
        try:
            found.append(json.loads(p.read_text()))
        except ValueError:
            continue
    return found


def run(ds, st, out: Path, inputs: str = "", draw: bool = True, echo: bool = True, context=None) -> dict:
    """Aggregate ``ds`` into ``out`` (``context``: aggregate.context.load_context); returns the results dict."""
    from aggregate import figures, pipeline, report, supplement, tables

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    res = pipeline.run_aggregation(ds, st, timings, context)
    res["skipped_parts"] = list(ds.skipped)
    res["provenance"] = report.provenance()
    res["seed_noise"] = read_seed_noise(out)
    out.mkdir(parents=True, exist_ok=True)
    from rcea.store import remove_temps

    remove_temps(out)   # what a killed aggregation left (never copied to results/: rcea.publish skips them too)
    t1 = time.perf_counter()
    tabs = {**tables.build_tables(res, st), **supplement.build_supplement(res, st)}  # Tables 1-A9, then A1-A3
    for key, t in tabs.items():
        report.write_text(out / "tables" / f"{key}.md", t.markdown())
        report.write_text(out / "tables" / f"{key}.tex", t.latex())
    timings["tables"] = time.perf_counter() - t1
    figs: dict[str, list[str]] = {}
    if draw:
        t1 = time.perf_counter()
        (out / "figures").mkdir(exist_ok=True)
        figs = figures.build_figures(res, st, out / "figures")
        timings["figures"] = time.perf_counter() - t1
    else:
        res["notes"].append("figures skipped (--no-figures)")
        figures.remove_stale(out / "figures", set())   # an earlier run's figures are not this run's
    timings["total"] = time.perf_counter() - t0
    res["timings_s"] = timings
    report.write_text(out / "report.md", report.report_md(res, st, tabs, figs, inputs))
    import json

    report.write_text(out / "summary.json", json.dumps(report.summary(res), indent=1))
    # the terminal shows each run's final checkpoint (and the base); report.md has every checkpoint
    last = final_endpoints(res.get("endpoints", []))
    lines = [report.terminal_summary({**res, "endpoints": last}, st)]
    if len(last) < len(res.get("endpoints", [])):
        lines.append(f"(final checkpoints; all {len(res['endpoints'])} endpoints in report.md)")
    res["terminal"] = "\n".join(lines)   # what a rerun with nothing changed prints again (aggregate/fresh.py)
    if echo:
        print(res["terminal"])
        print(f"wrote {out}/summary.json, report.md, tables/ ({len(tabs)}), figures/ "
              f"({sum(map(len, figs.values()))} files)")
    return res


def final_endpoints(endpoints: list[dict]) -> list[dict]:
    """The last step of each (scale, method), in their first-seen order."""
    last: dict[tuple, dict] = {}
    for e in endpoints:
        key = (e.get("scale"), e.get("method"))
        if key not in last or (e.get("step") or 0) >= (last[key].get("step") or 0):
            last[key] = e
    return list(last.values())
