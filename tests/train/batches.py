"""Test batches: the worked-example inputs (docs/objectives.md#worked-example) and random right-padded micro-batches."""

import torch

T = torch.tensor


def oracle_batch() -> dict:
    """The worked-example inputs (float64): two groups of two completions, three tokens each."""
    f = dict(dtype=torch.float64)
    old = T([[-1, -2, -0.5], [-1.5, -0.7, 0], [-0.2, -1.2, -2.5], [-0.9, -0.4, -1.1]], **f)
    delta = T([[0.3, -0.1, 0.05], [-0.4, 0.1, 0], [0, 0.25, -0.3], [0.1, -0.05, 0.2]], **f)
    ent = T([[0.2, 1.5, 0.1], [1.2, 0.4, 0], [0.05, 1, 0.4], [0.6, 0.1, 1.2]], **f)
    return dict(
        rewards=T([1.0, 0, 1, 1]), group_ids=T([0, 0, 1, 1]),
        mask=T([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1.0]], **f),
        completion_ids=T([[5, 7, 2], [5, 2, 0], [4, 6, 1], [4, 3, 1]]),
        old_logp=old, logp=old + delta,
        ref_logp=T([[-1.1, -1.8, -0.5], [-1.4, -0.9, 0], [-0.3, -1, -2.4], [-1, -0.5, -1.2]], **f),
        entropy=ent, old_entropy=ent.clone(),
    )


def random_batch(seed: int, groups: int = 3, G: int = 4, T_max: int = 7, vocab: int = 3,
                 allow_empty: bool = False) -> dict:
    """Right-padded random micro-batch of whole groups (float64); small vocab so GTPO conflicts occur."""
    g = torch.Generator().manual_seed(seed)
    B = groups * G
    lo = 0 if allow_empty else 1
    lengths = torch.randint(lo, T_max + 1, (B,), generator=g)
    mask = (torch.arange(T_max).unsqueeze(0) < lengths.unsqueeze(1)).double()
    logp = -torch.rand(B, T_max, generator=g, dtype=torch.float64) * 3
    old = logp + (torch.rand(B, T_max, generator=g, dtype=torch.float64) - 0.5) * 0.8
    ref = logp + (torch.rand(B, T_max, generator=g, dtype=torch.float64) - 0.5) * 0.8
    ent = torch.rand(B, T_max, generator=g, dtype=torch.float64) * 1.5
    ids = torch.randint(1, vocab + 1, (B, T_max), generator=g) * mask.long()
    return dict(
        rewards=torch.randint(0, 2, (B,), generator=g).float(),
        group_ids=torch.arange(groups).repeat_interleave(G),
        mask=mask, completion_ids=ids, logp=logp, old_logp=old, ref_logp=ref,
        entropy=ent, old_entropy=ent * 0.9 + 0.05,
    )


