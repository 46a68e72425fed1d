"""`python -m infer enqueue|worker|status`: the inference role's command line.

    python -m infer enqueue --scale tiny --method grpo|base --what all [--override probe.k=4] [--retry-failed]
    python -m infer worker  [--scale tiny] [--gpu 0] [--until-empty] [--processes 2] [--backend auto|hf|vllm] [--lease 300] [--report 30] [--progress]
    python -m infer status  [--scale tiny] [--jobs] [--summary] [--check] [--follow 30]
    python -m infer hold    [--scale tiny]    (the queue stays open, more jobs may come, until stdin closes)
    python -m infer plan    --scale tiny --method grpo --what all      (job specs as JSON lines; infer/unit_cli.py)
    python -m infer run-job --spec-file JOB.json [--spec-file ...]     (run specs in this process, idempotent)

A worker (and `status`) takes its scale from --scale, else from $RCEA_SCALE (what compose.yaml passes to each worker
container; `invoke workers` / `invoke study` set it), and refuses to start without one or without a queue.
Inside a Compose worker, $WORKER_RANK names it in the queue (worker-<rank>@<host>:<pid>). With --progress (what
`invoke workers` and the study pass to local workers) every worker's own output goes to
<data>/logs/workers/<scale>.log and the terminal gets the queue's counts (infer/console.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def cmd_enqueue(args) -> int:
    from rcea.config import load_config

    from infer.plan import plan_jobs
    from infer.queue import Queue
    from rcea.layout import state_path
    from rcea.paths import data_dir
    from rcea.store import job_complete

    cfg = load_config(args.scale, None, args.override)
    try:
        jobs = plan_jobs(cfg, args.scale, args.method, args.what, args.override)  # before the queue: no empty queue
    except FileNotFoundError as exc:   # no checkpoint yet, or a finished run that lost one (rcea.store.DamagedRun)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    q = Queue(state_path(args.scale))
    before = {j["key"]: j for j in q.jobs()}
    counts: dict[str, int] = {}
    for job in jobs:
        complete = job_complete(job["kind"], job["payload"], data_dir())   # the files decide whether a done job is done
        result = q.enqueue(job["key"], job["kind"], job["payload"], job["cost"], retry_failed=args.retry_failed,
                           complete=complete)
        counts[result] = counts.get(result, 0) + 1
        why = ""
        if result == "complete":
            why = "  (its table parts are complete: marked done)"
        elif result == "redo":
            why = "  (marked done, but an output part is missing or incomplete: it runs again)"
        elif result == "retried":
            old = before[job["key"]]
            why = f"  (was failed: {old['error']}; retry round {old['rounds'] + 1})"
        print(f"{result:8s} {job['key']}{why}")
    print(f"queue {state_path(args.scale)}: {counts}")
    return 0


def worker_label() -> str:
    from infer.queue import worker_name

    rank = os.environ.get("WORKER_RANK", "")
    return f"worker-{rank}@{worker_name()}" if rank else worker_name()


def worker_scale(args) -> str | None:
    """--scale, else $RCEA_SCALE; None (after saying why) when neither names a known scale."""
    from rcea.config import SCALES

    scale = args.scale or os.environ.get("RCEA_SCALE", "")
    if scale not in SCALES:
        where = "--scale" if args.scale else "$RCEA_SCALE"
        print(f"error: the worker needs a scale ({', '.join(SCALES)}): {where} is {scale!r}. Start workers with "
              "`invoke workers --scale S` (or `invoke study --scale S`), which pass it to every container.",
              file=sys.stderr)
        return None
    return scale


def cmd_worker(args) -> int:
    from rcea.layout import state_path

    args.scale = worker_scale(args)
    if args.scale is None:
        return 2
    rank, num = os.environ.get("WORKER_RANK", ""), os.environ.get("NUM_WORKERS", "")
    if rank.isdigit() and num.isdigit() and int(rank) >= int(num):  # started with the whole profile
        print(f"worker {rank}: not needed (NUM_WORKERS={num}); exiting", flush=True)
        return 0
    if args.processes < 1:
        print(f"error: --processes {args.processes}: at least 1", file=sys.stderr)
        return 2
    from rcea.launch import launch

    if args.processes > 1 and (args.gpu is not None or launch(args.scale).gpus):
        print("error: --processes is for the tiny scale on CPU; on GPUs start one worker per GPU "
              "(`invoke workers --scale S --num-workers N`)", file=sys.stderr)
        return 2
    if not state_path(args.scale).exists():  # checked before the queue is opened: no empty queue left behind
        print(f"error: no queue at {state_path(args.scale)}: nothing was enqueued at scale {args.scale}. "
              f"Enqueue the measurements first: `invoke infer --scale {args.scale} --method M` for each trained "
              f"method, or run the whole study: `invoke study --scale {args.scale}`.", file=sys.stderr)
        return 2
    try:
        ahead = not args.until_empty or _work_ahead(args.scale)   # before torch, vLLM and the other processes load
    except KeyboardInterrupt:   # Ctrl-C while it waits for a job (no job held, nothing loaded yet)
        # With --progress a driver (a study, `invoke workers`) started it in the terminal's process group and
        # says the one line of the interrupt itself; this output is still the terminal's (infer.console not yet)
        if not args.progress:
            print("worker: interrupted (Ctrl-C) while waiting for a job; it held none", file=sys.stderr)
        return 130
    if not ahead:
        print(f"worker: nothing to do: no job is pending or running and the queue {state_path(args.scale)} is "
              "closed", flush=True)
        return 0
    if args.progress:   # per-job lines and library warnings to the log, one progress line here (infer.console)
        from infer.console import watch_queue

        watch_queue(args.scale)
    others = [_sibling_worker(args) for _ in range(args.processes - 1)]
    if args.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)   # before torch is imported
    from infer.jobs import run_job
    from infer.queue import Queue
    from infer.worker import Context, run_worker
    from rcea.layout import state_path
    from rcea.seeds import limit_cpu_threads

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        limit_cpu_threads()
    from rcea.state import OperationalError, StoreDamaged

    q = Queue(state_path(args.scale), lease_s=args.lease)
    try:
        stats = run_worker(q, run_job, Context(device, args.backend), until_empty=args.until_empty,
                           poll_s=args.poll, report_s=args.report, name=worker_label())
    except OperationalError as exc:  # e.g. "database or disk is full": the real error, in one line
        print(f"error: the state store {q.path} cannot be written: {exc}. Free disk space there (df -h) and start "
              "the workers again: finished jobs stay done, the interrupted one is redone.", file=sys.stderr)
        for other in others:
            other.wait()
        return 1
    except StoreDamaged as exc:   # damaged while the workers ran (one opened after the damage rebuilds it)
        print(f"error: {exc}", file=sys.stderr)
        for other in others:
            other.wait()
        return 1
    print(f"worker finished: {stats}; queue: {q.counts()}")
    return max([0, *(p.wait() for p in others)])


def _work_ahead(scale: str) -> bool:
    """Whether a job is pending, waiting (cheaply) while the queue is open or another worker holds a job: False
    once it is drained (infer.queue wait_for_work)."""
    from infer.queue import Queue
    from rcea.layout import state_path

    q = Queue(state_path(scale))
    try:
        return q.wait_for_work()
    finally:
        q.store.close()


def _sibling_worker(args):
    """Another worker process on the same queue (`--processes N`: the tiny scale's CPU cores); it is in this
    worker's process group, so a kill of the study stops it too, and its claims are reclaimed at once."""
    import subprocess

    argv = [sys.executable, "-m", "infer", "worker", "--scale", args.scale, "--backend", args.backend,
            "--lease", f"{args.lease:g}", "--report", f"{args.report:g}", "--poll", f"{args.poll:g}",
            *(["--until-empty"] if args.until_empty else [])]
    return subprocess.Popen(argv)


def cmd_hold(args) -> int:
    """Hold the scale's queue open (infer.queue: workers with --until-empty wait for more jobs) until this
    process's stdin ends: the study holds the pipe while its training runs may still enqueue, and closes it
    after the train stage; a killed study closes it too (and a killed holder's heartbeat goes stale)."""
    import select
    import signal
    import time

    from infer.queue import Queue, worker_name
    from rcea.layout import state_path

    args.scale = worker_scale(args)
    if args.scale is None:
        return 2
    stopped = []   # handlers first: a Ctrl-C right after "open" is printed still closes the queue
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.append(True))
    q, holder = Queue(state_path(args.scale)), f"hold@{worker_name()}"
    q.open(holder)
    print(f"queue {q.path}: open (held by {holder} until its stdin ends)", flush=True)
    # stdin is watched here, in the only thread: a thread blocked reading it at exit aborts the interpreter
    # ("could not acquire lock for <stdin> at interpreter shutdown"), a second line after Ctrl-C.
    fd, next_beat = sys.stdin.fileno(), time.monotonic() + args.beat
    while not stopped:
        ready, _, _ = select.select([fd], [], [], max(0.0, min(0.5, next_beat - time.monotonic())))
        if ready and not os.read(fd, 65536):   # end of input: the study closed the pipe
            break
        if time.monotonic() >= next_beat:
            if not q.beat(holder):   # closed (or re-opened) by another holder: nothing left to hold
                break
            next_beat = time.monotonic() + args.beat
    q.close(holder)
    try:
        print(f"queue {q.path}: closed", flush=True)
    except BrokenPipeError:   # the study that read this pipe was killed: the queue is closed, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit's flush
    return 0


