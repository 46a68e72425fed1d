"""What train.gpu_check measures besides the steps themselves, as functions the CPU tests reach:

  memory       peak device memory in absolute GiB against an 80 GB H100 (the card the scales' vLLM fractions
               are sized for), whatever GPU the check runs on: the colocated engine is given the memory it
               would hold on the H100 (`engine_fraction`), so a larger GPU proves the fit and does not hide it;
  base-weights the frozen base after the steps, against a copy taken before them: bit-identical, or the
               weight sync changed it (TRL 0.29.0's in-place merge / unmerge in bf16; train/vllm_sync.py);
  stop-tokens  the share of rollout completions that end at a stop token (`data.stop_tokens`), and that no
               completion runs on past one (the sampler ignoring the stop set).
"""

from __future__ import annotations

H100_GIB = 81_559 / 1024  # an 80 GB H100's memory as the driver reports it (81,559 MiB)
MEMORY_SHARE = 0.95        # a peak above this share of the H100 fails: no room for a longer batch


def engine_fraction(fraction: float, total_gib: float) -> float:
    """The vLLM memory fraction that gives the engine on this GPU the GiB `fraction` gives it on an H100
    (vLLM sizes its pool as a fraction of the whole device)."""
    if not 0.0 < fraction < 1.0 or total_gib <= 0:
        raise ValueError(f"fraction {fraction} and total {total_gib} GiB: need 0 < fraction < 1 and a positive total")
    return fraction * H100_GIB / total_gib if total_gib > H100_GIB else fraction


def memory_verdict(peak_gib: float, total_gib: float, fraction: float | None) -> tuple[bool, str]:
    """Peak memory in use against the H100's GiB; `fraction` is the engine's (rescaled) vLLM fraction or None."""
    limit = MEMORY_SHARE * H100_GIB
    ok = peak_gib < limit
    engine = "" if fraction is None else (f"; the vLLM engine held {fraction:.3f} of this GPU = "
                                          f"{fraction * total_gib:.1f} GiB, as on an H100")
    return ok, (f"peak {peak_gib:.1f} GiB in use, against an 80 GB H100's {H100_GIB:.1f} GiB "
                f"({100 * peak_gib / H100_GIB:.0f}%; limit {limit:.1f} GiB); this GPU has {total_gib:.1f} GiB"
                + engine + ("" if ok else ": DOES NOT FIT an 80 GB H100"))


def frozen_copy(model) -> dict:
    """The frozen (non-adapter) tensors of a PEFT policy, copied to CPU memory (at 7B about 15 GB of host
    memory; nothing on the GPU)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if "lora_" not in n}


def base_change(model, before: dict) -> dict:
    """How the frozen tensors differ from `before` (`frozen_copy`): count of changed values, total values,
    the largest |change|, and tensors missing on either side."""
    now = {n: p for n, p in model.named_parameters() if "lora_" not in n}
    changed = total = 0
    largest = 0.0
    for name, old in before.items():
        if name not in now:
            continue
        new = now[name].detach().to("cpu")
        diff = new != old
        changed += int(diff.sum())
        total += old.numel()
        if diff.any():
            largest = max(largest, float((new.float() - old.float()).abs().max()))
    return {"changed": changed, "total": total, "max": largest,
            "missing": sorted(set(before) ^ set(now))}


def base_verdict(change: dict) -> tuple[bool, str]:
    ok = change["changed"] == 0 and not change["missing"] and change["total"] > 0
    detail = (f"{change['changed']:,} of {change['total']:,} frozen base weights changed by the steps' weight "
              f"syncs (largest change {change['max']:.3g})")
    if change["missing"]:
        detail += f"; tensors missing before or after: {', '.join(change['missing'][:3])}"
    return ok, detail + ("" if ok else ": THE SYNC CHANGED THE BASE (in-place merge / unmerge)")


def stop_counts(completion_ids, mask, stop_ids) -> dict:
    """Per batch of completions (rows of ids, 1/0 mask of valid positions): how many end at a stop token, how
    many hold one before their last valid position (ran on past a stop)."""
    import torch

    stops = torch.tensor(sorted(set(stop_ids)), dtype=completion_ids.dtype, device=completion_ids.device)
    valid = mask.bool()
    lengths = valid.sum(1)
    last = completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    ended = torch.isin(last, stops) & (lengths > 0)
    inside = torch.isin(completion_ids, stops) & valid
    inside[torch.arange(len(lengths), device=lengths.device), (lengths - 1).clamp(min=0)] = False
    return {"n": int(len(lengths)), "ended": int(ended.sum()), "ran_on": int(inside.any(1).sum())}


def stop_verdict(counts: list[dict], stop_names: list[str]) -> tuple[bool, str]:
    n = sum(c["n"] for c in counts)
    ended = sum(c["ended"] for c in counts)
    ran_on = sum(c["ran_on"] for c in counts)
    ok = n > 0 and ran_on == 0
    detail = (f"{ended} of {n} rollout completions ({100 * ended / max(n, 1):.1f}%) end at a stop token "
              f"({', '.join(stop_names)}); the rest reached the token limit")
    if ran_on:
        detail += f"; {ran_on} ran on past a stop token: THE SAMPLER IGNORES THE STOP SET"
    return ok, detail if n else "no rollout completions recorded"


class MemoryWatch:
    """Peak device memory in use (total - free: every process and pool) sampled in a thread; CPU: peak RSS."""

    def __init__(self, device: str):
        import threading

        self.gpu, self.peak, self._stop = device.startswith("cuda"), 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if self.gpu else None

    def _sample(self):
        import torch

        free, total = torch.cuda.mem_get_info()
        self.peak = max(self.peak, (total - free) / 2**30)

    def _run(self):
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self):
        if self._thread:
            self._sample()
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
        else:
            import resource

            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
