"""report.md sections that set this run beside the paper: where each reported setting comes from (its tag),
the settings this scale changes from the paper's values, RQ3's two p values and which decides, the judge's
accepted-set precision, the codebook counts, and the implementation notes that hold for this run only.

Tags (docs/settings.md): S stated in the paper, E the value of a source the paper cites, R reconstructed,
C our choice. The paper's value of a setting is its value in configs/base.toml (the paper's first scale,
Qwen2.5-3B) when tagged S or E; a scale value the setting's quoted sentence also states (the 7B model) is the
paper's too, not a departure.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from aggregate.settings import FIELD_KEYS, AggregateSettings, _plain

ALPHA = 0.05  # the conventional two-sided level at which RQ3's "significant" is read (the paper names none)
PAPER_PLACE = re.compile(r"\[paper [^:\]]+: \"([^\"]+)\"")
# The paper's codebook counts (supplement §12) and accepted-set precision against its two annotators.
PAPER_CODEBOOK = {"questions with a codebook": "125", "modes in the final export": "313",
                  "included trajectories": "92,861", "uncertain trajectories": "6",
                  "sent to reconciliation (disputed)": "7,726"}
PAPER_ACCEPTED_PRECISION = {"A": 0.913, "B": 0.891}


@lru_cache(maxsize=1)
def tagged_settings() -> dict[str, Any]:
    """Every setting of configs/base.toml and configs/objectives.toml: {key: Setting(value, status, doc)}."""
    from rcea.settings_doc import documented_settings

    return documented_settings()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def _same(a: Any, b: Any) -> bool:
    return _plain(a) == _plain(b)   # a TOML list and the settings' tuple compare equal


def _paper_states(setting, value: Any) -> bool:
    """Whether one of the setting's quoted paper sentences names `value` too (the 7B model beside the 3B one)."""
    if not isinstance(value, str) or setting.status != "S":
        return False
    word = value.rpartition("/")[2].lower()
    return any(word in q.lower() for q in PAPER_PLACE.findall(setting.doc))


def settings_lines(st: AggregateSettings) -> list[str]:
    """The settings the reported numbers depend on, each with its tag and, for S and E, the paper's value."""
    tags = tagged_settings()
    L = ["", "## Settings behind the reported numbers (tags: docs/settings.md)", "",
         "S stated in the paper, E the value of a source the paper cites, R reconstructed, C our choice.", "",
         "| Setting | This report | Tag | Paper's value |", "|---|---|---|---|"]
    for name, key in FIELD_KEYS.items():
        if key not in tags:
            continue
        s, here = tags[key], getattr(st, name)
        paper = _cell(s.value) if s.status in ("S", "E") else "– (none)"
        mark = "" if _same(here, s.value) or s.status not in ("S", "E") else " (departure)"
        L.append(f"| `{key}` | {_cell(here)}{mark} | {s.status} | {paper} |")
    return L


def departures(scales: list[str], st: AggregateSettings) -> tuple[list[tuple], list[tuple]]:
    """(departures from the paper's values, other settings changed), each row (key, tag, 3B value, here, scales).

    Compared: each scale's configuration (its scale file over configs/base.toml) and this aggregation's own
    settings (command-line options) against configs/base.toml. S or E settings whose value here is not the
    paper's are departures; R and C settings changed are listed apart (the paper gives no value for them)."""
    from rcea.config import SCALES, load_config

    tags = tagged_settings()
    here: dict[str, dict[str, Any]] = {}
    for sc in scales:
        if sc in SCALES:
            cfg = load_config(sc)
            for key in tags:
                here.setdefault(key, {})[sc] = cfg[key]
    for name, key in FIELD_KEYS.items():
        if key in tags:
            for sc in (scales if any(s in SCALES for s in scales) else ["this report"]):
                here.setdefault(key, {})[sc] = getattr(st, name)
    paper, other = [], []
    for key, by_scale in here.items():
        s = tags[key]
        changed = {sc: v for sc, v in by_scale.items() if not _same(v, s.value) and not _paper_states(s, v)}
        if not changed:
            continue
        values = sorted({_cell(v) for v in changed.values()})
        row = (key, s.status, _cell(s.value), " / ".join(values), ", ".join(sorted(changed)))
        (paper if s.status in ("S", "E") else other).append(row)
    return paper, other


