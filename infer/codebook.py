"""Question-local semantic modes: induce, merge, freeze, assign twice, reconcile, extend, export.

Paper supplement §12; docs/estimators.md#semantic-modes. Population: process-valid successes (reward 1 and
process_valid True). Per question, with seeds from config [codebook]:

1. induce   chunks of `chunk_size` trajectories in seed-2027 order -> candidate modes, each with the chunk's
            members (the local assignment)
2. merge    candidates in seed-2028 order -> codebook v1, frozen
3. assign   every trajectory `assign_passes` times in seed-(2029, pass) batches against the frozen codebook
4. reconcile  local assignments or passes that disagree, special labels (NEW, UNCERTAIN), low confidence,
            and responses that do not parse go to arbitration; an arbitration that does not parse leaves the
            trajectory uncertain
5. extend   provisional NEW modes are reviewed as extension requests; confirmed ones are added and the
            codebook is refrozen (version + 1, with who changed what in its history)
6. export   `mode` in the samples table (None = uncertain, excluded downstream), the assignment table, and
            one reviewable JSON codebook per question under semantic/codebooks/

    python -m infer.codebook run --scale tiny [--base-url URL] [--model NAME]

Plug-in: `run_labeller(scale, labeller)` fills `mode` from any `ModeLabeller` (e.g. the toy world's rules), same export.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from infer import codebook_prompts as P
from infer.llm import LLMClient, LLMSettings, Request, exits_on_failure
from infer.llm_io import export_labels, load_questions, load_samples, load_texts, traj_id
from rcea.layout import llm_cache_dir, semantic_dir
from rcea import records
from rcea.config import base_default
from rcea.store import atomic_write_json, write_parquet


@runtime_checkable
class ModeLabeller(Protocol):
    def assign(self, question_id: str, completions: list[str]) -> list[str | None]:
        """One question-local mode label per completion (None = uncertain)."""


@dataclass(frozen=True)
class CodebookSettings:
    """Defaults are configs/base.toml [codebook] (read there, not copied); batch sizes are code-only."""
    induce_seed: int = field(default_factory=base_default("codebook.induce_seed"))
    merge_seed: int = field(default_factory=base_default("codebook.merge_seed"))
    assign_seed: int = field(default_factory=base_default("codebook.assign_seed"))
    assign_passes: int = field(default_factory=base_default("codebook.assign_passes"))
    chunk_size: int = field(default_factory=base_default("codebook.chunk_size"))
    assign_batch: int = 8
    arbitrate_batch: int = 4
    min_confidence: float = field(default_factory=base_default("codebook.min_confidence"))

    @classmethod
    def from_config(cls, cfg) -> "CodebookSettings":
        """From [codebook] (rcea.records.build; its endpoint keys are LLMSettings')."""
        return records.build(cls, cfg.section("codebook"), where="codebook", others=records.names(LLMSettings))


def qint(question_id: str) -> int:
    return int(hashlib.sha256(str(question_id).encode()).hexdigest()[:8], 16)


def safe_name(question_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(question_id))


def population(scale: str) -> tuple[pd.DataFrame, pd.Series, dict]:
    """Process-valid successes (sorted by traj_id), their texts and the questions."""
    samples = load_samples(scale)
    ok = samples["process_valid"].astype("boolean").fillna(False).astype(bool)
    pop = samples[(samples["reward"].astype(int) == 1) & ok].copy()
    pop["traj_id"] = [traj_id(r) for _, r in pop.iterrows()]  # also right when empty
    return pop.sort_values("traj_id").reset_index(drop=True), load_texts(scale, samples), load_questions(scale)


def _batches(seq: list, size: int) -> list[list]:
    return [seq[i:i + size] for i in range(0, len(seq), size)]


class Pipeline:
    def __init__(self, scale: str, llm: LLMSettings, cb: CodebookSettings):
        self.scale, self.llm, self.cb = scale, llm, cb
        self.client = LLMClient(llm, llm_cache_dir("codebook"))
        self.log: list[dict] = []  # every unparsed / failed response, with what it affected
        self.local: dict[str, str | None] = {}  # traj_id -> mode from the induction chunk, via the merge

    def _ask(self, reqs: list[Request], desc: str):
        return self.client.complete_many(reqs, desc=desc)

    # 1-2 ------------------------------------------------------------------------------------------
    def induce_and_merge(self, by_q: dict[str, list[tuple[str, str]]], problems: dict[str, str]) -> dict[str, dict]:
        jobs = []
        for q, items in by_q.items():
            order = np.random.default_rng([self.cb.induce_seed, qint(q)]).permutation(len(items))
            for c, chunk in enumerate(_batches([items[i] for i in order], self.cb.chunk_size)):
                local = [(f"s{j + 1}", text) for j, (_, text) in enumerate(chunk)]
                ids = {f"s{j + 1}": tid for j, (tid, _) in enumerate(chunk)}
                req = Request(P.induce_messages(problems[q], local), self.llm.params(self.cb.induce_seed))
                jobs.append((q, c, ids, req))
        cands: dict[str, list[dict]] = defaultdict(list)
        for (q, c, ids, _), r in zip(jobs, self._ask([j[3] for j in jobs], "induce")):
            modes = P.parse_modes(r.text) if r.ok else None
            if modes is None:
                self.log.append({"stage": "induce", "question_id": q, "chunk": c, "response": r.key,
                                 "problem": "error" if not r.ok else "unparsed"})
                continue
            for m in modes:  # local assignment: the chunk's members of this candidate
                cands[q].append({"name": m["name"], "definition": m["definition"], "chunk": c,
                                 "members": [ids[x] for x in m.get("members", []) if x in ids]})
        codebooks: dict[str, dict] = {}
        mjobs = []
        for q in by_q:
            if not cands[q]:
                self.log.append({"stage": "merge", "question_id": q, "problem": "no candidates"})
                continue
            order = np.random.default_rng([self.cb.merge_seed, qint(q)]).permutation(len(cands[q]))
            shuffled = [{**cands[q][i], "cid": f"C{k + 1}"} for k, i in enumerate(order)]
            req = Request(P.merge_messages(problems[q], shuffled), self.llm.params(self.cb.merge_seed))
            mjobs.append((q, shuffled, req))
        for (q, shuffled, _), r in zip(mjobs, self._ask([j[2] for j in mjobs], "merge")):
            n = len(shuffled)
            modes = P.parse_modes(r.text) if r.ok else None
            if not modes:
                self.log.append({"stage": "merge", "question_id": q, "response": r.key,
                                 "problem": "error" if not r.ok else "unparsed or empty"})
                continue
            self._local_assignments(shuffled, modes)
            codebooks[q] = {
                "question_id": q, "version": 1, "frozen": True,
                "modes": [{"id": f"M{i + 1}", "name": m["name"], "definition": m["definition"],
                           "added_in_version": 1} for i, m in enumerate(modes)],
                "history": [{"version": 1, "action": "merge", "by": self.llm.model, "response": r.key,
                             "candidates": n, "seeds": {"induce": self.cb.induce_seed, "merge": self.cb.merge_seed}}]}
        return codebooks

    def _local_assignments(self, candidates: list[dict], modes: list[dict]) -> None:
        """Each trajectory's induction-time mode: its candidate's merged mode (None if ambiguous or absent)."""
        cand_mode = {}
        for i, m in enumerate(modes):
            for cid in m.get("merged", []):
                cand_mode.setdefault(cid, f"M{i + 1}")
        seen: dict[str, set] = defaultdict(set)
        for c in candidates:
            if c["cid"] in cand_mode:
                for tid in c["members"]:
                    seen[tid].add(cand_mode[c["cid"]])
        for tid, ms in seen.items():
            self.local[tid] = next(iter(ms)) if len(ms) == 1 else None

    # 3 --------------------------------------------------------------------------------------------
    def assign(self, by_q, problems, codebooks) -> dict[str, list[dict | None]]:
        """traj_id -> one result per pass (None where the response did not parse)."""
        results: dict[str, list] = defaultdict(lambda: [None] * self.cb.assign_passes)
        jobs = []
        for p in range(1, self.cb.assign_passes + 1):
            for q, items in by_q.items():
                if q not in codebooks:
                    continue
                order = np.random.default_rng([self.cb.assign_seed, p, qint(q)]).permutation(len(items))
                for batch in _batches([items[i] for i in order], self.cb.assign_batch):
                    local = [(f"t{j + 1}", text) for j, (_, text) in enumerate(batch)]
                    ids = {f"t{j + 1}": tid for j, (tid, _) in enumerate(batch)}
                    req = Request(P.assign_messages(problems[q], codebooks[q]["modes"], local, p),
                                  self.llm.params(self.cb.assign_seed), variant=f"pass{p}")
                    jobs.append((p, q, ids, req))
        for (p, q, ids, _), r in zip(jobs, self._ask([j[3] for j in jobs], "assign")):
            valid = {m["id"] for m in codebooks[q]["modes"]}
            parsed = P.parse_assignments(r.text, list(ids), valid) if r.ok else None
            if parsed is None:
                self.log.append({"stage": f"assign-pass{p}", "question_id": q, "response": r.key,
                                 "problem": "error" if not r.ok else "unparsed", "trajectories": len(ids)})
            for local, tid in ids.items():
                results[tid][p - 1] = parsed[local] if parsed is not None else None
        return results

    def disputes(self, passes: list[dict | None], local: str | None = None) -> list[str]:
        reasons = []
        modes = [x["mode"] if x else None for x in passes]
        if local is not None and any(m is not None and m not in P.SPECIAL and m != local for m in modes):
            reasons.append("local_disagree")
        if any(x is None for x in passes):
            reasons.append("unparsed")
        elif any(m is None for m in modes):
            reasons.append("missing")
        if len({m for m in modes if m is not None}) > 1:
            reasons.append("disagree")
        for s in P.SPECIAL:
            if s in modes:
                reasons.append(f"special:{s}")
        if any(x and x["mode"] and x["confidence"] is not None and x["confidence"] < self.cb.min_confidence
               for x in passes) or any(x and x["mode"] and x["confidence"] is None for x in passes):
            reasons.append("low_confidence")
        return reasons

    # 4 --------------------------------------------------------------------------------------------
    def arbitrate(self, disputed: dict[str, list[tuple[str, str, str]]], problems, codebooks) -> dict[str, dict | None]:
        jobs = []
        for q, items in disputed.items():
            for batch in _batches(items, self.cb.arbitrate_batch):
                local = [(f"t{j + 1}", text) for j, (_, text, _) in enumerate(batch)]
                ids = {f"t{j + 1}": tid for j, (tid, _, _) in enumerate(batch)}
                earlier = {f"t{j + 1}": e for j, (_, _, e) in enumerate(batch)}
                req = Request(P.arbitrate_messages(problems[q], codebooks[q]["modes"], local, earlier),
                              self.llm.params(self.cb.assign_seed), variant="arbitrate")
                jobs.append((q, ids, req))
        out: dict[str, dict | None] = {}
        for (q, ids, _), r in zip(jobs, self._ask([j[2] for j in jobs], "arbitrate")):
            valid = {m["id"] for m in codebooks[q]["modes"]}
            parsed = P.parse_assignments(r.text, list(ids), valid) if r.ok else None
            if parsed is None:
                self.log.append({"stage": "arbitrate", "question_id": q, "response": r.key,
                                 "problem": "error" if not r.ok else "unparsed", "trajectories": len(ids)})
            for local, tid in ids.items():
                out[tid] = parsed[local] if parsed is not None else None
        return out

    # 5 --------------------------------------------------------------------------------------------
    def extend(self, new: dict[str, list[tuple[str, str, dict]]], problems, codebooks) -> dict[str, str | None]:
        """Review provisional NEW assignments per question; returns traj_id -> final mode or None."""
        jobs = []
        for q, items in new.items():
            groups: dict[str, list] = {}
            for tid, text, prop in items:
                groups.setdefault(prop["name"].strip().lower(), []).append((tid, text, prop))
            proposals = []
            for j, (_, members) in enumerate(sorted(groups.items())):
                proposals.append({"id": f"P{j + 1}", "name": members[0][2]["name"],
                                  "definition": members[0][2]["definition"] or "",
                                  "examples": [t for _, t, _ in members[:3]], "members": [m[0] for m in members]})
            req = Request(P.extend_messages(problems[q], codebooks[q]["modes"], proposals),
                          self.llm.params(self.cb.merge_seed), variant="extend")
            jobs.append((q, proposals, req))
        out: dict[str, str | None] = {}
        for (q, proposals, _), r in zip(jobs, self._ask([j[2] for j in jobs], "extend")):
            dec = P.parse_decisions(r.text, [p["id"] for p in proposals]) if r.ok else None
            if dec is None:
                self.log.append({"stage": "extend", "question_id": q, "response": r.key,
                                 "problem": "error" if not r.ok else "unparsed"})
                dec = {}
            cb = codebooks[q]
            valid = {m["id"] for m in cb["modes"]}
            for p in proposals:
                d = dec.get(p["id"])
                if d and d["decision"] == "confirm":
                    mid = f"M{len(cb['modes']) + 1}"
                    cb["version"] += 1
                    cb["modes"].append({"id": mid, "name": d["name"] or p["name"],
                                        "definition": d["definition"] or p["definition"],
                                        "added_in_version": cb["version"]})
                    cb["history"].append({"version": cb["version"], "action": "extend", "mode": mid,
                                          "by": self.llm.model, "response": r.key, "proposal": p["name"],
                                          "trajectories": len(p["members"])})
                    label = mid
                elif d and d["existing"] in valid:
                    label = d["existing"]
                else:
                    label = None
                    self.log.append({"stage": "extend", "question_id": q, "problem": "not confirmed",
                                     "proposal": p["name"], "trajectories": len(p["members"])})
                for tid in p["members"]:
                    out[tid] = label
        return out

    # all ------------------------------------------------------------------------------------------
    def run(self) -> pd.DataFrame:
        pop, texts, questions = population(self.scale)
        by_q: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for tid, q in zip(pop["traj_id"], pop["question_id"]):
            by_q[str(q)].append((tid, texts.get(tid, "")))
        problems = {q: questions.get(q, {}).get("problem", "") for q in by_q}
        codebooks = self.induce_and_merge(by_q, problems)
        passes = self.assign(by_q, problems, codebooks)
        rows, disputed = {}, defaultdict(list)
        text_of = {tid: t for items in by_q.values() for tid, t in items}
        for q, items in by_q.items():
            for tid, _ in items:
                row = {"traj_id": tid, "question_id": q}
                none = [None] * self.cb.assign_passes
                res = passes.get(tid, none) if q in codebooks else none
                for p, x in enumerate(res, 1):
                    row[f"pass{p}_mode"] = x["mode"] if x else None
                    row[f"pass{p}_confidence"] = x["confidence"] if x else None
                if q not in codebooks:
                    row.update(local_mode=None, reasons="no codebook", disputed=False, arbiter_mode=None, mode=None,
                               source="no-codebook")
                else:
                    row["local_mode"] = self.local.get(tid)
                    reasons = self.disputes(res, row["local_mode"])
                    row.update(reasons=";".join(reasons), disputed=bool(reasons), arbiter_mode=None)
                    if reasons:
                        earlier = ", ".join(f"pass{p}={row[f'pass{p}_mode']}"
                                            for p in range(1, self.cb.assign_passes + 1))
                        disputed[q].append((tid, text_of[tid], earlier))
                        row.update(mode=None, source="pending")
                    else:
                        row.update(mode=res[0]["mode"], source="assignment")
                rows[tid] = row
        arb = self.arbitrate(disputed, problems, codebooks)
        new = defaultdict(list)
        for tid, x in arb.items():
            row = rows[tid]
            row["arbiter_mode"] = x["mode"] if x else None
            if x is None:
                row.update(mode=None, source="arbitration-unparsed")
            elif x["mode"] == "NEW" and x["proposed"]:
                new[row["question_id"]].append((tid, text_of[tid], x["proposed"]))
                row.update(mode=None, source="provisional-new")
            elif x["mode"] and x["mode"] not in P.SPECIAL:
                row.update(mode=x["mode"], source="arbitration")
            else:
                row.update(mode=None, source="uncertain")
        for tid, label in self.extend(new, problems, codebooks).items():
            rows[tid].update(mode=label, source="extension" if label else "extension-rejected")
        return self.export(pop, rows, codebooks)

    def export(self, pop: pd.DataFrame, rows: dict[str, dict], codebooks: dict[str, dict]) -> pd.DataFrame:
        out_dir = semantic_dir(self.scale)
        cols = ["scale", "method", "step", "question_id", "sample"]
        assigned = pd.DataFrame(list(rows.values())) if rows else \
            pd.DataFrame({"traj_id": [], "question_id": [], "mode": [], "source": [], "disputed": []})  # no population
        table = pop[["traj_id"] + cols].merge(assigned.drop(columns="question_id"), on="traj_id", how="left")
        write_parquet(table, out_dir / "codebook" / "assignments.parquet", stage="codebook",
                      seeds={"induce": self.cb.induce_seed, "merge": self.cb.merge_seed, "assign": self.cb.assign_seed})
        write_parquet(pd.DataFrame(self.log, columns=sorted({k for e in self.log for k in e}) or ["stage"]).astype(str),
                      out_dir / "codebook" / "problems.parquet", stage="codebook")
        for q, cb in codebooks.items():
            counts = table[table["question_id"] == q]["mode"].value_counts()
            cb = {**cb, "counts": {m["id"]: int(counts.get(m["id"], 0)) for m in cb["modes"]}}
            atomic_write_json(out_dir / "codebooks" / f"{safe_name(q)}.json", cb)
        atomic_write_json(out_dir / "codebooks" / "index.json", {
            "model": self.llm.model, "settings": self.cb.__dict__,
            "questions": {q: {"version": cb["version"], "modes": len(cb["modes"])}
                          for q, cb in sorted(codebooks.items())},
            "summary": summary(table)})
        export_labels(self.scale, mode=dict(zip(table["traj_id"], table["mode"].where(table["mode"].notna(), None))))
        return table


def summary(table: pd.DataFrame) -> dict:
    return {"trajectories": int(len(table)), "included": int(table["mode"].notna().sum()),
            "uncertain": int(table["mode"].isna().sum()), "disputed": int(table["disputed"].sum()),
            "by_source": {k: int(v) for k, v in table["source"].value_counts().sort_index().items()}}


def run_labeller(scale: str, labeller: ModeLabeller, source: str = "plug-in") -> pd.DataFrame:
    """Fill `mode` from a plug-in labeller, question by question, through the same export path; the
    assignment table (semantic/codebook/assignments.parquet, read by the audit sample) gets the same
    columns as the LLM pipeline's core: traj_id, scale, method, step, question_id, sample, mode, source,
    disputed."""
    pop, texts, _ = population(scale)
    labels: dict[str, str | None] = {}
    for q, grp in pop.groupby("question_id", sort=True):
        ids = list(grp["traj_id"])
        got = labeller.assign(str(q), [texts.get(t, "") for t in ids])
        if len(got) != len(ids):
            raise ValueError(f"labeller returned {len(got)} labels for {len(ids)} completions of {q}")
        labels.update(zip(ids, got))
    table = pop[["traj_id", "scale", "method", "step", "question_id", "sample"]].copy()
    table["mode"] = pd.array([labels.get(t) for t in table["traj_id"]], dtype="string")
    table["source"] = source
    table["disputed"] = False
    write_parquet(table, semantic_dir(scale) / "codebook" / "assignments.parquet", stage="codebook")
    export_labels(scale, mode=labels)
    return table


@exits_on_failure
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infer.codebook", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--scale", required=True)
    p.add_argument("--base-url", default=None, help="override [codebook] base_url")
    p.add_argument("--model", default=None)
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    from rcea.config import load_config
    cfg = load_config(args.scale)
    llm = LLMSettings.from_config(cfg, "codebook", base_url=args.base_url, model=args.model,
                                  concurrency=args.concurrency, progress=not args.no_progress)
    pipe = Pipeline(args.scale, llm, CodebookSettings.from_config(cfg))
    table = pipe.run()
    print(json.dumps({**summary(table), **pipe.client.stats(), "problems": len(pipe.log)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
