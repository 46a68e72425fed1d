"""Independent re-implementation of the seven objectives with plain per-sample Python loops (floats).

Written from the formulas in docs/objectives.md without reusing train.objectives; tests compare the two on random
batches.
"""

from __future__ import annotations

import math


def rows(x):
    return [list(map(float, r)) for r in x.tolist()]


def advantages(r, g, scale="group", eps=1e-4):
    out = []
    for i in range(len(r)):
        members = [r[j] for j in range(len(r)) if g[j] == g[i]]
        mean = sum(members) / len(members)
        if scale == "none":
            out.append(r[i] - mean)
            continue
        pool = members if scale == "group" else r
        pm = sum(pool) / len(pool)
        std = math.sqrt(sum((x - pm) ** 2 for x in pool) / (len(pool) - 1)) if len(pool) > 1 else 0.0
        out.append((r[i] - mean) / (std + eps))
    return out


def ppo(rho, a, el, eh):
    return -min(rho * a, min(max(rho, 1 - el), 1 + eh) * a)


def valid_positions(m):
    return [t for t, v in enumerate(m) if v > 0]


def seq(per, mask):
    tot = 0.0
    for i in range(len(per)):
        n = sum(mask[i])
        tot += sum(per[i][t] * mask[i][t] for t in range(len(per[i]))) / max(1.0, n)
    return tot / len(per)


def tok(per, mask):
    n = sum(sum(m) for m in mask)
    return sum(per[i][t] * mask[i][t] for i in range(len(per)) for t in range(len(per[i]))) / max(1.0, n)


def unpack(b):
    keys = ("logp", "old_logp", "ref_logp", "entropy", "old_entropy", "mask", "completion_ids")
    d = {k: rows(b[k]) for k in keys}
    d["rewards"] = [float(x) for x in b["rewards"].tolist()]
    d["group_ids"] = [int(x) for x in b["group_ids"].tolist()]
    return d


def mixed(r, g):
    return [len({r[j] for j in range(len(r)) if g[j] == g[i]}) > 1 for i in range(len(r))]


def grpo(b, eps=0.2, eps_high=0.2, loss_type="grpo"):
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"])
    per = [[ppo(math.exp(lp - o), A[i], eps, eps_high) for lp, o in zip(d["logp"][i], d["old_logp"][i])]
           for i in range(len(A))]
    return seq(per, d["mask"]) if loss_type == "grpo" else tok(per, d["mask"])


def dapo(b, L_max=2048, buffer=0.2, factor=1.0):
    d = unpack(b)
    shaped = []
    for i, r in enumerate(d["rewards"]):
        n = sum(d["mask"][i])
        cache = buffer * L_max
        pen = factor * (0.0 if n <= L_max - cache else (-1.0 if n > L_max else ((L_max - cache) - n) / cache))
        shaped.append(r + pen)
    A = advantages(shaped, d["group_ids"])
    keep = mixed(d["rewards"], d["group_ids"])
    num = den = 0.0
    for i in range(len(A)):
        if not keep[i]:
            continue
        for t in valid_positions(d["mask"][i]):
            num += ppo(math.exp(d["logp"][i][t] - d["old_logp"][i][t]), A[i], 0.2, 0.28)
            den += 1
    return num / max(den, 1.0)


def _cov(d, A):
    toks = [(i, t) for i in range(len(A)) for t in valid_positions(d["mask"][i])]
    a_bar = sum(A[i] for i, _ in toks) / max(len(toks), 1)
    l_bar = sum(d["logp"][i][t] for i, t in toks) / max(len(toks), 1)
    return toks, {(i, t): (A[i] - a_bar) * (d["logp"][i][t] - l_bar) for i, t in toks}


def clip_cov_all_candidates(b, lb, ub, eps=0.2):
    """Clip-Cov when every candidate is selected (selection ratio large enough)."""
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"])
    toks, cov = _cov(d, A)
    num = 0.0
    for i, t in toks:
        rho = math.exp(d["logp"][i][t] - d["old_logp"][i][t])
        unclipped, clipped = -rho * A[i], -min(max(rho, 1 - eps), 1 + eps) * A[i]
        is_clipped = clipped > unclipped
        if not is_clipped and lb < cov[(i, t)] < ub:
            continue
        num += max(unclipped, clipped)
    return num / max(len(toks), 1)


def kl_cov(b, kappa, beta):
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"])
    toks, cov = _cov(d, A)
    k = min(max(int(kappa * len(toks)), 1), len(toks))
    chosen = set(sorted(toks, key=lambda it: -cov[it])[:k])
    num = 0.0
    for i, t in toks:
        x = d["logp"][i][t] - d["old_logp"][i][t]
        num += -math.exp(x) * A[i] + (beta * abs(x) if (i, t) in chosen else 0.0)
    return num / max(len(toks), 1)