def cmd_status(args) -> int:
    """The queue's counts and its running and failed jobs; the files decide first (the store never contradicts
    them: a pending or failed job whose table parts are complete is marked done), and `--check` decides from
    the files alone: exit 3 unless every job's table parts are complete."""
    from infer.queue import Queue
    from rcea.layout import state_path
    from rcea.paths import data_dir
    from rcea.store import job_complete

    args.scale = worker_scale(args)
    if args.scale is None:
        return 2
    path = state_path(args.scale)
    if not path.exists():
        print(f"no queue at {path}; enqueue first (python -m infer enqueue --scale {args.scale} ...)")
        return 1
    q = Queue(path)
    if args.follow:
        return follow(q, args.follow)
    complete = {}

    def files_say(kind: str, payload: dict) -> bool:   # the one verdict on a job: its table parts
        key = json.dumps([kind, payload], sort_keys=True)
        if key not in complete:
            try:
                complete[key] = job_complete(kind, payload, data_dir())
            except (KeyError, ValueError):   # a job that names no tables (an older plan): not known complete
                complete[key] = False
        return complete[key]

    settled = q.store.settle(files_say)
    if settled:
        print(f"{len(settled)} job(s) marked done: their table parts were completed since they were marked "
              "pending or failed")
    counts = q.counts()
    print(f"queue {path}: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    jobs = q.jobs()
    for j in jobs:
        if args.jobs or j["state"] in ("running", "failed"):
            extra = f" worker={j['worker']}" if j["state"] == "running" else ""
            extra += f" error={j['error']}" if j["error"] else ""
            print(f"  {j['state']:8s} {j['key']:28s} attempts={j['attempts']}{extra}")
    if args.summary:
        from infer.tables import greedy_summary
        from rcea.layout import tables_dir

        print(greedy_summary(tables_dir(args.scale) / "greedy").to_string(index=False))
    missing = [j["key"] for j in jobs if args.check and not files_say(j["kind"], json.loads(j["payload"]))]
    if missing:
        from infer.queue import KILLED_ROUNDS

        print(f"check: {len(missing)} job(s) lack complete table parts ({', '.join(missing[:3])}"
              f"{', ...' if len(missing) > 3 else ''}; queue: {counts}); a job whose workers were killed (lease "
              f"expired) is retried when you rerun the study, up to {KILLED_ROUNDS} times; for the others see the "
              f"errors above, fix, then `python -m infer enqueue --scale {args.scale} --method M --retry-failed` "
              "and run the workers again", file=sys.stderr)
        return 3
    return 0


def follow(q, every_s: float, sleep=None) -> int:
    """Until nothing is pending or running and the queue is not open: the counts whenever they change (at least
    every `every_s` seconds); then 0 when every job is done, 3 when some failed (each listed). The
    `infer-workers` group."""
    import time

    sleep = sleep or time.sleep
    last, said = None, 0.0
    while True:
        counts = q.counts()
        if counts != last or time.monotonic() - said >= every_s:
            print(f"queue: {counts}", flush=True)
            last, said = counts, time.monotonic()
        if q.drained(counts):   # nothing pending or running, and no study holds the queue open
            break
        sleep(min(every_s, 2.0))
    failed = [j for j in q.jobs() if j["state"] == "failed"]
    for j in failed:
        print(f"  failed {j['key']} attempts={j['attempts']} error={j['error']}", file=sys.stderr)
    print(f"queue drained: {counts['done']} done, {len(failed)} failed", flush=True)
    return 3 if failed else 0


def main(argv=None) -> int:
    """The command line; a full disk (a table part, the queue's SQLite) ends in one line (rcea.diskfull)."""
    from rcea.diskfull import guard

    return guard(lambda: _main(argv))


def _main(argv=None) -> int:
    from rcea.config import BASE_METHOD, METHODS, SCALES

    from infer.plan import KINDS
    from infer.queue import BEAT_S

    p = argparse.ArgumentParser(prog="python -m infer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("enqueue", help="add the jobs of one training run (idempotent)")
    e.add_argument("--scale", required=True, choices=SCALES)
    e.add_argument("--method", required=True, choices=(*METHODS, BASE_METHOD), help="a trained method, or base (the untrained policy's jobs only)")
    e.add_argument("--what", default="all", choices=(*KINDS, "all"))
    e.add_argument("--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    e.add_argument("--retry-failed", action="store_true", help="make failed jobs pending again")
    w = sub.add_parser("worker", help="run queued jobs")
    w.add_argument("--scale", default=None, help=f"{', '.join(SCALES)} (default: $RCEA_SCALE; required)")
    w.add_argument("--gpu", type=int, default=None, help="GPU index this worker uses")
    w.add_argument("--until-empty", action="store_true",
                   help="exit when nothing is pending or running and the queue is not held open (`hold`)")
    w.add_argument("--backend", default="auto", choices=("auto", "hf", "vllm"), help="generation backend")
    w.add_argument("--lease", type=float, default=float(os.environ.get("RCEA_LEASE_S") or 300.0),
                   help="seconds a claim lasts without a heartbeat (default: $RCEA_LEASE_S or 300); a holder "
                        "on this host whose process is gone is reclaimed at once")
    w.add_argument("--report", type=float, default=30.0,
                   help="while other workers hold the remaining jobs, say what is awaited every this many seconds")
    w.add_argument("--poll", type=float, default=5.0, help="seconds between claims when the queue is empty")
    w.add_argument("--processes", type=int, default=1,
                   help="tiny scale: this many worker processes on the queue (one CPU thread each)")
    w.add_argument("--progress", action="store_true",
                   help="print one progress line for the queue; every worker's own output goes to "
                        "<data>/logs/workers/<scale>.log")
    h = sub.add_parser("hold", help="keep the queue open (more jobs may come) until stdin ends")
    h.add_argument("--scale", default=None, help=f"{', '.join(SCALES)} (default: $RCEA_SCALE)")
    h.add_argument("--beat", type=float, default=BEAT_S, help="seconds between heartbeats")
    s = sub.add_parser("status", help="show the queue")
    s.add_argument("--scale", default=None, help=f"{', '.join(SCALES)} (default: $RCEA_SCALE)")
    s.add_argument("--jobs", action="store_true", help="list every job")
    s.add_argument("--summary", action="store_true", help="greedy accuracy, boxed rate, mean length per checkpoint")
    s.add_argument("--check", action="store_true", help="exit 3 unless every job's table parts are complete")
    s.add_argument("--follow", type=float, default=0.0, metavar="SECONDS",
                   help="wait until nothing is pending or running, printing the counts as they change (at least "
                        "every SECONDS); exit 3 if some job failed (the infer-workers service runs this)")
    from infer import unit_cli

    unit_cli.add_parsers(sub, SCALES, METHODS, KINDS)
    args = p.parse_args(argv)
    return {"enqueue": cmd_enqueue, "worker": cmd_worker, "hold": cmd_hold, "status": cmd_status, "plan": unit_cli.cmd_plan,
            "run-job": unit_cli.cmd_run_job}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
