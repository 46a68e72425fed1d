"""The GPU recipe rehearsed on CPU: `invoke study --scale 3b` through compose.yaml and a `docker` double.

`tests/deploy/fake_docker/docker` stands first on PATH; it reads the project's compose.yaml and runs every
service as a local process in its role's environment (see its docstring). The rehearsal scale is the 3b
scale with what a CPU can run in its place, all as overrides (`--override`, which reach every container
through RCEA_OVERRIDES in compose.yaml):

- the tiny model for Qwen, and the tiny scale's training settings (`configs/scales/tiny.toml`), the
  Transformers backend for vLLM (no vLLM here), two workers (GPUs 0 and 1);
- training and the probe in the toy world (a tiny model solves no real math; the judge and the modes need
  verified successes), and greedy evaluation also on two questions of each real benchmark, so the
  benchmark files, loaders and evaluation tables are walked;
- the LLM judge and codebook, not the rules: the judge service's `vllm serve` is a stand-in that starts
  the tests' scripted OpenAI-compatible server (it answers toy problems).

The demo's tiny models (session fixture) are copied into the data volume first, as a model cache would
be on a GPU host; everything else the study makes itself. The run itself is `studies.rehearsal_study`, started
by conftest.py beside the Ray engine's study as soon as the demo is done.
"""
from __future__ import annotations

import json
import re
import subprocess

from tests.e2e.studies import BENCHMARKS, ROOT, Rehearsal

STAGES = ("prepare", "train grpo", "workers", "judge", "modes", "audit sample", "aggregate", "results -> results/3b/")


def test_the_gpu_recipe_runs_through_compose_and_fills_every_table(studies):
    check_rehearsal(studies["rehearsal"].result())


def check_rehearsal(r: Rehearsal) -> None:
    """What the rehearsal left: every stage, every report output, the real benchmarks, what each container saw."""
    run, pids, state, results, volume = r.run, r.pids, r.state, r.results, r.volume
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    out = run.stdout
    for stage in STAGES:
        assert re.search(rf"^=== \[\d/8\] {re.escape(stage)}", out, re.M), stage

    # every output of the report rendered, the semantic modes included
    report = (results / "3b" / "report.md").read_text()
    rows = dict(re.findall(r"^\| ([\w ]+) \| .* \| (rendered|empty[^|]*|not drawn[^|]*) \|$", report, re.M))
    assert len(rows) >= 12, report
    # Table A9 diagnoses a collapsed run; a healthy run has nothing to put there, and says so
    assert rows.pop("Table A9").startswith("empty: No run fires the failure detector")
    assert all(status == "rendered" for status in rows.values()), rows
    assert "GRPO" in (results / "3b" / "tables" / "tableA6.md").read_text()  # mode retention
    table1 = (results / "3b" / "tables" / "table1.md").read_text()
    assert "+ GRPO (3B)" in table1 and all(b in table1 for b in ("AIME'24", "AIME'25", "MATH 500", "AMC'23", "Minerva"))
    assert "- none" in report.split("## Missing inputs")[1].split("##")[0]

    # the real benchmarks were evaluated (files, loaders, tables), and the LLM labelled (not the rules)
    tables = volume / "infer" / "3b" / "tables"
    greedy_parts = {p.name for p in (tables / "greedy").glob("*.parquet")}
    assert "greedy-base-0.parquet" in greedy_parts
    seen = subprocess.run([str(ROOT / ".envs" / "aggregate" / "bin" / "python"), "-c",
                           "import sys, pandas as pd; print(sorted(set(pd.read_parquet(sys.argv[1]).benchmark)))",
                           str(tables / "greedy" / "greedy-base-0.parquet")], capture_output=True, text=True)
    assert seen.stdout.strip() == str(sorted(["toy", *BENCHMARKS])), seen.stderr
    semantic = volume / "infer" / "3b" / "semantic"
    index = json.loads((semantic / "codebooks" / "index.json").read_text())  # only the LLM codebook writes it
    assert index["model"] == "scripted" and index["questions"] and index["summary"]["included"] > 0
    assert (semantic / "judge" / "verdicts.parquet").exists() and (semantic / "audit" / "audit.sqlite").exists()

    # what each container saw: the scale, its worker rank and GPU, the data volume
    starts = [json.loads(ln) for ln in (state / "starts.jsonl").read_text().splitlines()]
    assert {s["service"] for s in starts} == {"train", "infer-cli", "infer-worker-0", "infer-worker-1", "judge",
                                              "aggregate"}
    for s in starts:
        assert s["env"]["RCEA_DATA"] == "/workspace/data", s
        assert s["env"]["RCEA_SCALE"] == "3b" or "--scale" in s["command"] and \
            s["command"][s["command"].index("--scale") + 1] == "3b" or "results/3b" in " ".join(s["command"]), s
        assert "judge.labeller=llm" in s["env"].get("RCEA_OVERRIDES", ""), s["service"]
    workers = sorted((s["service"], s["env"]["WORKER_RANK"], s["env"]["NUM_WORKERS"], s["devices"], s["env"]["RCEA_SCALE"])
                     for s in starts if s["service"].startswith("infer-worker"))
    assert workers == [("infer-worker-0", "0", "2", "0", "3b"), ("infer-worker-1", "1", "2", "1", "3b")]
    assert [s["devices"] for s in starts if s["service"] == "train"] == ["0", "0"]  # prepare, then training
    assert pids == []  # the study stopped the judge server itself

