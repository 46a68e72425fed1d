"""docs/measurements.md, written from measurement records rather than copied by hand.

A record (docs/measurements/<name>.json) holds what was run, when, where and what came out:
``command``, ``date`` (UTC), ``machine`` (cores, memory, CPU, load average before and after), ``commit``,
``wall_s`` and the numbers a preset reads from the run's own output (stage banners timed as they print,
``summary.json``, ``seeds-<method>.json``, the test areas' times). Records whose numbers come from a run
this tool did not drive (a fault script's output, an earlier session's notes) say so in ``source``.

    scripts/measure demo          run `scripts/run demo` on an empty data folder, record, rewrite the page
    scripts/measure seeds         `scripts/run seeds` on the demo's data folder (RCEA_DATA, default data/)
    scripts/measure tests         `scripts/test`
    scripts/measure verifier      `python -m rcea.verify_agreement`
    scripts/measure render        rewrite docs/measurements.md from the records (what a test compares)

Standard library only, so any of the project's environments runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from rcea import layout
from rcea.config import METHOD_LABELS

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "measurements"
PAGE = ROOT / "docs" / "measurements.md"
BANNER = re.compile(r"^=== \[(\d+)/(\d+)\] (.+?)  \(\+")
AREA = re.compile(r"^\((?P<name>[\w-]+): (?P<s>\d+)s\)$")
AGREEMENT = re.compile(r"^(?P<who>\S.*?): agreement (?P<agree>\d+)/(?P<n>\d+) = (?P<pct>[\d.]+)%\s+"
                       r"unboxed accepted: (?P<unboxed>\d+)")
TOTALS = re.compile(r"^tests: (\d+) passed, (\d+) failed, (\d+) skipped")


# --- the machine -------------------------------------------------------------------------------------

def machine() -> dict:
    """Cores, memory, CPU model and GPU presence of this host (what a reader needs to compare a time)."""
    info: dict = {"cores": os.cpu_count(), "system": f"{platform.system()} {platform.machine()}"}
    try:
        mem = Path("/proc/meminfo").read_text()
        info["memory_gib"] = round(int(re.search(r"MemTotal:\s+(\d+)", mem).group(1)) / 2**20)
        cpu = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        if cpu:
            info["cpu"] = cpu.group(1).strip()
    except (OSError, AttributeError):
        pass
    info["gpu"] = bool(shutil.which("nvidia-smi"))
    return info


def load_average() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return None


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


# --- running a command, timing its output ------------------------------------------------------------

def run_timed(command: str, env: dict | None = None, log: Path | None = None) -> tuple[int, float, list[tuple[float, str]]]:
    """Run ``command`` in bash at the project root, echoing its output; returns (exit status, wall seconds,
    [(seconds since start, line)]) so stage banners get the time they printed at."""
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    p = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    fh = log.open("w") if log else None
    for line in p.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()  # a piped or logged run shows its progress as it goes
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
        if fh:
            fh.write(f"{lines[-1][0]:9.1f} {line}")
    rc = p.wait()
    if fh:
        fh.close()
    return rc, time.monotonic() - t0, lines


def stage_times(lines: list[tuple[float, str]], wall_s: float) -> list[dict]:
    """Each `=== [i/n] title` banner's stage: from its banner to the next one (the last: to the end)."""
    found = [(t, m.group(3)) for t, line in lines if (m := BANNER.match(line.strip()))]
    return [{"stage": title, "seconds": round((found[i + 1][0] if i + 1 < len(found) else wall_s) - t, 1)}
            for i, (t, title) in enumerate(found)]


def test_areas(lines: list[tuple[float, str]]) -> dict:
    """scripts/test's own account: each area's `(name: Ns)` line and the final `tests: ...` line."""
    out: dict = {"areas_s": {}}
    for _, line in lines:
        if m := AREA.match(line.strip()):
            out["areas_s"][m.group("name")] = int(m.group("s"))
        elif m := TOTALS.match(line.strip()):
            out.update(passed=int(m.group(1)), failed=int(m.group(2)), skipped=int(m.group(3)))
    return out


# --- what a run wrote --------------------------------------------------------------------------------