def _cell(v: Any) -> str:
    return _fmt(v).replace("|", "\\|")


def departure_lines(res: dict, st: AggregateSettings) -> list[str]:
    scales = sorted({r["scale"] for r in res.get("runs", [])} | {e["scale"] for e in res.get("endpoints", [])})
    paper, other = departures(scales, st)
    L = ["", "## Departures from the paper at this scale", "",
         f"Scales in this report: {', '.join(scales) or 'none'}. Each setting whose value here differs from the "
         "paper's (configs/base.toml, the paper's Qwen2.5-3B values, tags S and E), read from the scale file and "
         "this aggregation's options. A number below that depends on one of these is not the paper's quantity.", ""]
    if paper:
        L += ["| Setting | Tag | Paper | Here | Scales |", "|---|---|---|---|---|"]
        L += [f"| `{k}` | {t} | {p} | {h} | {s} |" for k, t, p, h, s in paper]
    else:
        L.append("- none: every stated (S) and cited-source (E) setting has the paper's value.")
    if other:
        L += ["", "Settings without a paper value (R, C) that this scale also changes:", "",
              "| Setting | Tag | At 3B | Here | Scales |", "|---|---|---|---|---|"]
        L += [f"| `{k}` | {t} | {p} | {h} | {s} |" for k, t, p, h, s in other]
    partial = sorted({k.split("/", 1)[0] for k, tr in (res.get("training_traces") or {}).items()
                      if not tr.get("epoch_known", True)})
    if partial:
        L += ["", f"- Training-entropy traces ({', '.join(partial)}; Table A3, Figure 3): this scale sets no epoch "
              "length (`aggregate.steps_per_epoch` names only the paper's scales), and its runs stop at "
              "`train.max_steps`, before one pass over `data.draw_size` questions. Their traces end at the run's "
              "last step, and their progress axis is the fraction of the run, not of an epoch: not the paper's "
              "complete one-epoch trace."]
    from aggregate.outside_bases import lines as base_lines

    L += base_lines(res, "Outside runs measured over another base model than the scale's (`invoke measure-run "
                    "--base-differs`): their numbers are not over the base every other run here is measured over.")
    return L


def _p4(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) and math.isfinite(x) else "–"


def rq3_lines(res: dict, st: AggregateSettings) -> list[str]:
    """Both p values of each scale's Spearman correlation, the one that decides, and whether the other agrees."""
    corr = res.get("correlations") or {}
    if not corr:
        return []
    L = ["", f"## Retention vs pass@{st.pass_k} (RQ3; `summary.json` → `correlations`)", "",
         f"Both two-sided p values; the exact permutation p decides (exact for n <= 8 runs, where the t "
         f"approximation is poor), read at alpha = {ALPHA:g} (the paper names neither its test nor a level: on "
         "its own 3B values, rho = 0.812 with n = 6, the t approximation gives 0.0499 and the exact test 0.072, "
         "so the choice decides \"significant\").", "",
         "| Scale | n | Spearman | exact permutation p (decides) | t-approximation p | decision | t approximation "
         "would say |", "|---|---|---|---|---|---|---|"]
    for sc, c in corr.items():
        pe, pt = c.get("p_exact"), c.get("p_t_approx")
        dec = _decision(pe)
        other = _decision(pt)
        flag = other if other == "–" or other == dec else f"{other} (disagrees)"
        rho = _p4(c.get("spearman")) + (f" (undefined: {c['undefined']})" if c.get("undefined") else "")
        L.append(f"| {sc} | {c['n']} | {rho} | {_p4(pe)} | {_p4(pt)} | {dec} | {flag} |")
    if res.get("extension_runs"):
        L.append(f"- Over the paper's six methods only; extension runs ({', '.join(res['extension_runs'])}) "
                 "are listed in the tables beside them, not correlated.")
    return L


def _decision(p: Any) -> str:
    if not isinstance(p, (int, float)) or not math.isfinite(p):
        return "–"
    return "significant" if p <= ALPHA else "not significant"


