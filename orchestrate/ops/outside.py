"""`invoke measure-run`: measure a run this harness did not train (infer/outside.py, docs/outside-runs.md).

Each step a role process: check and import the run's checkpoints and queue its jobs (the inference role,
`python -m infer.outside`), run the workers until the queue is empty, label validity and modes (the judge and
the codebook, as `invoke judge` / `invoke codebook`), aggregate the scale's tables (the outside run appears as its
own rows, an extension run pooled into none of the paper's fits) and copy the results to results/<scale>/, where
the docs point (rcea.publish, as the study's last stage).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from invoke.exceptions import Exit

from rcea.config import toml_value
from rcea.launch import host_file, launch
from orchestrate.ops.commands import (aggregate_command, codebook_commands, judge_commands, publish_command, role_command,
                                      workers_command)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def outside_command(scale: str, folder: str, base: str, name: str, overrides=()) -> list[str]:
    """`python -m infer.outside` in the inference role: a local process, or the infer-cli container with the
    run's folder and the base model mounted read-only."""
    opts = ["--name", name, "--scale", scale, *(a for o in overrides for a in ("--override", o))]
    launcher = launch(scale).launcher
    run, mounts = host_file(launcher, folder, "/outside")
    base, more = host_file(launcher, base, "/base") if base else ("", [])
    return role_command("infer.outside", [run, *(["--base", base] if base else []), *opts], scale,
                        run_opts=[*mounts, *more])


HELP = {"path": "the outside run's checkpoint folder", "base": "its base model folder (default: the scale's)",
        "name": "its label in the report", "override": "key=value",
        "check-only": "find and check the checkpoints and the base; import and queue nothing",
        "base-differs": "measure over --base although its weights differ from the scale's base (copied into the data "
                        "folder, recorded with the run, named in the report)"}


def measure_run(c, scale: str, path: str, base: str, name: str, override, check_only=False, base_differs=False):
    """`invoke measure-run`: its commands, run under the data folder's settings (join_settings: a --quick demo's,
    shared through $RCEA_OVERRIDES) so that one report reads every table."""
    from orchestrate.ops.commands import check_overrides
    from orchestrate.ops.shell import run_all, share_overrides

    overrides = check_overrides(override, scale)
    commands = measure_run_commands(scale, path, base, name, overrides, check_only=check_only,
                                    base_differs=base_differs)
    if not check_only:
        joined, said = join_settings(scale, name, path, overrides)
        if joined:
            print(said, flush=True)
            share_overrides(c, joined)
    run_all(c, commands)


def measure_run_commands(scale: str, folder: str, base: str, name: str, overrides=(), num_workers: int = 1,
                         check_only: bool = False, base_differs: bool = False):
    if not Path(folder).is_dir():
        raise Exit(f"--path {folder!r} is not a folder; give the folder holding the run's checkpoints", code=2)
    if base and not Path(base).is_dir():
        raise Exit(f"--base {base!r} is not a folder; give the base model's folder the run was trained from", code=2)
    if not NAME.fullmatch(name or ""):
        raise Exit(f"--name {name!r}: use a label of letters, digits, '-', '_' or '.'", code=2)
    extra = [*(["--check-only"] if check_only else []), *(["--base-differs"] if base_differs else [])]
    first = [*outside_command(scale, folder, base, name, overrides), *extra]
    if check_only:   # find and check the checkpoints; import and queue nothing
        return [first]
    return [first, workers_command(scale, num_workers, detach=False), *judge_commands(scale),
            *codebook_commands(scale), aggregate_command(scale), publish_command(scale)]


def recorded_settings(scale: str, data_root) -> dict[str, dict]:
    """config_hash -> {"parts": count, "settings": values} over the manifests of the data folder's table parts
    (what `invoke aggregate` reads: aggregate/made_with.py)."""
    from rcea.layout import tables_dir

    found: dict[str, dict] = {}
    for man in sorted(tables_dir(scale, data_root).glob("*/*.parquet.manifest.json")):
        try:
            record = json.loads(man.read_text())
        except (OSError, ValueError):
            continue
        h = record.get("config_hash") if isinstance(record, dict) else None
        if isinstance(h, str) and isinstance(record.get("settings"), dict):
            found.setdefault(h, {"parts": 0, "settings": record["settings"]})["parts"] += 1
    return found


def join_settings(scale: str, name: str, folder: str, overrides, data_root=None) -> tuple[list[str], str]:
    """The overrides under which the outside run is measured like the data folder's tables (a --quick demo's
    settings, say), so that one aggregation reads them all, and a line saying so; ([], '') when they already
    agree or the folder holds no tables. The configuration the run was measured under before (its outside.json)
    is not the folder's. A --override that contradicts the folder's settings ends in one line naming the command
    that agrees."""
    from rcea.config import load_config
    from rcea.layout import run_dir

    if data_root is None:
        from orchestrate.ops.commands import host_data
        from orchestrate.ops.shell import ROOT

        data_root = ROOT / host_data(scale)
    made = recorded_settings(scale, data_root)
    try:
        before = json.loads((run_dir(scale, name, data_root) / "outside.json").read_text()).get("config_hash")
    except (OSError, ValueError, AttributeError):
        before = None
    made = {h: m for h, m in made.items() if h != before} or made
    if not made:
        return [], ""
    cfg = load_config(scale, None, list(overrides))
    target, info = max(made.items(), key=lambda x: x[1]["parts"])
    if cfg.hash() == target:
        return [], ""
    mine = {o.split("=", 1)[0] for o in overrides}
    joined, theirs = [], []
    for key, value in sorted(info["settings"].items()):
        try:
            now = cfg[key]
        except (KeyError, ValueError):
            continue
        if now != value:
            (theirs if key in mine else joined).append(f"{key}={toml_value(value)}")
    try:
        agrees = not theirs and load_config(scale, None, [*overrides, *joined]).hash() == target
    except ValueError:
        agrees = False
    if not agrees:
        keep = [o for o in overrides if o.split("=", 1)[0] not in {t.split("=", 1)[0] for t in theirs}]
        cmd = " ".join(["invoke measure-run", f"--path {folder} --name {name} --scale {scale}",
                        *(f"--override '{o}'" for o in [*keep, *theirs, *joined])])
        raise Exit(f"measure-run: the data folder's tables were made under other settings (configuration {target}) "
                   f"than these ({cfg.hash()}), and one report cannot mix them: run `{cmd}`", code=2)
    return joined, (f"measure-run: measuring under the data folder's settings (configuration {target}, as its "
                    f"tables were made): {'; '.join(joined)}")
