"""Full-vocabulary token statistics in chunks: chosen-token log-probs and entropies (nats).

Teacher forcing lines logits up with tokens like this (prompt length P, completion length T):

    input index   0   ...  P-2   P-1   P    ...  P+T-2   P+T-1
    input token   p0  ...  .     pP-1  c0   ...  cT-2    cT-1
    predicts                     c0    c1   ...  cT-1    (unused)

so the hidden states at indices P-1 .. P+T-2 give the T completion positions.

The chunked functions never hold more than `chunk` rows of a (T, V) logit matrix: each chunk of rows
is projected (hidden @ W.T), upcast to fp32, shifted by its row maximum, exponentiated, and reduced in
two stages: fp32 partial sums over blocks of BLOCK vocabulary entries, then an fp64 sum of the ~V/BLOCK
partials (a direct fp64 reduction is 15x slower on CPU; the error stays near fp32 rounding of one block). Stable
form: H = logsumexp(z) - sum softmax(z) * z  (docs/estimators.md#per-question-entropies).
With z' = z - max(z), s = sum exp(z'):  H = log s - sum exp(z') z' / s,  log pi(a) = z'_a - log s.
"""

from __future__ import annotations

import torch

BLOCK = 1024  # vocabulary entries per fp32 partial sum


def _sum64(x: torch.Tensor) -> torch.Tensor:
    """Row sums of x (c, V) fp32: fp32 within blocks of BLOCK entries, fp64 across blocks -> (c,) fp64."""
    V = x.shape[-1]
    k = V - V % BLOCK
    parts = [x[:, :k].unflatten(-1, (k // BLOCK, BLOCK)).sum(-1)] if k else []   # (c, V // BLOCK)
    if k < V:
        parts.append(x[:, k:].sum(-1, keepdim=True))                             # (c, 1) remainder
    return torch.cat(parts, dim=-1).double().sum(-1)


def _stats_from_logits_(z: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `targets` and entropy from one chunk of fp32 logits; `z` (c, V) is overwritten.

    Returns (logprob (c,), entropy (c,)), both fp64, in nats.
    """
    z.sub_(z.amax(dim=-1, keepdim=True))                      # z' = z - max, (c, V), max entry 0
    chosen = z.gather(-1, targets[:, None]).squeeze(-1).double()  # z'_a, (c,)
    p = torch.exp(z)                                            # unnormalised probs, (c, V) fp32
    s = _sum64(p)                                               # (c,) fp64, >= 1
    p.mul_(z)                                                   # exp(z') * z', (c, V)
    pz = _sum64(p)                                              # (c,) fp64, <= 0
    log_s = torch.log(s)
    entropy = (log_s - pz / s).clamp_(min=0.0)
    return chosen - log_s, entropy


def chunked_stats_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                              chunk: int = 256, bias: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position chosen-token log-prob and full-vocabulary entropy from hidden states.

    hidden (T, H) in the model dtype, weight (V, H) the output embedding, targets (T,) token ids.
    Returns (logprob (T,), entropy (T,)) fp64 on the input device, nats. Peak extra memory is about
    two (chunk, V) fp32 buffers instead of several (T, V) ones.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be (T, H) and targets (T,); got {tuple(hidden.shape)} and {tuple(targets.shape)}")
    n = hidden.shape[0]
    logprob = torch.empty(n, dtype=torch.float64, device=hidden.device)
    entropy = torch.empty(n, dtype=torch.float64, device=hidden.device)
    for i in range(0, n, chunk):
        z = torch.nn.functional.linear(hidden[i:i + chunk], weight, bias).float()  # (c, V) fp32
        logprob[i:i + chunk], entropy[i:i + chunk] = _stats_from_logits_(z, targets[i:i + chunk])
        del z
    return logprob, entropy


def chunked_stats_from_logits(logits: torch.Tensor, targets: torch.Tensor, chunk: int = 256
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Same as `chunked_stats_from_hidden` for logits that already exist: logits (T, V) -> fp64 (T,), (T,)."""
    n = logits.shape[0]
    logprob = torch.empty(n, dtype=torch.float64, device=logits.device)
    entropy = torch.empty(n, dtype=torch.float64, device=logits.device)
    for i in range(0, n, chunk):
        z = logits[i:i + chunk].float().clone()  # (c, V) fp32 copy, the caller's logits stay intact
        logprob[i:i + chunk], entropy[i:i + chunk] = _stats_from_logits_(z, targets[i:i + chunk])
    return logprob, entropy


def naive_stats_from_logits(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: whole-sequence log_softmax, (T, V) at once. logits (T, V) -> (logprob (T,), entropy (T,))."""
    logp = torch.log_softmax(logits.float(), dim=-1)           # (T, V)
    entropy = -(logp.exp() * logp).sum(dim=-1)                 # (T,)
    return logp.gather(-1, targets[:, None]).squeeze(-1), entropy


def covariance_prediction(z_from: torch.Tensor, z_to: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact full-vocabulary first-order entropy change per position (docs/estimators.md#covariance-prediction), fp64.

    z_from, z_to (P, V): logits of the two checkpoints at the same prefixes.
    pred = -Cov_{a~pi}(log pi(a), dz(a)) = -sum pi l dz + (sum pi l)(sum pi dz), pi, l from z_from;
    obs  = H(softmax z_to) - H(softmax z_from). Returns (pred (P,), obs (P,)) in nats.
    """
    z0, z1 = z_from.double(), z_to.double()
    logp0 = torch.log_softmax(z0, dim=-1)                      # (P, V)
    p0 = logp0.exp()
    dz = z1 - z0                                               # (P, V)
    pred = -(p0 * logp0 * dz).sum(-1) + (p0 * logp0).sum(-1) * (p0 * dz).sum(-1)
    logp1 = torch.log_softmax(z1, dim=-1)
    obs = -(logp1.exp() * logp1).sum(-1) + (p0 * logp0).sum(-1)
    return pred, obs
