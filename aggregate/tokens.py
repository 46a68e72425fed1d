"""Reward-stratified chosen-token covariance proxy from the ``tokens`` table (Table 2, Table A8).

For each endpoint present in ``tokens``: join every token to its trajectory in ``samples``
(reward and GRPO advantage of its probe group, docs/estimators.md#covariance-proxy-and-q99-share), centre A and l
over all of the endpoint's
tokens, split by the trajectory's reward, then the q99 share with ties retained (and the selected
fraction) and the equal-count rank-budget shares. The join works on runs of equal keys, so a
token table sorted by trajectory (the usual layout) costs a few vector passes, not a hash join.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aggregate import covariance
from aggregate.io import numeric
from aggregate.probe import ProbeIndex
from aggregate.settings import AggregateSettings


def _raw(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list | None]:
    """Cheap comparable values of a key column in one batch: dictionary indices (+ the dictionary)
    for strings, the integers themselves otherwise."""
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.dictionary_encode(col)
    if pa.types.is_dictionary(col.type):
        if col.null_count:
            raise ValueError("token key column contains nulls")
        return col.indices.to_numpy(zero_copy_only=False), [str(v) for v in col.dictionary.to_pylist()]
    return numeric(col, np.int64) if col.null_count else col.to_numpy(zero_copy_only=False), None


def _runs(batch: pa.RecordBatch, vocabs: dict[str, dict[str, int]],
          steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, lengths and key codes (R, 5: scale, method, step code, question, sample) of the runs
    of equal keys in one batch. Change detection runs on the raw (small-integer) columns; only the
    run starts are translated into the samples' code space."""
    raws = [_raw(batch.column(c)) for c in ("scale", "method", "step", "question_id", "sample")]
    n = batch.num_rows
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for a, _ in raws:
        change[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(change)
    lens = np.diff(np.append(starts, n))
    keys = []
    for (a, dictionary), name in zip(raws, ("scale", "method", "step", "question_id", "sample")):
        v = a[starts].astype(np.int64)
        if dictionary is not None:
            lut = np.array([vocabs[name].get(d, -1) for d in dictionary], dtype=np.int64)
            v = lut[v] if lut.size else np.full(v.size, -1)
        elif name == "step":
            sc = np.searchsorted(steps, v)
            v = np.where((sc < steps.size) & (steps[np.minimum(sc, steps.size - 1)] == v), sc, -1)
        keys.append(v)
    return starts, lens, np.stack(keys, axis=1)


def token_rows(tokens: pa.Table, idx: ProbeIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, samples-row) of the token runs; row = -1 where no sample matches."""
    scales = sorted(set(map(str, idx.ep_keys["scale"])))
    methods = sorted(set(map(str, idx.ep_keys["method"])))
    qids = sorted(set(map(str, idx.qg_qid)))
    vocabs = {"scale": {v: i for i, v in enumerate(scales)}, "method": {v: i for i, v in enumerate(methods)},
              "question_id": {v: i for i, v in enumerate(qids)}}
    steps = np.unique(idx.ep_keys["step"].astype(np.int64))
    # samples keys -> row
    ep_s = np.array([vocabs["scale"][str(v)] for v in idx.ep_keys["scale"]])
    ep_m = np.array([vocabs["method"][str(v)] for v in idx.ep_keys["method"]])
    ep_t = np.searchsorted(steps, idx.ep_keys["step"].astype(np.int64))
    ep_code = (ep_s * len(methods) + ep_m) * steps.size + ep_t  # (E,)
    qg_q = np.array([vocabs["question_id"][str(v)] for v in idx.qg_qid], dtype=np.int64)
    nsamp = int(idx.sample.max()) + 1 if idx.sample.size else 1
    nq = max(len(qids), 1)
    row_key = (ep_code[idx.row_ep] * nq + qg_q[idx.row_qg]) * nsamp + idx.sample
    korder = np.argsort(row_key)
    skeys = row_key[korder]
    starts, lens, keys = [], [], []
    offset = 0
    for batch in tokens.to_batches():
        s, ln, k = _runs(batch, vocabs, steps)
        starts.append(s + offset)
        lens.append(ln)
        keys.append(k)
        offset += batch.num_rows
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    s, ln, k = np.concatenate(starts), np.concatenate(lens), np.concatenate(keys)
    bad = (k < 0).any(axis=1) | (k[:, 4] >= nsamp)
    kk = ((k[:, 0] * len(methods) + k[:, 1]) * steps.size + k[:, 2]) * nq + k[:, 3]
    kk = kk * nsamp + k[:, 4]
    pos = np.searchsorted(skeys, kk)
    pos = np.minimum(pos, max(skeys.size - 1, 0))
    found = ~bad & (skeys.size > 0) & (skeys[pos] == kk)
    rows = np.where(found, korder[pos], -1)
    return s, ln, rows


def q99_stats(tokens: pa.Table, idx: ProbeIndex, settings: AggregateSettings) -> tuple[dict[int, dict], list[str]]:
    """Per-endpoint q99 and rank-budget shares by reward stratum (keyed by endpoint index)."""
    notes: list[str] = []
    starts, lens, rows = token_rows(tokens, idx)
    unmatched = int(lens[rows < 0].sum())
    if unmatched:
        notes.append(f"{unmatched} token rows match no sample row (scale, method, step, question_id, sample) and are "
                     f"ignored")
    adv = covariance.grpo_advantage(idx.reward, idx.row_qg, settings.advantage_eps)
    keep = rows >= 0
    starts, lens, rows = starts[keep], lens[keep], rows[keep]
    run_ep = idx.row_ep[rows]
    logprob = numeric(tokens.column("logprob"), np.float64)
    out: dict[int, dict] = {}
    sorted_runs = bool(np.all(np.diff(run_ep) >= 0))
    for e in np.unique(run_ep):
        if sorted_runs:
            lo, hi = np.searchsorted(run_ep, [e, e + 1])
            r_st, r_ln, r_rw = starts[lo:hi], lens[lo:hi], rows[lo:hi]
        else:
            m = run_ep == e
            r_st, r_ln, r_rw = starts[m], lens[m], rows[m]
        contiguous = r_st.size and np.all(r_st[1:] == r_st[:-1] + r_ln[:-1])
        if contiguous:
            lp = logprob[r_st[0] : r_st[-1] + r_ln[-1]]
        else:
            tok = np.repeat(r_st - np.concatenate([[0], np.cumsum(r_ln)[:-1]]), r_ln) + np.arange(r_ln.sum())
            lp = logprob[tok]
        A = np.repeat(adv[r_rw], r_ln)
        rew = np.repeat(idx.reward[r_rw], r_ln)
        cov = covariance.covariance_proxy(A, lp)
        ent: dict = {"q99_tokens": int(lp.size)}
        for name, mask in (("success", rew == 1), ("failure", rew == 0)):
            c = cov[mask]
            q = covariance.q99_share(c, settings.q99_quantile, settings.quantile_method)
            ent[f"q99_share_{name}"] = q["share"]
            ent[f"q99_selected_fraction_{name}"] = q["selected_fraction"]
            ent[f"q99_cutoff_{name}"] = q["cutoff"]
            ent[f"q99_n_{name}"] = q["n"]
            for b, rb in covariance.rank_budget_shares(c, settings.rank_budgets).items():
                ent[f"rank_share_{name}_{b:g}"] = rb["share"]
        out[int(e)] = ent
    return out, notes