def demo_results(summary: dict) -> dict:
    """The numbers README's claims rest on, from the demo's summary.json: greedy held-out accuracy of the
    base policy and of each objective's final checkpoint, sampled probe accuracy and token entropy at the
    reported endpoints, mode retention."""
    runs = summary.get("runs", [])
    base = next((r for r in runs if r["method"] == "base"), None)
    trained = [r for r in runs if r["method"] != "base"]

    def greedy(r):  # the macro average over the benchmarks measured (the toy world has one)
        v = r.get("macro_average")
        return None if v is None else round(v, 1)

    eps = {(e["method"], e["step"]): e for e in summary.get("endpoints", [])}

    def probe(r, key):
        e = eps.get((r["method"], r.get("probe_step")))
        return None if e is None or e.get(key) is None else round(e[key], 3)

    out = {"greedy_base": greedy(base) if base else None,
           "greedy": {r["method"]: greedy(r) for r in trained},
           "sampled_base": probe(base, "accuracy") if base else None,
           "sampled": {r["method"]: probe(r, "accuracy") for r in trained},
           "entropy_base": probe(base, "token_entropy_mean") if base else None,
           "entropy": {r["method"]: probe(r, "token_entropy_mean") for r in trained},
           "mode_retention": {r["method"]: (round(r["mode_retention"], 1) if r.get("mode_retention") is not None
                                            else None) for r in trained}}
    return out


def _span(values) -> str:
    v = sorted(x for x in values if x is not None)
    if not v:
        return "–"
    return f"{v[0]}" if v[0] == v[-1] else f"{v[0]}-{v[-1]}"


# --- presets -----------------------------------------------------------------------------------------

def _data_root() -> Path:
    return Path(os.environ.get("RCEA_DATA", ROOT / "data"))


PRESETS = {
    "demo": {"command": "scripts/run demo", "fresh_data": True, "order": 10,
             "title": "`scripts/run demo`: the whole pipeline on the tiny model"},
    "demo-quick": {"command": "scripts/run demo --quick", "fresh_data": True, "order": 12,
                   "title": "`scripts/run demo --quick`: the shortened demo the tests run"},
    "seeds": {"command": "scripts/run seeds", "order": 19, "title": "`scripts/run seeds`: RL gain against run-to-run noise"},
    "tests": {"command": "scripts/test", "order": 29, "title": "`scripts/test`: the test suite"},
    "verifier": {"command": ".envs/infer/bin/python -m rcea.verify_agreement", "order": 59,
                 "title": "Verifier agreement on held-out completions"},
}


