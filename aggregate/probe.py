"""Fixed-probe analyses on the ``samples`` table: every (scale, method, step) endpoint.

Per endpoint: Proposition 1 and its residual, success/failure token entropies with the K_r rule
and coverage, broad and paired ratios, hierarchical-bootstrap CI, sign test (Figures 4-5,
Tables A4-A5); per trained checkpoint: rarefied effective-mode retention against the base of its
scale with a question-bootstrap CI (Table 1, Table A6). Bootstrap generators are keyed per endpoint,
``default_rng([bootstrap_seed, crc32("scale/method/step")])``, so results do not depend on order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from aggregate import bootstrap, entropy, modes
from aggregate.io import group_keys, numeric
from aggregate.parallel import pmap
from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD


@dataclass
class ProbeIndex:
    """Samples grouped into endpoints e (E) and question groups g = (endpoint, question) (G)."""

    ep_keys: dict[str, np.ndarray]  # scale, method, step per endpoint (E,)
    row_ep: np.ndarray  # (N,) endpoint of each sample row
    row_qg: np.ndarray  # (N,) question group of each row
    qg_ep: np.ndarray  # (G,) endpoint of each question group (non-decreasing)
    qg_qid: np.ndarray  # (G,) question_id of each group
    sample: np.ndarray  # (N,) sample index
    reward: np.ndarray  # (N,) int 0/1

    @property
    def n_endpoints(self) -> int:
        return len(self.ep_keys["step"])

    def label(self, e: int) -> str:
        return f"{self.ep_keys['scale'][e]}/{self.ep_keys['method'][e]}/{int(self.ep_keys['step'][e])}"

    def qg_slice(self, e: int) -> slice:
        lo, hi = np.searchsorted(self.qg_ep, [e, e + 1])
        return slice(int(lo), int(hi))


def endpoint_rng(seed: int, label: str) -> np.random.Generator:
    """Generator keyed by (seed, endpoint label): independent of processing order."""
    return np.random.default_rng([seed, modes.stable_key(label)])


def index_samples(samples: pa.Table) -> ProbeIndex:
    """Group ids of the samples table; raises ValueError on duplicate (endpoint, question, sample)."""
    row_qg, qkeys = group_keys(samples, ["scale", "method", "step", "question_id"])
    row_ep, ekeys = group_keys(samples, ["scale", "method", "step"])
    G = len(qkeys["step"])
    qg_ep = np.zeros(G, dtype=np.int64)
    qg_ep[row_qg] = row_ep
    sample = numeric(samples.column("sample"), np.int64)
    key = row_qg * (int(sample.max()) + 1 if sample.size else 1) + sample
    if np.unique(key).size != key.size:
        raise ValueError("samples table has duplicate (scale, method, step, question_id, sample) rows")
    reward = numeric(samples.column("reward"), np.int64)
    return ProbeIndex(ekeys, row_ep, row_qg, qg_ep, qkeys["question_id"], sample, reward)


def _endpoint_stats(idx: ProbeIndex, q: entropy.QuestionStats, e: int) -> dict:
    sl = idx.qg_slice(e)
    out: dict = {"scale": str(idx.ep_keys["scale"][e]), "method": str(idx.ep_keys["method"][e]),
                 "step": int(idx.ep_keys["step"][e])}
    out.update(entropy.reward_ratios(q.H_tok_pos[sl], q.H_tok_neg[sl]))
    out.update(entropy.sign_test(q.H_tok_pos[sl], q.H_tok_neg[sl]))
    res = np.abs(q.residual[sl])
    out.update(
        accuracy=float(q.p_hat[sl].mean()), samples_per_question=float(q.K[sl].mean()),
        seq_entropy_mean=float(q.H_seq[sl].mean()), token_entropy_mean=float(q.H_tok[sl].mean()),
        chain_rule_entropy_mean=entropy.nanmean(q.chain_rule[sl]),
        seq_entropy_success_mean=entropy.nanmean(q.H_seq_pos[sl]),
        seq_entropy_failure_mean=entropy.nanmean(q.H_seq_neg[sl]),
        max_decomposition_residual=float(res.max()), mean_decomposition_residual=float(res.mean()),
    )
    return out


def _paired_lists(idx: ProbeIndex, hs: np.ndarray, start: np.ndarray, q: entropy.QuestionStats, e: int):
    """Success and failure h̄ lists of the paired questions Q_c of endpoint e; ``hs`` is h̄ with rows
    sorted by (group, reward, sample) (failures first), ``start`` the first row of each group."""
    sl = idx.qg_slice(e)
    both = np.flatnonzero(~np.isnan(q.H_tok_pos[sl]) & ~np.isnan(q.H_tok_neg[sl])) + sl.start
    succ = [hs[start[g] + q.K0[g] : start[g + 1]] for g in both]
    fail = [hs[start[g] : start[g] + q.K0[g]] for g in both]
    return succ, fail


def probe_stats(samples: pa.Table, settings: AggregateSettings,
                workers: int | None = None) -> tuple[ProbeIndex, entropy.QuestionStats, list[dict]]:
    """Per-endpoint entropy/ratio/bootstrap/sign-test entries (dicts, one per endpoint)."""
    idx = index_samples(samples)
    hbar = numeric(samples.column("token_entropy_mean"))
    q = entropy.question_stats(idx.row_qg, idx.reward, numeric(samples.column("logprob_sum")), hbar,
                               numeric(samples.column("n_tokens")), n_groups=len(idx.qg_ep), min_k_r=settings.min_k_r)
    entries = [_endpoint_stats(idx, q, e) for e in range(idx.n_endpoints)]
    hs = hbar[np.lexsort((idx.sample, idx.reward, idx.row_qg))]  # canonical order: row order never matters
    start = np.concatenate([[0], np.cumsum(q.K)])

    jobs = [(*_paired_lists(idx, hs, start, q, e), settings.bootstrap_resamples, settings.bootstrap_seed,
             idx.label(e), settings.ci_level) for e in range(idx.n_endpoints)]
    for ent, ci in zip(entries, pmap(_paired_ci, jobs, settings.workers if workers is None else workers)):
        ent["paired_ci"] = ci
    return idx, q, entries


def _paired_ci(succ: list, fail: list, B: int, seed: int, label: str, level: float) -> list[float]:
    """Percentile CI of the paired ratio for one endpoint (a worker-process task)."""
    if not succ:
        return [float("nan"), float("nan")]
    reps = bootstrap.paired_ratio_bootstrap(succ, fail, B, endpoint_rng(seed, label))
    return list(bootstrap.percentile_ci(reps, level))


# The validity judge labels every verifier success (rules or LLM); all null means its stage failed or never ran.
# Retention over unjudged successes would look like a result and is not one, so it is not reported.
LABELS_MISSING = ("column 'process_valid' is all null: the validity judge's labels are missing (its stage failed "
                  "or did not run; rerun `invoke judge`), so mode retention is not a result and is not reported "
                  "(Table 1 Mode Retention, Table A6, fig_retention_vs_passk)")


def mode_population(samples: pa.Table, idx: ProbeIndex,
                    settings: AggregateSettings) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the mode population (verifier success, judge-accepted, labelled, not uncertain) and
    their labels."""
    mode_col = samples.column("mode")
    labels = np.array(mode_col.to_pylist(), dtype=object)
    has = np.array([m is not None and str(m).strip().lower() not in settings.uncertain_labels for m in labels])
    pv = np.array([v is True for v in samples.column("process_valid").to_pylist()])
    rows = np.flatnonzero(has & pv & (idx.reward == 1))
    return rows, labels[rows].astype(str)


