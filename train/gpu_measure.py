"""What train.gpu_check measures besides the steps themselves, as functions the CPU tests reach:

  memory       peak device memory in absolute GiB against an 80 GB H100 (the card the scales' vLLM fractions
               are sized for), whatever GPU the check runs on: the colocated engine is given the memory it
               would hold on the H100 (`engine_fraction`), so a larger GPU proves the fit and does not hide it;
  base-weights the frozen base after the steps, against a copy taken before them: bit-identical, or the
               weight sync changed it (TRL 0.29.0's in-place merge / unmerge in bf16; train/vllm_sync.py);
  stop-tokens  the share of rollout completions that end at a stop token (`data.stop_tokens`), and that no
               completion runs on past one (the sampler ignoring the stop set). A random head samples a stop
               id at about 1 / vocab per token (2 ids x 2,048 tokens / 151,936 = 2.7% of 3B completions: 32
               completions would catch a sampler ignoring the stop set 58% of the time), so the check raises
               the non-EOS stop id's row of the head (`raise_stop_row`) to the per-token rate `stop_rate_for`
               computes from the completion count and length, for a power of at least POWER.
  predicted    what the planner (train/plan.py) predicts for the check's step, printed against the measured
               peak GiB and seconds per step (`print_predictions`; GPU runs only: the plan has no CPU stage).
"""

from __future__ import annotations

H100_GIB = 81_559 / 1024  # an 80 GB H100's memory as the driver reports it (81,559 MiB)
MEMORY_SHARE = 0.95        # a peak above this share of the H100 fails: no room for a longer batch
POWER = 0.999              # the stop-token check's target chance of catching a sampler that ignores the stop set
LIFT = 4.0                 # the constant hidden component the head row reads, in units of the residual's rms


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


def stop_counts(rows, stop_ids, pad_id: int | None = None) -> dict:
    """Per batch of completions as the sampler returned them (lists of ids, before the trainer cuts each after
    its first stop token, which would hide a sampler that ignores the stop set; trailing `pad_id`s, the
    padding of a batched `generate`, dropped): how many end at a stop token, how many hold one before their
    last token (ran on past a stop)."""
    stops = set(stop_ids)
    n = ended = ran_on = 0
    for row in rows:
        row = list(row)
        while row and row[-1] == pad_id:
            row.pop()
        n += 1
        ended += bool(row) and row[-1] in stops
        ran_on += any(t in stops for t in row[:-1])
    return {"n": n, "ended": ended, "ran_on": ran_on}


def stop_verdict(counts: list[dict], stop_names: list[str], raised: dict | None = None) -> tuple[bool, str]:
    """`raised`: what `train.gpu_check.raise_stop` did to the head ({"name", "rate", "measured", "power"})."""
    n = sum(c["n"] for c in counts)
    ended = sum(c["ended"] for c in counts)
    ran_on = sum(c["ran_on"] for c in counts)
    ok = n > 0 and ran_on == 0
    detail = (f"{ended} of {n} rollout completions ({100 * ended / max(n, 1):.1f}%) end at a stop token "
              f"({', '.join(stop_names)}); the rest reached the token limit")
    if raised:
        detail += (f"; {raised['name']} raised to {raised['measured']:.2e} per token (target {raised['rate']:.2e}): "
                   f"a sampler ignoring the stop set is caught with probability {raised['power']:.4f}")
    if raised and raised["power"] < 0.99:
        ok = False
        detail += ": TOO WEAK to tell (the raised rate fell short)"
    if ran_on:
        detail += f"; {ran_on} ran on past a stop token: THE SAMPLER IGNORES THE STOP SET"
    return ok, detail if n else "no rollout completions recorded"


def stop_power(rate: float, eos: float, length: int, n: int) -> float:
    """Chance that n completions of `length` tokens from a sampler that ignores the stop set (stops only at the
    tokenizer's EOS) show a run-on: some completion samples a non-EOS stop id (probability `rate` per token) at
    one of its first length - 1 positions before any EOS (probability `eos` per token)."""
    hit = rate + eos
    one = rate / hit * (1.0 - (1.0 - hit) ** (length - 1)) if hit > 0 else 0.0
    return 1.0 - (1.0 - one) ** n


def stop_rate_for(power: float, eos: float, length: int, n: int) -> float:
    """The smallest per-token rate of the non-EOS stop id whose `stop_power` reaches `power` (bisection)."""
    if not 0.0 < power < 1.0 or length < 2 or n < 1:
        raise ValueError(f"power {power}, length {length}, n {n}: need 0 < power < 1, length >= 2, n >= 1")
    lo, hi = 0.0, 1.0 - eos
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if stop_power(mid, eos, length, n) >= power else (mid, hi)
    return hi


