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
be on a GPU host; everything else the study makes itself.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("amc23", "aime24", "aime25", "math500", "minerva_math")
STAGES = ("prepare", "train grpo", "workers", "judge", "modes", "audit sample", "aggregate", "results -> results/3b/")


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)


def rehearsal_overrides(port: int) -> list[str]:
    tiny = tomllib.loads((ROOT / "configs" / "scales" / "tiny.toml").read_text())
    out = [f"{section}.{key}={toml_value(v)}" for section, table in tiny.items() for key, v in table.items()]
    url = f"http://127.0.0.1:{port}/v1"  # the judge service's port 8000, moved to a free host port
    return out + [
        "train.max_steps=4", "train.save_steps=2", "train.per_device_batch=16",
        f"eval.benchmarks={toml_value(['toy', *BENCHMARKS])}", "eval.questions_per_benchmark=2",
        # K = 8 samples per probe question (the tiny scale's): enough valid successes per question for mode
        # retention (m_min = 3) and both outcomes per question for the paired ratios
        "probe.composition={ toy = 12 }", "probe.n_questions=12", "probe.k=8", "passk.questions=6", "passk.n=4",
        "aggregate.bootstrap_resamples=200",
        "judge.labeller=llm", f"judge.base_url={json.dumps(url)}", f"codebook.base_url={json.dumps(url)}",
        "judge.model=scripted", "codebook.model=scripted"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_gpu_recipe_runs_through_compose_and_fills_every_table(demo, tmp_path):
    rehearse(demo[0] / "models", tmp_path)


def rehearse(models: Path, tmp_path: Path, extra_overrides=()) -> None:
    """Run the rehearsal with `models` as the model cache, in `tmp_path`, and check what it left."""
    state, results = tmp_path / "docker", tmp_path / "results"
    volume = state / "volumes" / "rcea_data"
    shutil.copytree(models, volume / "models")  # the model cache
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_") and k not in (
        "RCEA_DATA", "RCEA_OVERRIDES", "RCEA_SCALE", "NUM_WORKERS")}  # the study decides these
    env.update(PATH=f"{ROOT}/tests/deploy/fake_docker{os.pathsep}{env['PATH']}", FAKE_DOCKER_STATE=str(state),
               FAKE_DOCKER_STANDINS=str(ROOT / "tests" / "deploy" / "fake_docker" / "standins"),
               FAKE_DOCKER_PORTS=f"8000={port}", RCEA_RESULTS=str(results))
    cmd = [str(ROOT / "scripts" / "run"), "study", "--scale", "3b", "--methods", "grpo", "--num-workers", "2"]
    for o in [*rehearsal_overrides(port), *extra_overrides]:
        cmd += ["--override", o]
    try:
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        pids = sorted(p.name for p in (state / "pids").glob("*.pid"))  # what the study left running
    finally:  # a failed study must not leave the judge server behind
        subprocess.run(["docker", "compose", "down"], cwd=ROOT, env=env, capture_output=True, timeout=120)
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

