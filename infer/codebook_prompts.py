"""Prompts and response parsers of the question-local codebook pipeline (paper supplement §12).

Every prompt shows only the problem and completion texts under local ids (s1.., t1..): method,
scale, checkpoint and seed are never shown. Each parser returns None for a response that does not
parse; the pipeline records it and routes the affected trajectories to reconciliation.

WARNING: responses are untrusted model output; they are parsed as bounded JSON (`parse_json`) only.
"""

from __future__ import annotations

from infer.llm import parse_json

MAX_SOLUTION_CHARS = 6_000
SPECIAL = ("NEW", "UNCERTAIN")

RUBRIC = ("Two solutions share a mode when their decisive mathematical method and core sequence of operations "
          "are the same. Differences in wording, notation, arithmetic detail or order of exposition do not "
          "create a new mode unless they change the underlying solution method.")


def _solutions(items: list[tuple[str, str]]) -> str:
    return "\n".join(f"### Solution {sid}\n{text[:MAX_SOLUTION_CHARS]}" for sid, text in items)


def _codebook_lines(modes: list[dict]) -> str:
    return "\n".join(f"{m['id']}: {m['name']} — {m['definition']}" for m in modes)


def induce_messages(problem: str, items: list[tuple[str, str]]) -> list[dict[str, str]]:
    system = ("TASK: codebook-induce\nYou study correct solutions of one math problem and name the distinct "
              f"solution strategies they use. {RUBRIC}\nList every solution id under the mode it uses. "
              'Reply with one JSON object: {"modes": [{"name": "<short name>", '
              '"definition": "<one or two sentences>", "members": ["s1", "..."]}]}')
    user = f"Problem:\n{problem}\n\n{_solutions(items)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def merge_messages(problem: str, candidates: list[dict]) -> list[dict[str, str]]:
    system = ("TASK: codebook-merge\nMerge candidate strategy definitions for one math problem into a codebook "
              f"of distinct modes, merging duplicates and near-duplicates. {RUBRIC}\nList the candidate ids each "
              'mode absorbs. Reply with one JSON object: {"modes": [{"name": "<short name>", '
              '"definition": "<one or two sentences>", "merged": ["C1", "..."]}]}')
    lines = "\n".join(f"- [{c['cid']}] {c['name']}: {c['definition']}" for c in candidates)
    user = f"Problem:\n{problem}\n\nCandidate modes:\n{lines}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def assign_messages(problem: str, modes: list[dict], items: list[tuple[str, str]],
                    pass_no: int) -> list[dict[str, str]]:
    system = ("TASK: codebook-assign\nAssign each solution of a math problem to one mode of the frozen codebook. "
              f"{RUBRIC}\nUse NEW (with a proposed name and definition) only when no mode fits, and UNCERTAIN when "
              "the solution's method cannot be determined. Reply with one JSON object: "
              '{"assignments": [{"id": "t1", "mode": "M1|NEW|UNCERTAIN", "confidence": 0.0-1.0, '
              '"proposed": {"name": "...", "definition": "..."}}]}')
    user = (f"Assignment pass: {pass_no}\nProblem:\n{problem}\n\nCodebook:\n{_codebook_lines(modes)}\n\n"
            f"{_solutions(items)}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def arbitrate_messages(problem: str, modes: list[dict], items: list[tuple[str, str]],
                       earlier: dict[str, str]) -> list[dict[str, str]]:
    system = ("TASK: codebook-arbitrate\nEarlier assignments of these solutions disagreed, were special or had low "
              f"confidence. Decide each one against the frozen codebook. {RUBRIC}\nReply with one JSON object: "
              '{"assignments": [{"id": "t1", "mode": "M1|NEW|UNCERTAIN", "confidence": 0.0-1.0, '
              '"proposed": {"name": "...", "definition": "..."}}]}')
    notes = "\n".join(f"{sid}: earlier labels {earlier[sid]}" for sid, _ in items)
    user = (f"Problem:\n{problem}\n\nCodebook:\n{_codebook_lines(modes)}\n\n{_solutions(items)}\n\n"
            f"Earlier labels:\n{notes}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def extend_messages(problem: str, modes: list[dict], proposals: list[dict]) -> list[dict[str, str]]:
    system = ("TASK: codebook-extend\nReview proposed new modes for a frozen codebook. Confirm a proposal only if "
              f"it is a genuinely distinct method not covered by any existing mode. {RUBRIC}\nReply with one JSON "
              'object: {"decisions": [{"proposal": "P1", "decision": "confirm|reject", "name": "...", '
              '"definition": "...", "existing": "M<k> when rejected as an existing mode"}]}')
    blocks = []
    for p in proposals:
        sols = "\n".join(f"  example: {t[:MAX_SOLUTION_CHARS // 2]}" for t in p["examples"])
        blocks.append(f"{p['id']}: {p['name']} — {p['definition']}\n{sols}")
    user = f"Problem:\n{problem}\n\nCodebook:\n{_codebook_lines(modes)}\n\nProposals:\n" + "\n".join(blocks)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _text(v, limit: int = 400) -> str | None:
    return v.strip()[:limit] if isinstance(v, str) and v.strip() else None


def parse_modes(text: str | None) -> list[dict] | None:
    obj = parse_json(text)
    if obj is None or not isinstance(obj.get("modes"), list):
        return None
    out = []
    for m in obj["modes"][:64]:
        if isinstance(m, dict) and _text(m.get("name"), 120) and _text(m.get("definition")):
            item = {"name": _text(m["name"], 120), "definition": _text(m["definition"])}
            for key in ("members", "merged"):  # local membership (induce) and absorbed candidates (merge)
                vals = m.get(key)
                if isinstance(vals, list):
                    item[key] = [v for v in vals[:500] if isinstance(v, str) and len(v) <= 16]
            out.append(item)
    return out


def parse_assignments(text: str | None, ids: list[str], valid_modes: set[str]) -> dict[str, dict] | None:
    """id -> {"mode": M<k>|NEW|UNCERTAIN|None, "confidence": float|None, "proposed": dict|None}.

    None when the response does not parse; an id missing from the answer, or an unknown mode, gets
    mode None (routed to reconciliation)."""
    obj = parse_json(text)
    if obj is None or not isinstance(obj.get("assignments"), list):
        return None
    out = {i: {"mode": None, "confidence": None, "proposed": None} for i in ids}
    for a in obj["assignments"][:1000]:
        if not isinstance(a, dict) or a.get("id") not in out:
            continue
        mode = a.get("mode")
        mode = mode.strip() if isinstance(mode, str) else None
        if mode not in valid_modes and mode not in SPECIAL:
            mode = None
        conf = a.get("confidence")
        conf = float(conf) if isinstance(conf, (int, float)) and not isinstance(conf, bool) and 0 <= conf <= 1 else None
        prop = a.get("proposed")
        prop = ({"name": _text(prop.get("name"), 120), "definition": _text(prop.get("definition"))}
                if isinstance(prop, dict) and _text(prop.get("name"), 120) else None)
        out[a["id"]] = {"mode": mode, "confidence": conf, "proposed": prop if mode == "NEW" else None}
    return out


def parse_decisions(text: str | None, ids: list[str]) -> dict[str, dict] | None:
    obj = parse_json(text)
    if obj is None or not isinstance(obj.get("decisions"), list):
        return None
    out = {}
    for d in obj["decisions"][:100]:
        if isinstance(d, dict) and d.get("proposal") in ids and d.get("decision") in ("confirm", "reject"):
            out[d["proposal"]] = {"decision": d["decision"], "name": _text(d.get("name"), 120),
                                  "definition": _text(d.get("definition")), "existing": _text(d.get("existing"), 10)}
    return out
