"""Outside runs measured over another base model than the scale's (`invoke measure-run --base-differs`,
infer/outside.py, docs/outside-runs.md): read from each run folder's `outside.json`, and said in one line each in
the report, beside the runs' numbers and among the departures, so nobody compares them unaware.

An outside.json records the `--base` given (`base`, `base_weights_sha256`), the base its jobs load
(`measured_over`, `measured_over_weights_sha256`) and the scale's base (`scale_base`, `scale_base_weights_sha256`;
in records written before the jobs loaded the given base, the scale's base is `measured_over`).
Standard library only."""

from __future__ import annotations

import json
from pathlib import Path


def other_bases(train: Path, scale: str) -> list[dict]:
    """One entry per run folder under `train` (train/<scale>/) whose outside.json says `base_differs`."""
    out = []
    for path in sorted(Path(train).glob("*/outside.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or not rec.get("base_differs"):
            continue
        over = str(rec.get("measured_over") or "")
        out.append({"run": f"{scale}/{path.parent.name}", "base": str(rec.get("base") or ""),
                    "base_weights_sha256": str(rec.get("base_weights_sha256") or ""), "measured_over": over,
                    "measured_over_weights_sha256": str(rec.get("measured_over_weights_sha256") or ""),
                    "scale_base": str(rec.get("scale_base") or over),
                    "scale_base_weights_sha256": str(rec.get("scale_base_weights_sha256")
                                                     or rec.get("measured_over_weights_sha256") or "")})
    return out


def _short(sha: str) -> str:
    return sha[:12] or "none"


def line(b: dict) -> str:
    """Which base the run was measured over, with short weight hashes, and that it differs from the scale's."""
    given = f"`{b['base']}` (weights sha256 {_short(b['base_weights_sha256'])})"
    scale = f"`{b['scale_base']}` (weights sha256 {_short(b['scale_base_weights_sha256'])})"
    if b["measured_over_weights_sha256"] == b["base_weights_sha256"]:
        return (f"- {b['run']}: measured with `--base-differs` over its own base {given}, which differs from the "
                f"scale's base {scale} that every other run is measured over: its numbers are over another model, and "
                "its comparisons with the base policy (step 0) are against the scale's base")
    return (f"- {b['run']}: measured with `--base-differs` over the scale's base {scale}, which differs from the base "
            f"it names {given}: its checkpoints were measured over another model than the one they were trained from")


def lines(res: dict, lead: str) -> list[str]:
    """`lead`, then one line per run of `res["outside_bases"]` ([] when there is none)."""
    bases = res.get("outside_bases") or []
    return ["", lead, "", *(line(b) for b in bases)] if bases else []