def gtpo(b, gamma=0.1, W=2.0, thr=math.log(2), eps=0.2, h_ini=None):
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"], scale="none")
    B = len(A)
    lens = [len(valid_positions(m)) for m in d["mask"]]
    H = [sum(d["entropy"][i][t] for t in range(lens[i])) / max(lens[i], 1) for i in range(B)]
    if h_ini is None:
        h_ini = sum(H[i] for i in range(B) if lens[i] > 0) / max(sum(1 for n in lens if n > 0), 1)
    lam = []
    for i in range(B):
        opp = [j for j in range(B) if d["group_ids"][j] == d["group_ids"][i] and A[i] * A[j] < 0]
        w = W if A[i] > 0 else 0.0
        li = [1.0] * lens[i]
        t = 0  # shared prefix
        while t < lens[i] and any(t < lens[j] and d["completion_ids"][j][t] == d["completion_ids"][i][t] for j in opp):
            li[t] *= w
            t += 1
        k = 0  # shared suffix
        while k < lens[i] and any(
            k < lens[j] and d["completion_ids"][j][lens[j] - 1 - k] == d["completion_ids"][i][lens[i] - 1 - k]
            for j in opp
        ):
            li[lens[i] - 1 - k] *= w
            k += 1
        lam.append(li)
    total = 0.0
    for i in range(B):
        delta = 1.0 if h_ini > thr else float(H[i] <= thr)
        a_hat = delta * (A[i] - gamma * H[i])
        s = sum(ppo(math.exp(d["logp"][i][t] - d["old_logp"][i][t]), a_hat * lam[i][t], eps, eps)
                for t in range(lens[i]))
        total += s / max(lens[i], 1)
    return total / B


def ep_grpo(b, alpha=3.0, K=10, w=0.2, c=1.0):
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"])
    B = len(A)
    lens = [len(valid_positions(m)) for m in d["mask"]]
    gate, bucket, sig = {}, {}, {}
    for i in range(B):
        h = d["old_entropy"][i][: lens[i]]
        hmax = max(h, default=0.0)
        raw = [1 + alpha * (x / hmax if hmax > 0 else 0.0) for x in h]
        mean = sum(raw) / max(len(raw), 1)
        for t in range(lens[i]):
            gate[i, t] = raw[t] / mean
            bucket[i, t] = min(K * t // lens[i], K - 1)   # relative position t / L, in integers
            sig[i, t] = c * (d["old_logp"][i][t] - d["ref_logp"][i][t])
    total = 0.0
    for i in range(B):
        s = 0.0
        for t in range(lens[i]):
            cell = [sig[j, u] for (j, u) in sig if d["group_ids"][j] == d["group_ids"][i] and bucket[j, u] == bucket[i, t]]
            if len(cell) >= 2:
                mu = sum(cell) / len(cell)
                sd = math.sqrt(sum((x - mu) ** 2 for x in cell) / len(cell))
                z = (sig[i, t] - mu) / (sd + 1e-4)
            else:
                z = 0.0
            a_hat = gate[i, t] * A[i] + w * (2 * d["rewards"][i] - 1) * z
            s += ppo(math.exp(d["logp"][i][t] - d["old_logp"][i][t]), a_hat, 0.2, 0.2)
        total += s / max(lens[i], 1)
    return total / B


def quantile(xs, q):
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def archer(b, q=0.8, el=0.2, eh=0.5, c=10.0, beta_low=0.001):
    d = unpack(b)
    A = advantages(d["rewards"], d["group_ids"])
    num = n = 0.0
    kl_low, n_low = 0.0, 0
    for i in range(len(A)):
        vt = valid_positions(d["mask"][i])
        if not vt:
            continue
        tau = quantile([d["entropy"][i][t] for t in vt], q)
        for t in vt:
            e = eh if d["entropy"][i][t] > tau else el
            rho = math.exp(max(-20.0, min(20.0, d["logp"][i][t] - d["old_logp"][i][t])))
            loss = ppo(rho, A[i], e, e)
            if A[i] < 0:
                loss = min(loss, -c * A[i])
            num += loss
            n += 1
            if d["entropy"][i][t] <= tau:
                x = max(-20.0, min(20.0, d["ref_logp"][i][t] - d["logp"][i][t]))
                kl_low += max(-10.0, min(10.0, math.exp(x) - x - 1))
                n_low += 1
    return num / max(n, 1.0) + (beta_low * kl_low / n_low if n_low else 0.0)