def retention_stats(samples: pa.Table, idx: ProbeIndex,
                    settings: AggregateSettings) -> tuple[dict[int, dict], list[str]]:
    """Rarefied retention per trained endpoint (keyed by endpoint index), vs the base of its scale."""
    notes: list[str] = []
    if samples.column("mode").null_count == samples.num_rows:
        return {}, ["column 'mode' is all null: no effective-mode retention "
                    "(Table 1 Mode Retention, Table A6, fig_retention_vs_passk)"]
    if samples.column("process_valid").null_count == samples.num_rows:
        return {}, [LABELS_MISSING]
    rows, labels = mode_population(samples, idx, settings)
    by_ep: dict[int, dict[str, np.ndarray]] = {}
    qg = idx.row_qg[rows]
    order = np.lexsort((idx.sample[rows], qg))  # by (question group, sample): row order never matters
    qg, labels = qg[order], labels[order]
    bounds = np.flatnonzero(np.diff(qg)) + 1
    for g_rows, g_labels in zip(np.split(qg, bounds), np.split(labels, bounds)):
        if g_rows.size:
            g = int(g_rows[0])
            by_ep.setdefault(int(idx.qg_ep[g]), {})[str(idx.qg_qid[g])] = g_labels
    jobs: list[tuple] = []
    methods, scales, steps = idx.ep_keys["method"], idx.ep_keys["scale"], idx.ep_keys["step"]
    for sc in sorted(set(scales)):
        base_eps = [e for e in range(idx.n_endpoints) if scales[e] == sc and methods[e] == BASE_METHOD]
        if not base_eps:
            notes.append(f"scale {sc}: no '{BASE_METHOD}' endpoint in samples, so no mode retention")
            continue
        b = min(base_eps, key=lambda e: steps[e])
        base_labels = by_ep.get(b, {})
        for e in range(idx.n_endpoints):
            if scales[e] != sc or methods[e] == BASE_METHOD:
                continue
            jobs.append((e, base_labels, by_ep.get(e, {}), idx.label(e), idx.label(b), settings))
    out = dict(zip([j[0] for j in jobs], pmap(_retention_entry, jobs, settings.workers)))
    if out and not any(v["mode_retention_n"] for v in out.values()):
        notes.append(f"no (question, checkpoint) pair has min(n_base, n_c) >= m_min = {settings.min_mode_m} "
                     "process-valid labelled successes: retention is null (lower --min-mode-m for small runs)")
    return out, notes