def raise_stop_row(model, stop_id: int, eos_id: int, rate_for, rounds: int = 4, seed: int = 0) -> dict:
    """Make a random Qwen2 sample `stop_id` at the rate `rate_for(p_eos)` per token (mean over positions; p_eos
    the measured mean probability of `eos_id`), in place.

    A random head has no bias, and the final norm's output has no constant direction for a head row to read,
    so: every input embedding gets the same value LIFT x (the residual's rms) in hidden dimension 0 (one of
    2,048 or 3,584: the residual's rms barely moves), which makes the final norm's output h[0] about LIFT at
    every position; then the stop id's head row gets (log rate - log p) / mean h[0] added in dimension 0, a
    few rounds, p measured each round on a forward of random ids (8 x 128 tokens). A tied head (3B) adds the
    same value to every token's logit, which the softmax cancels. Returns {"rate": the target, "measured":
    the stop id's and "eos": EOS's mean probability on other random ids than those it was tuned on}."""
    import math

    import torch

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    tune, held_out = (torch.randint(0, vocab, (8, 128), generator=gen).to(model.device) for _ in range(2))
    seen = {}
    hook = model.model.norm.register_forward_hook(lambda mod, inp, out: seen.update(x=inp[0], h=out))
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight

    def measure(ids) -> tuple[float, float]:
        p = [torch.softmax(model(row).logits.float(), -1)[..., [stop_id, eos_id]].mean((0, 1))
             for row in ids.split(2)]  # 2 rows at a time: (2, 128, vocab) fp32 logits, 156 MB at 3B
        stop, eos = torch.stack(p).mean(0).tolist()
        return stop, eos

    try:
        with torch.no_grad():
            measure(tune[:2])
            emb[:, 0] += LIFT * float(seen["x"][..., 1:].float().pow(2).mean().sqrt())
            for _ in range(rounds):
                p, eos = measure(tune)
                rate = rate_for(eos)
                head[stop_id, 0] += (math.log(rate) - math.log(p)) / float(seen["h"][..., 0].float().mean())
            p, eos = measure(held_out)
            return {"rate": rate, "measured": p, "eos": eos}
    finally:
        hook.remove()


PLAN_CARD = "h100-80gb"  # the check gives the engine an H100's GiB on any GPU (engine_fraction): plan that card


def predicted_step(scale: str, overrides) -> dict:
    """What the planner (train/plan.py, fake tensors on CPU, about a minute) predicts for the check's GRPO step
    at `scale` with the check's overrides, on an 80 GB H100: {stage: (peak GiB, seconds per step)}, the whole
    device (weights, passes, the engine's reservation unless it sleeps, the CUDA context) and PyTorch's own
    allocated peak (the update pass's live bytes: the device peak less the engine and the CUDA context). The
    time assumes the study's mean completion length (configs/plan.toml); a random model runs most
    completions to the limit, so the measured step is expected to be slower."""
    from train.plan import plan
    from train.plan_data import assume

    res = plan(scale, PLAN_CARD, list(overrides), methods=["grpo"], log=lambda msg: None)
    st = next(s for s in res["stages"] if s.name == "train grpo")
    d = st.detail
    alloc = d["update_gib"] - (0.0 if d["sleep"] else d["engine_gib"]) - assume("cuda_overhead_gib")
    return {f"{scale} grpo step, device": (st.peak_gib, st.hours * 3600 / max(d["steps"], 1)),
            f"{scale} grpo step, PyTorch allocated": (alloc, None)}


def measured_step(scale: str, measured: dict) -> dict:
    """part_grpo's "measured" ({peak_gib, allocated_gib, step_s}) as predicted_step's stages."""
    return {f"{scale} grpo step, device": (measured["peak_gib"], measured["step_s"]),
            f"{scale} grpo step, PyTorch allocated": (measured["allocated_gib"], None)}


def raise_stop(model, tokenizer, stop_ids, completions: int, length: int) -> dict | None:
    """Raise the first non-EOS stop id's head row so that `completions` completions of `length` tokens catch a
    sampler ignoring the stop set with probability POWER; {"name", "rate", "measured", "power"} or None when
    the stop set holds only EOS (every sampler stops there: nothing to catch)."""
    raised = [i for i in stop_ids if i != tokenizer.eos_token_id]
    if not raised or length < 2:
        return None
    got = raise_stop_row(model, raised[0], tokenizer.eos_token_id,
                         lambda eos: stop_rate_for(POWER, eos, length, completions))
    return {**got, "name": tokenizer.convert_ids_to_tokens(raised[0]),
            "power": stop_power(got["measured"], got["eos"], length, completions)}


def print_predictions(measured: dict, overrides_of) -> None:
    """Predicted (train/plan.py) vs measured peak GiB and seconds per step of each scale that ran; a planner
    that fails is one line, not a failed check (the steps' own verdicts stand)."""
    from rcea.device_check import prediction_table

    pred, meas = {}, {}
    for scale, m in measured.items():
        if m:
            meas.update(measured_step(scale, m))
        try:
            pred.update(predicted_step(scale, overrides_of(scale)))
        except Exception as exc:  # noqa: BLE001 - reported, the check goes on
            print(f"plan {scale}: the planner failed ({type(exc).__name__}: {exc}); measured numbers only")
    if pred or meas:
        print(f"predicted (python -m train.plan, {PLAN_CARD}) vs measured, per scale's last step:")
        for line in prediction_table(pred, meas):
            print("  " + line)


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
