"""`invoke measure-run`: measure a run this harness did not train (infer/outside.py, docs/outside-runs.md).

Each step a role process: check and import the run's checkpoints and queue its jobs (the inference role,
`python -m infer.outside`), run the workers until the queue is empty, label validity and modes (the judge and
the codebook, as `invoke judge` / `invoke codebook`), aggregate the scale's tables (the outside run appears as its
own rows, an extension run pooled into none of the paper's fits) and copy the results to results/<scale>/, where
the docs point (rcea.publish, as the study's last stage).
"""

from __future__ import annotations

import re
from pathlib import Path

from invoke.exceptions import Exit

from rcea.launch import launch
from orchestrate.ops.commands import (aggregate_command, codebook_commands, judge_commands, publish_command, role_command,
                                      workers_command)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def outside_command(scale: str, folder: str, base: str, name: str, overrides=()) -> list[str]:
    """`python -m infer.outside` in the inference role: a local process, or the infer-cli container with the
    run's folder and the base model mounted read-only."""
    opts = ["--name", name, "--scale", scale, *(a for o in overrides for a in ("--override", o))]
    if launch(scale).local:
        return role_command("infer.outside", [folder, *(["--base", base] if base else []), *opts], scale)
    mounts = ["-v", f"{Path(folder).resolve()}:/outside:ro", *(["-v", f"{Path(base).resolve()}:/base:ro"] if base else [])]
    return role_command("infer.outside", ["/outside", *(["--base", "/base"] if base else []), *opts], scale,
                        run_opts=mounts)


def measure_run_commands(scale: str, folder: str, base: str, name: str, overrides=(), num_workers: int = 1):
    if not Path(folder).is_dir():
        raise Exit(f"--path {folder!r} is not a folder; give the folder holding the run's checkpoints", code=2)
    if base and not Path(base).is_dir():
        raise Exit(f"--base {base!r} is not a folder; give the base model's folder the run was trained from", code=2)
    if not NAME.fullmatch(name or ""):
        raise Exit(f"--name {name!r}: use a label of letters, digits, '-', '_' or '.'", code=2)
    return [outside_command(scale, folder, base, name, overrides), workers_command(scale, num_workers, detach=False),
            *judge_commands(scale), *codebook_commands(scale), aggregate_command(scale), publish_command(scale)]
