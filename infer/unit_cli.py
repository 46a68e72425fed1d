"""`python -m infer plan` and `python -m infer run-job`: measurement jobs as work units (orchestrate.units).

    python -m infer plan --scale tiny --method grpo --what all     one JSON line per job: {key, kind, payload, cost}
    python -m infer run-job --spec-file A.json [--spec-file B.json ...] [--backend auto|hf|vllm]

`plan` is what `enqueue` puts in the SQLite queue, printed instead; an engine (local or Ray) runs each
line with `run-job`. `run-job` runs its jobs in one process (the model is loaded once for jobs of the
same checkpoint), skips a job whose outputs are complete, and exits with
    0   every job done (or already complete)
    2   a job's inputs are wrong (missing checkpoint, changed configuration): a retry would fail again
    75  a transient failure (out of GPU memory, a lost connection: rcea.transient.TRANSIENT): worth retrying elsewhere
    1   anything else
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from rcea.progress import duration, timing
from rcea.transient import EXIT_TRANSIENT, is_transient

EXIT_INPUT = 2


def add_parsers(sub, scales, methods, kinds) -> None:
    p = sub.add_parser("plan", help="print the jobs of one training run as JSON lines (nothing is enqueued)")
    p.add_argument("--scale", required=True, choices=scales)
    p.add_argument("--method", required=True, choices=methods)
    p.add_argument("--what", default="all", choices=(*kinds, "all"))
    p.add_argument("--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r = sub.add_parser("run-job", help="run job specs (from `plan`) in this process; complete ones are skipped")
    r.add_argument("--spec-file", action="append", required=True, metavar="FILE",
                   help="a JSON job spec or JSON lines of specs (repeatable)")
    r.add_argument("--backend", default="auto", choices=("auto", "hf", "vllm"), help="generation backend")


def cmd_plan(args) -> int:
    from rcea.config import load_config

    from infer.plan import plan_jobs

    cfg = load_config(args.scale, None, args.override)
    try:
        jobs = plan_jobs(cfg, args.scale, args.method, args.what, args.override)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for job in jobs:
        print(json.dumps(job, sort_keys=True))
    return 0


def read_specs(paths) -> list[dict]:
    """Job specs from files holding one JSON object or JSON lines; a malformed file names itself."""
    specs = []
    for path in paths:
        text = Path(path).read_text()
        try:
            try:
                items = [json.loads(text)]          # one (possibly indented) JSON object
            except json.JSONDecodeError:
                items = [json.loads(line) for line in text.splitlines() if line.strip()]   # JSON lines
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON job spec ({exc}); expected a line of `python -m infer plan`")
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("payload"), dict) or "key" not in item:
                raise ValueError(f"{path}: a job spec needs key, kind and payload (as `python -m infer plan` prints)")
            specs.append(item)
    return specs


def cmd_run_job(args) -> int:
    try:
        specs = read_specs(args.spec_file)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    import torch

    from infer.jobs import JobInputError, run_job
    from infer.worker import Context
    from rcea.seeds import limit_cpu_threads

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        limit_cpu_threads()
    ctx = Context(device, args.backend)
    worst = 0
    for spec in specs:
        t0 = time.time()

        def progress(what, done, total, _key=spec["key"]):
            print(f"[run-job] {_key}: {what} {done}/{total} | {timing(time.time() - t0, done, total)}",
                  file=sys.stderr, flush=True)

        try:
            summary = run_job(spec["payload"], ctx, progress)
            print(f"[run-job] {spec['key']}: done {summary} in {duration(time.time() - t0)}", flush=True)
        except JobInputError as exc:
            print(f"[run-job] {spec['key']}: FAILED (inputs) {exc}", file=sys.stderr, flush=True)
            worst = worst or EXIT_INPUT
        except Exception as exc:  # the other jobs of the batch still run
            transient = is_transient(f"{type(exc).__name__}: {exc}")
            print(f"[run-job] {spec['key']}: FAILED ({'transient' if transient else 'error'}) "
                  f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}", file=sys.stderr, flush=True)
            worst = EXIT_TRANSIENT if transient else (worst if worst == EXIT_TRANSIENT else 1)
    return worst
