"""Synthetic datasets in the RCEA sample schema, for tests and the benchmark (``python -m benchmarks.aggregate``).

Not a model of the paper's results: rewards, lengths and entropies follow simple seeded
distributions chosen so every analysis has something to compute (failures longer and more
entropic, success rate rising with progress, fp32 zero log-probs that tie in the q99 tail, one
run that collapses after 45% progress). Built with numpy directly into Arrow tables; string
columns are dictionary arrays so a 46M-row token table stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rcea.config import METHODS as ALL_METHODS

METHODS = tuple(m for m in ALL_METHODS if m != "archer")  # the paper's six compared objectives


@dataclass
class SynthSpec:
    """Shape of a synthetic dataset. Defaults: the paper scale (12 runs x 5 checkpoints x 200 x 32)."""

    scales: dict[str, int] = field(default_factory=lambda: {"3b": 4000, "7b": 8000})  # scale -> steps/epoch
    methods: tuple[str, ...] = METHODS
    progress: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)  # probe checkpoints per run (+ base at 0)
    n_questions: int = 200
    k: int = 32
    mean_tokens: int = 600
    tokens: bool = True  # token rows at each run's final checkpoint
    modes: bool = True
    greedy_questions: dict[str, int] = field(default_factory=lambda: {"aime24": 30, "aime25": 30, "math500": 500,
                                                                      "amc23": 40, "minerva": 40})
    passk_n: int = 64
    failing_run: tuple[str, str] | None = ("7b", "clip_cov")
    seed: int = 0


def tiny_spec(**kw) -> SynthSpec:
    """4 questions x 4 samples, one scale, one method: what the tiny end-to-end pipeline produces."""
    base = dict(scales={"tiny": 4}, methods=("grpo",), progress=(0.5, 1.0), n_questions=4, k=4, mean_tokens=12,
                greedy_questions={"aime24": 2, "aime25": 2, "math500": 3, "amc23": 2, "minerva": 2}, passk_n=4,
                failing_run=None)
    base.update(kw)
    return SynthSpec(**base)


def _dict_col(values: list[str], idx: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(values, pa.string()))


def generate(spec: SynthSpec) -> dict[str, pa.Table]:
    """All five schema tables as Arrow tables."""
    rng = np.random.default_rng(spec.seed)
    Q, K = spec.n_questions, spec.k
    qids = [f"q{i:04d}" for i in range(Q)]
    difficulty = rng.beta(0.25, 0.6, Q)  # base success probability per question (paper-like coverage: ~45% / ~80%)
    n_modes = rng.integers(1, 5, Q)
    mode_pref = [rng.dirichlet(np.ones(m)) for m in n_modes]
    has_modes = rng.random(Q) < 0.65
    endpoints = []  # (scale, method, step, progress, is_final)
    for sc, spe in spec.scales.items():
        endpoints.append((sc, "base", 0, 0.0, False))
        for m in spec.methods:
            for pr in spec.progress:
                endpoints.append((sc, m, int(round(pr * spe)), pr, pr == max(spec.progress)))
    scales = list(spec.scales)
    methods = ["base", *spec.methods]
    s_cols: dict[str, list] = {c: [] for c in ("scale", "method", "step", "q", "sample", "reward", "n_tokens", "lp",
                                               "hbar", "pv", "mode")}
    t_parts: list[dict[str, np.ndarray]] = []
    for ei, (sc, m, step, pr, final) in enumerate(endpoints):
        shift = 0.1 * pr * (1 + 0.2 * methods.index(m) / len(methods))
        p = np.clip(difficulty + shift * (1 - difficulty), 0.0, 1.0)
        r = (rng.random((Q, K)) < p[:, None]).astype(np.int8)
        n_tok = np.maximum(1, rng.poisson(spec.mean_tokens * np.where(r == 1, 0.8, 1.16))).astype(np.int32)
        base_h = 0.55 * (1 - 0.5 * pr) if m != "gtpo" else 0.55 * (1 - 0.9 * pr)
        hbar = np.abs(rng.normal(base_h * np.where(r == 1, 1.0, 1.45), 0.08)).astype(np.float64)
        lp = -(n_tok * hbar * rng.uniform(0.6, 1.1, (Q, K)))
        if spec.tokens and final:
            total = int(n_tok.sum())
            ent = rng.exponential(1.0, total).astype(np.float32)
            logp = (-rng.exponential(0.6, total)).astype(np.float32)
            logp[rng.random(total) < 0.25] = 0.0  # fp32 zero log-probs: ties at the top of failures
            traj = np.repeat(np.arange(Q * K), n_tok.ravel())
            ent *= np.repeat((hbar.ravel() / 1.0).astype(np.float32), n_tok.ravel())
            hbar = (np.bincount(traj, weights=ent, minlength=Q * K) / n_tok.ravel()).reshape(Q, K)
            lp = np.bincount(traj, weights=logp, minlength=Q * K).reshape(Q, K)
            starts = np.concatenate([[0], np.cumsum(n_tok.ravel())[:-1]])
            t_parts.append({"scale": np.full(total, scales.index(sc), np.int8),
                            "method": np.full(total, methods.index(m), np.int8),
                            "step": np.full(total, step, np.int32), "q": (traj // K).astype(np.int16),
                            "sample": (traj % K).astype(np.int16),
                            "position": (np.arange(total) - np.repeat(starts, n_tok.ravel())).astype(np.int32),
                            "token_id": rng.integers(0, 151_000, total, dtype=np.int32), "logprob": logp,
                            "entropy": ent})
        concentrate = 1 + 2 * pr
        mode = np.full((Q, K), None, dtype=object)
        if spec.modes:
            for q in np.flatnonzero(has_modes):
                w = mode_pref[q] ** concentrate
                lab = rng.choice(len(w), K, p=w / w.sum())
                mode[q] = [f"m{x}" for x in lab]
            mode[r == 0] = None
        pv = (rng.random((Q, K)) < 0.92) & (r == 1)
        s_cols["scale"].append(np.full(Q * K, scales.index(sc), np.int8))
        s_cols["method"].append(np.full(Q * K, methods.index(m), np.int8))
        s_cols["step"].append(np.full(Q * K, step, np.int64))
        s_cols["q"].append(np.repeat(np.arange(Q, dtype=np.int16), K))
        s_cols["sample"].append(np.tile(np.arange(K, dtype=np.int64), Q))
        for name, arr in (("reward", r), ("n_tokens", n_tok), ("lp", lp), ("hbar", hbar), ("pv", pv), ("mode", mode)):
            s_cols[name].append(arr.ravel())
    cat = {k: np.concatenate(v) for k, v in s_cols.items()}
    samples = pa.table({
        "scale": _dict_col(scales, cat["scale"]), "method": _dict_col(methods, cat["method"]), "step": cat["step"],
        "question_id": _dict_col(qids, cat["q"]), "benchmark": pa.array(np.array(["math500"] * len(cat["q"]))),
        "sample": cat["sample"], "reward": cat["reward"].astype(np.int64), "n_tokens": cat["n_tokens"].astype(np.int64),
        "logprob_sum": cat["lp"].astype(np.float64), "token_entropy_mean": cat["hbar"].astype(np.float64),
        "truncated": pa.array(np.zeros(len(cat["q"]), bool)),
        "process_valid": pa.array(cat["pv"].astype(bool) if spec.modes else [None] * len(cat["q"]), pa.bool_()),
        "mode": pa.array(list(cat["mode"]), pa.string()),
    })
    out = {"samples": samples}
    if t_parts:
        tc = {k: np.concatenate([p[k] for p in t_parts]) for k in t_parts[0]}
        out["tokens"] = pa.table({
            "scale": _dict_col(scales, tc["scale"]), "method": _dict_col(methods, tc["method"]), "step": tc["step"],
            "question_id": _dict_col(qids, tc["q"]), "sample": tc["sample"], "position": tc["position"],
            "token_id": tc["token_id"], "logprob": tc["logprob"], "entropy": tc["entropy"]})
    out.update(_bench_tables(spec, rng, endpoints, scales, methods))
    return out


def _bench_tables(spec: SynthSpec, rng: np.random.Generator, endpoints, scales, methods) -> dict[str, pa.Table]:
    g = {c: [] for c in ("scale", "method", "step", "benchmark", "q", "correct", "boxed", "n_tokens")}
    pk = {c: [] for c in ("scale", "method", "step", "q", "n", "c")}
    cv = {c: [] for c in ("scale", "method", "step_from", "step_to", "pred", "obs")}
    for sc, spe in spec.scales.items():
        for m in methods:
            dense = [0] if m == "base" else [int(round(spe * j / 20)) for j in range(1, 21)]
            milestones = [0] if m == "base" else [int(round(spe * f)) for f in (0.25, 0.5, 0.75, 1.0)]
            for step in sorted(set(dense) | set(milestones)):
                pr = step / spe
                fail = spec.failing_run == (sc, m) and pr >= 0.5
                for b, nq in spec.greedy_questions.items():
                    if b != "math500" and step not in milestones:
                        continue
                    acc = 0.002 if fail else 0.3 + 0.3 * pr * (b == "math500") + 0.05 * rng.random()
                    g["scale"] += [sc] * nq
                    g["method"] += [m] * nq
                    g["step"] += [step] * nq
                    g["benchmark"] += [b] * nq
                    g["q"] += [f"{b}-{i}" for i in range(nq)]
                    g["correct"].append(rng.random(nq) < acc)
                    g["boxed"].append(rng.random(nq) < (0.01 if fail else 0.97))
                    g["n_tokens"].append(rng.poisson(2000 if fail else 500, nq))
            final = 0 if m == "base" else spe
            nq = spec.greedy_questions.get("math500", 5)
            pq_ = rng.beta(2, 1.2, nq)
            pk["scale"] += [sc] * nq
            pk["method"] += [m] * nq
            pk["step"] += [final] * nq
            pk["q"] += [f"math500-{i}" for i in range(nq)]
            pk["n"].append(np.full(nq, spec.passk_n))
            pk["c"].append(rng.binomial(spec.passk_n, pq_))
            if m != "base":
                for s in milestones:
                    P = rng.normal(-0.01, 0.01, 64)
                    cv["scale"] += [sc] * 64
                    cv["method"] += [m] * 64
                    cv["step_from"] += [max(s - 50, 0)] * 64
                    cv["step_to"] += [s] * 64
                    cv["pred"].append(P)
                    cv["obs"].append(P * 0.97 + rng.normal(0, 0.001, 64))
    greedy = pa.table({"scale": g["scale"], "method": g["method"], "step": pa.array(g["step"], pa.int64()),
                       "benchmark": g["benchmark"], "question_id": g["q"], "correct": np.concatenate(g["correct"]),
                       "boxed": np.concatenate(g["boxed"]), "n_tokens": np.concatenate(g["n_tokens"]).astype(np.int64)})
    passk = pa.table({"scale": pk["scale"], "method": pk["method"], "step": pa.array(pk["step"], pa.int64()),
                      "question_id": pk["q"], "n": np.concatenate(pk["n"]).astype(np.int64),
                      "c": np.concatenate(pk["c"]).astype(np.int64)})
    cov = pa.table({"scale": cv["scale"], "method": cv["method"], "step_from": pa.array(cv["step_from"], pa.int64()),
                    "step_to": pa.array(cv["step_to"], pa.int64()), "predicted_delta": np.concatenate(cv["pred"]),
                    "observed_delta": np.concatenate(cv["obs"])})
    return {"greedy": greedy, "passk": passk, "covariance": cov}


def write_dataset(tables: dict[str, pa.Table], root: str | Path, parts: int = 1) -> Path:
    """Write tables as DIR/<name>.parquet (parts == 1) or DIR/<name>/part-*.parquet, each part with its
    (empty) manifest: a part without one is incomplete and not read."""
    import pyarrow.parquet as pq

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for name, t in tables.items():
        if parts <= 1:
            pq.write_table(t, root / f"{name}.parquet")
        else:
            (root / name).mkdir(exist_ok=True)
            step = max(1, -(-t.num_rows // parts))
            for i in range(parts):
                part = root / name / f"part-{i:03d}.parquet"
                pq.write_table(t.slice(i * step, step), part)
                part.with_name(part.name + ".manifest.json").write_text("{}")  # complete (docs/schema.md)
    return root