def _retention_entry(e: int, base_labels: dict, trained_labels: dict, label: str, base_label: str,
                     settings: AggregateSettings) -> dict:
    """Retention, its question-bootstrap CI and the support-loss variant for one checkpoint (worker task)."""
    res = modes.retention_pairs(base_labels, trained_labels, modes.stable_key(label), modes.stable_key(base_label),
                                settings.rarefaction_seed, settings.rarefaction_draws, settings.min_mode_m)
    rho = res["rho"]
    entry: dict = {"mode_retention_n": int(rho.size), "mode_questions": len(trained_labels)}
    if rho.size:
        reps = bootstrap.question_bootstrap_mean(rho, settings.bootstrap_resamples,
                                                 endpoint_rng(settings.bootstrap_seed, "retention/" + label))
        entry.update(mode_retention=float(100 * rho.mean()),
                     mode_retention_ci=list(bootstrap.percentile_ci(reps, settings.ci_level)),
                     mode_support_loss_fraction=_support_loss(base_labels, trained_labels, res["question_id"]))
    else:
        entry.update(mode_retention=float("nan"), mode_retention_ci=[float("nan"), float("nan")])
    return entry


def _support_loss(base: dict[str, np.ndarray], trained: dict[str, np.ndarray], qids: list[str]) -> float:
    """Fraction of eligible questions where a base mode is absent at the checkpoint (support loss,
    docs/estimators.md#semantic-modes)."""
    lost = [bool(set(base[q]) - set(trained[q])) for q in qids]
    return float(np.mean(lost)) if lost else float("nan")