DURATION = re.compile(r"(?:(\d+)h )?(?:(\d+)m ?)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float:
    """rcea.progress.duration's forms back to seconds: '12s', '4m 10s', '1h 05m'."""
    m = DURATION.match(text.strip())
    if not m or not any(m.groups()):
        raise ValueError(f"not a duration: {text!r}")
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return 3600 * h + 60 * mi + s


def lines_from_log(text: str) -> tuple[float, list[tuple[float, str]]]:
    """A study's saved output: each banner's `(+elapsed` and the closing `=== <name> done in D` give the
    times (to the second); returns (wall seconds, [(seconds, line)])."""
    lines, wall = [], None
    for line in text.splitlines():
        if m := re.match(r"^=== \[\d+/\d+\] .+?  \(\+([^,)]+)", line.strip()):
            lines.append((parse_duration(m.group(1)), line.strip()))
        elif m := re.match(r"^=== \S+ done in (.+)$", line.strip()):
            wall = parse_duration(m.group(1))
    if wall is None:
        raise ValueError("no '=== <name> done in ...' line: the run did not finish")
    return wall, lines


def record_log(name: str, log: Path, command: str, note: str = "", at_commit: str = "") -> dict:
    """Record a study run from its saved output (`scripts/run demo 2>&1 | tee LOG`) and the data folder it
    wrote (RCEA_DATA, default data/): the date is the log's, the machine this one."""
    preset = PRESETS.get(name, {"title": name})
    wall, lines = lines_from_log(log.read_text(errors="replace"))
    when = datetime.fromtimestamp(log.stat().st_mtime, timezone.utc)
    rec = {"name": name, "title": preset["title"], "command": command, "order": preset.get("order", 50),
           "date": when.strftime("%Y-%m-%d %H:%M UTC"),
           "commit": at_commit or commit(), "machine": dict(machine(), **({"note": note} if note else {})),
           "source": f"scripts/measure {name} --from-log (the run's own banners)", "exit_status": 0,
           "wall_s": wall, "stages": stage_times(lines, wall)}
    summary = layout.results_dir("tiny", root=_data_root()) / "summary.json"
    if name.startswith("demo") and summary.exists():
        rec["results"] = demo_results(json.loads(summary.read_text()))
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def relative(obj, root: Path = ROOT):
    """Paths of this machine inside a run's own output, made relative to the project root (a record is
    committed: it names no machine's folders); other absolute paths become their last two parts."""
    if isinstance(obj, dict):
        return {k: relative(v, root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [relative(v, root) for v in obj]
    if isinstance(obj, str) and obj.startswith("/"):
        p = Path(obj)
        try:
            return str(p.relative_to(root))
        except ValueError:
            return str(Path(*p.parts[-2:]))
    return obj


def record(name: str, command: str | None = None) -> dict:
    """Run a preset (or ``command`` under ``name``), read its numbers, write docs/measurements/<name>.json."""
    preset = PRESETS.get(name, {"title": name})
    command = command or preset["command"]
    env = dict(os.environ)
    data = _data_root()
    scratch = None
    if preset.get("fresh_data"):
        scratch = Path(tempfile.mkdtemp(prefix="rcea-measure-"))
        data = env["RCEA_DATA"] = str(scratch / "data")
        data = Path(data)
    rec = {"name": name, "title": preset["title"], "command": command, "order": preset.get("order", 50),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(),
           "machine": machine(), "load_before": load_average(), "source": "scripts/measure " + name}
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, wall, lines = run_timed(command, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rec.update(exit_status=rc, wall_s=round(wall, 1), load_after=load_average(),
               cpu_s=round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1))
    rec["stages"] = stage_times(lines, wall)
    if name == "tests":
        rec.update(test_areas(lines))
    summary = layout.results_dir("tiny", root=data) / "summary.json"
    if name.startswith("demo") and summary.exists():
        rec["results"] = demo_results(json.loads(summary.read_text()))
    if name == "seeds":
        found = sorted(layout.results_dir("tiny", root=data).glob("seeds-*.json"))
        rec["seeds"] = [relative(json.loads(p.read_text())) for p in found]
    if name == "verifier":
        rec["agreement"] = [{"verifier": m["who"], "agree": int(m["agree"]), "cases": int(m["n"]),
                             "percent": float(m["pct"]), "unboxed_accepted": int(m["unboxed"])}
                            for _, line in lines if (m := AGREEMENT.match(line))]
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


# --- the page ----------------------------------------------------------------------------------------

def _machine_line(r: dict) -> str:
    m = r.get("machine") or {}
    parts = [f"{m['cores']} cores" if m.get("cores") else None,
             f"{m['memory_gib']} GiB" if m.get("memory_gib") else None, m.get("cpu"),
             "GPU" if m.get("gpu") else "no GPU"]
    load = [x for x in (r.get("load_before"), r.get("load_after")) if x is not None]
    if load:
        parts.append("load average " + " → ".join(f"{x:.1f}" for x in load))
    if m.get("note"):
        parts.append(m["note"])
    return ", ".join(p for p in parts if p)


def _minutes(s: float) -> str:
    s = int(round(s))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def _demo_body(r: dict) -> list[str]:
    L = []
    if r.get("stages"):
        L.append("Stages (from the study's own banners): " + "; ".join(
            f"{s['stage']} {_minutes(s['seconds'])}" for s in r["stages"]) + ".")
    res = r.get("results")
    if res:
        names = METHOD_LABELS   # configs/objectives.toml's sections and labels

        def each(d, fmt="{}"):  # in the paper's order, then any other method
            order = sorted(d, key=lambda m: (list(names).index(m) if m in names else len(names), m))
            return ", ".join(f"{names.get(m, m)} {fmt.format(d[m])}" for m in order if d[m] is not None)

        L.append(f"Greedy held-out accuracy (the toy world's benchmark, final checkpoints): base "
                 f"{res['greedy_base']}% → {_span(res['greedy'].values())}% ({each(res['greedy'], '{}%')}).")
        if res.get("sampled_base") is not None:
            L.append(f"Sampled accuracy on the fixed probe (T = 1) at each reported endpoint: base "
                     f"{res['sampled_base']:.3f} → {_span(res['sampled'].values())} ({each(res['sampled'], '{:.3f}')}).")
        if res.get("entropy_base") is not None:
            L.append(f"Probe token entropy: base {res['entropy_base']} → {_span(res['entropy'].values())} nats.")
        if any(v is not None for v in res["mode_retention"].values()):
            L.append(f"Mode retention: {_span(res['mode_retention'].values())}% of the base "
                     f"({each(res['mode_retention'], '{}%')}).")
    return L


def _tests_body(r: dict) -> list[str]:
    L = []
    if r.get("areas_s"):
        L.append("Areas (scripts/test's own times, two at a time): " + ", ".join(
            f"`tests/{k}` {_minutes(v)}" for k, v in sorted(r["areas_s"].items(), key=lambda kv: -kv[1])) + ".")
    if "passed" in r:
        L.append(f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped.")
    return L


def _seeds_body(r: dict) -> list[str]:
    return [f"{n['method']}, training seeds {', '.join(map(str, n['seeds']))}, each scored with the warm start on "
            f"{n['questions']} held-out questions x {n['k']} samples: warm start {n['warm_start']:.3f}, seeds "
            f"{', '.join(f'{a:.3f}' for a in n['accuracy'])}; mean gain {n['gain']:+.3f}, run-to-run sd "
            f"{n['sd']:.3f} (gain / sd = {n['gain_over_sd']:.1f})." for n in r.get("seeds", [])]


def _verifier_body(r: dict) -> list[str]:
    return ["; ".join(f"{a['verifier']}: {a['agree']}/{a['cases']} held-out completions = {a['percent']}%, "
                      f"{a['unboxed_accepted']} unboxed answers accepted" for a in r.get("agreement", [])) + "."] \
        if r.get("agreement") else []


def render(records: list[dict]) -> str:
    L = ["# Measurements", "",
         "Each entry: what ran, when, on which machine, at which commit, and what came out. Entries whose source",
         "is `scripts/measure <name>` are written by that command from the run's own output (`scripts/measure",
         "render` rewrites this page from [`docs/measurements/`](measurements/); a test keeps it current); the",
         "others record a run's output as it was reported at the time, with its command to repeat it.",
         "Times on a shared machine depend on its load, which each entry gives. The Docker engine's set-up and",
         "the image builds (times and sizes, cold and warm) are measured in [images.md](images.md#measured).", ""]
    for r in sorted(records, key=lambda r: (r.get("order", 50), r["name"])):
        L += [f"## {r['title']}", ""]
        L.append(f"- **Command**: `{r['command']}`")
        L.append(f"- **When**: {r['date']}, commit `{r.get('commit', 'unknown')}`")
        L.append(f"- **Machine**: {_machine_line(r)}")
        L.append(f"- **Source**: {r.get('source', 'scripts/measure ' + r['name'])}")
        if r.get("wall_s") is not None:
            status = "" if r.get("exit_status", 0) == 0 else f" (exit status {r['exit_status']})"
            L.append(f"- **Took**: {_minutes(r['wall_s'])}{status}")
        if r.get("cpu_s"):
            L.append(f"- **CPU time**: {_minutes(r['cpu_s'])} (user + system of every process it ran and waited for: "
                     "what a loaded machine does not inflate as much as the wall time)")
        L.append("")
        body = {"tests": _tests_body, "seeds": _seeds_body, "verifier": _verifier_body}.get(r["name"], _demo_body if r["name"].startswith("demo")
                                                                 else lambda r: [])(r)
        body += list(r.get("text", []))
        for para in body:
            L += [para, ""]
    return "\n".join(L).rstrip() + "\n"


def load_records() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))]


def write_page() -> Path:
    PAGE.write_text(render(load_records()))
    return PAGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"{', '.join(PRESETS)}, or render")
    ap.add_argument("--command", help="run this instead of the preset's command (the record keeps it)")
    ap.add_argument("--from-log", type=Path, help="record a finished study from its saved output instead of running it")
    ap.add_argument("--note", default="", help="with --from-log: what else ran on the machine meanwhile")
    ap.add_argument("--commit", default="", help="with --from-log: the commit the run ran at (default: HEAD)")
    args = ap.parse_args(argv)
    if args.from_log:
        if not args.from_log.is_file():
            print(f"error: --from-log {args.from_log}: no such file", file=sys.stderr)
            return 2
        try:
            rec = record_log(args.name, args.from_log, args.command or PRESETS.get(args.name, {}).get("command", ""),
                             args.note, args.commit)
        except ValueError as e:
            print(f"error: {args.from_log}: {e}", file=sys.stderr)
            return 2
        print(f"measure: {args.name} took {_minutes(rec['wall_s'])} (from {args.from_log})")
    elif args.name != "render":
        if args.name not in PRESETS and not args.command:
            print(f"error: unknown measurement {args.name!r}; choose one of {', '.join(PRESETS)}, render "
                  "(or give --command)", file=sys.stderr)
            return 2
        rec = record(args.name, args.command)
        print(f"measure: {args.name} took {_minutes(rec['wall_s'])}, exit {rec['exit_status']}; "
              f"record {RECORDS.relative_to(ROOT)}/{args.name}.json")
    print(f"measure: wrote {write_page().relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