def accepted_set_lines(res: dict) -> list[str]:
    """The judge's accepted-set precision per annotator (§12: 91.3% and 89.1%), from the imported labels."""
    L = ["", "## Judge accepted-set precision (supplement §12; `summary.json` → `accepted_set`)", "",
         "Share of judge-accepted (process-valid) trajectories each annotator marks valid. The paper: 91.3% "
         "(annotator A) and 89.1% (annotator B)."]
    acc = res.get("accepted_set")
    if not acc or not acc.get("annotators"):
        why = (acc or {}).get("note") or ("no `semantic/accepted_set_labels.csv` beside the tables (header "
                                          "`annotator,traj_id,valid`, valid 1/0, one row per annotator and "
                                          "judge-accepted trajectory)")
        return L + ["", f"- not imported: {why}."]
    L += ["", "| Annotator | accepted trajectories labelled | marked valid | precision | paper |", "|---|---|---|---|---|"]
    for i, (who, a) in enumerate(sorted(acc["annotators"].items())):
        ref = list(PAPER_ACCEPTED_PRECISION.values())
        paper = f"{100 * ref[i]:.1f}%" if i < len(ref) else "–"
        L.append(f"| {who} | {a['n']} | {a['valid']} | {100 * a['precision']:.1f}% | {paper} |")
    return L


def codebook_lines(res: dict) -> list[str]:
    """The codebook pipeline's counts (supplement §12) beside the paper's."""
    cb = res.get("codebook")
    L = ["", "## Semantic codebook counts (supplement §12; `summary.json` → `codebook`)", ""]
    if not cb:
        return L + ["- not available: no `semantic/codebook/assignments.parquet` beside the tables."]
    ours = {"questions with a codebook": cb.get("questions"), "modes in the final export": cb.get("modes"),
            "included trajectories": cb.get("included"), "uncertain trajectories": cb.get("uncertain"),
            "sent to reconciliation (disputed)": cb.get("disputed")}
    L += [f"Labelled by: {', '.join(f'{k} ({v:,})' for k, v in sorted(cb.get('by_source', {}).items())) or '–'}.",
          "", "| Count | This study | Paper |", "|---|---|---|"]
    L += [f"| {k} | {'–' if v is None else f'{v:,}'} | {PAPER_CODEBOOK[k]} |" for k, v in ours.items()]
    return L


def deviation_lines(res: dict, fixed: tuple[str, ...]) -> list[str]:
    """The fixed implementation notes, then the ones that depend on this run, each stated only when it holds."""
    L = ["", "## Implementation choices (recorded deviations)", ""]
    L += [f"- {d}" for d in fixed]
    gone = res.get("unavailable", {}).get("mode_retention", "")
    if "process_valid" in gone and "all null" in gone:
        L.append("- `process_valid` is all null here (the judge stage left no labels): mode retention is not "
                 "reported (said first, above), rather than computed over unjudged successes.")
    elif any(r.get("mode_retention") is not None for r in res.get("runs", [])):
        L.append("- Mode retention is computed over judge-accepted successes (`process_valid` true) with a mode "
                 "label; bootstrap intervals and retention are computed for every checkpoint in `samples`, not "
                 "only the reporting points.")
    elif gone:
        L.append(f"- Mode retention is not reported: {gone}.")
    failed = [f"{r['scale']}/{r['method']}" for r in res.get("runs", []) if r.get("failed")]
    if failed:
        L.append(f"- {', '.join(failed)} fired the failure detector: Table 1 at its last full-benchmark step before "
                 "the onset, ratios and retention at its last probe step before it, q99 at its final step (flagged), "
                 "left out of the covariance fit and the correlations (docs/estimators.md#reporting-points, "
                 "generalised from the paper's Clip-Cov-7B steps 2,000 / 8,000).")
    elif res.get("failure_detector"):
        L.append(f"- The failure detector fired on none of the {len(res['failure_detector'])} runs it checked: "
                 "each reports at its final checkpoint.")
    else:
        L.append("- The failure detector was not applied (no dense greedy trace): no run is marked failed, and a "
                 "collapsed run would be reported at its final checkpoint.")
    return L
