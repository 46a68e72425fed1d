"""The settings of an aggregation are those its tables were made with.

Each table part's manifest records the configuration the job ran under (`config_hash`, and `settings`: every
value, rcea.store.write_manifest). The aggregation reads them: the settings it uses (pass@k's k, the bootstrap
resamples, the failure thresholds, ...) are the recorded ones, then the command line's options; where they differ
from the current configuration (a `--quick` study aggregated again without its overrides) one line says so.
Tables made under several configurations (a quick and a full run mixed), or under another configuration than the
current one with no settings recorded, are refused with a line naming the configurations and the fix.
Tables without manifests of this kind (written by hand, docs/schema.md) keep the current settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rcea.config import NOT_IN_HASH, base_value, load_config
from rcea.store import manifest_path

from aggregate.settings import FIELD_KEYS, AggregateSettings, _plain


class Mismatch(ValueError):
    """The tables' configurations cannot be used together or with the current one; the message says why."""


def recorded(parts: list[Path]) -> dict[str, dict[str, Any]]:
    """config_hash -> {"parts": count, "settings": the recorded values (None where no manifest has them)}."""
    found: dict[str, dict[str, Any]] = {}
    for part in parts:
        try:
            record = json.loads(manifest_path(part).read_text())
        except (OSError, ValueError):
            continue
        h = record.get("config_hash") if isinstance(record, dict) else None
        if not isinstance(h, str):
            continue
        entry = found.setdefault(h, {"parts": 0, "settings": None})
        entry["parts"] += 1
        if entry["settings"] is None and isinstance(record.get("settings"), dict):
            entry["settings"] = record["settings"]
    return found


def _keys(values: dict[str, Any]) -> list[str]:
    """The configuration keys an aggregation reads: its fields' keys and the [failure] thresholds."""
    return [k for k in FIELD_KEYS.values() if k not in NOT_IN_HASH] + sorted(k for k in values if k.startswith("failure."))


def _differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if _plain(a.get(k)) != _plain(b.get(k)))


def _measure_again(parts: list[Path], made: dict[str, dict[str, Any]]) -> list[str]:
    """`invoke measure-run ...` for each outside run (its train/<scale>/<name>/outside.json: infer/outside.py)
    measured under another configuration than the study's own tables: that command measures it again under the
    data folder's settings (orchestrate/ops/outside.py join_settings). Default layout only
    (<data>/infer/<scale>/tables/<table>/<part>.parquet)."""
    if not parts or len(parts[0].parents) < 5 or parts[0].parents[3].name != "infer":
        return []
    scale, root = parts[0].parents[2].name, parts[0].parents[4]
    runs = {}
    from rcea.layout import run_dir

    for path in sorted(run_dir(scale, "-", root).parent.glob("*/outside.json")):   # every run folder of the scale
        try:
            runs[path.parent.name] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    theirs = {r.get("config_hash") for r in runs.values()}
    study = [h for h in made if h not in theirs]
    if len(study) != 1:
        return []
    return [" ".join(["`invoke measure-run", f"--path {r.get('source')} --name {name} --scale {scale}",
                      *([f"--base {r['base_given']}"] if r.get("base_given") else []),
                      *(["--base-differs"] if r.get("base_differs") else [])]) + "`"
            for name, r in runs.items() if r.get("config_hash") in made and r.get("config_hash") != study[0]]


def resolve(parts: list[Path], scale: str | None, options: dict[str, Any],
            current: AggregateSettings) -> tuple[AggregateSettings, str]:
    """The settings to aggregate `parts` with (`options`: the command line's, None = not given; `current`:
    ``load_settings(scale, **options)``, the caller's) and a line saying where they differ from the current
    configuration ('' when they do not); Mismatch when they cannot be known."""
    made = recorded(parts)
    if not made:
        return current, ""
    if len(made) > 1:
        known = [m["settings"] for m in made.values() if m["settings"] is not None]
        diff = _differ(known[0], known[1]) if len(known) > 1 else []
        which = "; ".join(f"{h}: {m['parts']} part(s)" for h, m in sorted(made.items(), key=lambda x: -x[1]["parts"]))
        again = _measure_again(parts, made)
        fix = (f"measure the outside run again under the study's settings: {'; '.join(again)}" if again else
               "remove the stale parts (their manifests name the config_hash) or rerun the study, which remakes them")
        raise Mismatch(f"the tables were made under {len(made)} configurations ({which}"
                       + (f"; they differ in {', '.join(diff[:6])}" if diff else "") + "): parts of different "
                       f"runs (e.g. a --quick and a full study) are mixed; {fix}, then aggregate")
    (h, info), = made.items()
    cfg = None if scale is None else load_config(scale)   # read once: its hash and values below
    if info["settings"] is None:
        if cfg is not None and cfg.hash() != h:
            raise Mismatch(f"the tables were made under configuration {h}, not the current one of {scale} "
                           f"({cfg.hash()}), and their manifests predate recording the settings: "
                           "aggregate with the settings they were made with (the same RCEA_OVERRIDES) or remake "
                           "them")
        return current, ""
    now = base_value if cfg is None else cfg.__getitem__
    values = info["settings"]
    keys = [k for k in _keys(values) if k in values]
    changed = [k for k in keys if _plain(values[k]) != _plain(now(k))]
    if not changed:
        return current, ""
    adopted = {name: _plain(values[key]) for name, key in FIELD_KEYS.items() if key in changed}
    if any(k.startswith("failure.") for k in changed):
        from rcea.stats import FailureThresholds

        adopted["failure"] = FailureThresholds.from_config({k: v for k, v in values.items() if k.startswith("failure.")})
    settings = current.replace(**{**adopted, **{k: v for k, v in options.items() if v is not None}})
    return settings, (f"settings as the tables were made (configuration {h}), not the current configuration's: "
                      + ", ".join(f"{k} = {values[k]} (now {now(k)})" for k in changed[:8])
                      + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else ""))
