"""`python -m train.plan --scale 3b --gpu h100-80gb [--num-gpus 8] [--override k=v ...] [--fresh]`: will the study
fit, and how long will it take (docs/plan.md). Runs on CPU in the train environment at every scale: the passes are
measured with fake tensors (train/fake_pass.py) and kept (train/plan_cache.py: reused while the shape, the
measuring code, the traced libraries and every setting the measurement read are unchanged; --fresh measures
again). Exit 1 when a stage does not fit, naming the setting that would make it fit; 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import sys
import time

from rcea.kinds import resolve
from train import plan_data as pd
from train.plan_data import GIB, Shape

def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _passes(cfg, shape: Shape, log) -> tuple:
    """(update, rollout) Measured at the real shapes; the checkpoint floor for both where no card holds it."""
    from train import fake_pass as fp

    floor = fp.checkpoint_floor(cfg, shape)
    if floor > max(c.memory_gib for c in pd.cards().values()) * GIB:
        # no card holds even the checkpointed layer inputs: the passes are not measured (a huge micro-batch
        # would take minutes of fake tensors), the floor stands for both
        log(f"[plan] the micro-batch's checkpointed layer inputs alone need {floor / GIB:.0f} GiB, more than any "
            "card holds; its passes are not measured")
        return fp.Measured(floor, float("nan")), fp.Measured(floor, float("nan"))
    t0 = time.time()
    log(f"[plan] measuring the update pass (fake tensors, {shape.name}) ...")
    update = fp.measure_depth(cfg, shape, "update")
    log(f"[plan] measuring the rollout passes ... ({time.time() - t0:.0f}s)")
    return update, fp.measure_depth(cfg, shape, "rollout")


def _scorer(cfg, shape: Shape, log):
    """The workers' scoring pass, Measured at the real depth."""
    from infer.kinds import token_budget
    from train import fake_pass as fp

    log("[plan] measuring the workers' scoring pass ...")
    seq = cfg["data.max_prompt_tokens"] + token_budget(cfg)
    got = {d: fp.measure_scorer(cfg, shape, d, cfg["measure.scorer_batch"], seq, cfg["probe.entropy_chunk"])
           for d in fp.DEPTHS}
    return fp.Measured(fp.extrapolate({d: m.peak_bytes for d, m in got.items()}, shape.layers),
                       fp.extrapolate({d: m.flops for d, m in got.items()}, shape.layers))


def measure_scale(cfg, shape: Shape, log=_say, fresh: bool = False) -> dict:
    """The scale's measured passes at the real shapes: resident bytes, update and rollout passes, the scorer.
    Each part is kept apart (train/plan_cache.py) and reused where its inputs are unchanged, unless `fresh`: a
    changed micro-batch measures the passes again, not the scorer."""
    from train import fake_pass as fp
    from train import plan_cache

    t0 = time.time()
    resident, trainable = plan_cache.measured("resident", cfg, shape, lambda c: fp.resident(c, shape), log, fresh)
    update, rollout = plan_cache.measured("passes", cfg, shape, lambda c: _passes(c, shape, log), log, fresh)
    scorer = plan_cache.measured("scorer", cfg, shape, lambda c: _scorer(c, shape, log), log, fresh)
    log(f"[plan] measured in {time.time() - t0:.0f}s")
    return {"resident": resident, "trainable": trainable, "update": update, "rollout": rollout,
            "scorer": {"pass": scorer, "trainable": trainable}}


def objective_bytes(cfg, shape: Shape) -> float:
    """Peak bytes of the method's objective_loss and its backward on (B, T) inputs alone (the part of the
    update that differs between objectives). Real CPU tensors (B x T fp32: a few MiB): some objectives select
    tokens by value (Clip-Cov's covariance mask), which fake tensors cannot."""
    import torch

    from train import fake_pass as fp

    B, T = cfg["train.per_device_batch"], cfg["train.max_completion_tokens"]
    logps = torch.zeros(B, T, requires_grad=True)
    ids = torch.randint(0, shape.vocab, (B, T))
    tr = fp.Tracker()
    with tr:
        fp._loss(cfg, logps, torch.zeros(B, T), ids, T, B).backward()
    return float(tr.peak)


def study_jobs(cfg, scale: str, methods) -> dict:
    """{kind: (jobs, cost units)} the study plans (infer/kinds' own checkpoint choice and cost), every run's
    checkpoints every save_steps steps, the base policy's jobs once; and the probe's sampled trajectories."""
    from infer import kinds
    from infer.kinds import BASE, PlanContext
    from infer.kinds.registry import Checkpoint, adapter_rel
    from infer.plan import NOMINAL_SIZES, dense_trace, milestones
    from train.envelope import steps_and_rollouts

    steps, _ = steps_and_rollouts(cfg)
    save = cfg["train.save_steps"]
    out: dict[str, tuple[int, float]] = {}
    seen = set()
    for method in methods:
        ckpts = [Checkpoint(method, s, adapter_rel(scale, method, s)) for s in range(save, steps + 1, save)]
        p = PlanContext(cfg, scale, method, ckpts, milestones(cfg, ckpts), dense_trace(cfg, ckpts), dict(NOMINAL_SIZES))
        for name in resolve(cfg["measure.kinds"], kinds.REGISTRY):
            k = kinds.get(name)
            for ck, extra in k.checkpoints(p):
                if ck is BASE and (name, "base") in seen:
                    continue
                seen.add((name, "base") if ck is BASE else (name, ck.tag))
                n, c = out.get(name, (0, 0.0))
                out[name] = (n + 1, c + float(k.cost(p, extra)))
    return out


def plan(scale: str, gpu: str, overrides=(), methods=None, log=_say, measured: dict | None = None,
         fresh: bool = False) -> dict:
    """Every stage of `scale` on card `gpu`, and what was measured (card-independent: pass it back as
    `measured` to plan another card without measuring again). The passes' measurement comes from the cache
    (train/plan_cache.py) where it holds one for these inputs, unless `fresh`."""
    from train import plan_cache

    from rcea.config import METHODS, load_config
    from train import envelope as ev

    card = pd.card(gpu)
    methods = list(methods or METHODS)
    base_cfg = load_config(scale, "grpo", list(overrides))   # the passes' loss: GRPO's (objective_bytes: the rest)
    shape = pd.shape(base_cfg["model.name"])
    m = measured or measure_scale(base_cfg, shape, log, fresh)
    if "objectives" not in m:
        m["objectives"] = {}
        for method in methods:
            cfg = load_config(scale, method, list(overrides))
            m["objectives"][method] = (cfg, plan_cache.measured("objective", cfg, shape,
                                                                lambda c: objective_bytes(c, shape), log, fresh))
    if "jobs" not in m:
        m["jobs"] = study_jobs(base_cfg, scale, methods)
    stages = [ev.train_stage(cfg, shape, card, m, extra) for cfg, extra in m["objectives"].values()]
    if m["update"].flops != m["update"].flops:   # unmeasured (the floor): the scale's own micro-batch, batch kept
        b0 = load_config(scale, "grpo")["train.per_device_batch"]
        B, ga = base_cfg["train.per_device_batch"], base_cfg["train.grad_accum"]
        for st in stages:
            st.fix = (f"train.per_device_batch={b0} train.grad_accum={B * ga // b0} (the scale's micro-batch; "
                      "then rerun the plan)" if b0 < B and (B * ga) % b0 == 0 else "a smaller train.per_device_batch")
    if base_cfg["train.use_vllm"]:
        stages.append(ev.engine_stage(base_cfg, shape, card, m))
    for kind in resolve(base_cfg["measure.kinds"]):
        stages.append(ev.worker_stage(base_cfg, shape, card, kind, m["scorer"], m["jobs"]))
    probe_jobs, _ = m["jobs"].get("probe", (0, 0.0))
    stages.append(ev.judge_stage(base_cfg, card, probe_jobs * base_cfg["probe.n_questions"] * base_cfg["probe.k"]))
    return {"scale": scale, "card": card, "stages": stages, "measured": m}


def totals(stages, num_gpus: int, train_gpus: int = 0) -> tuple[float, float, float]:
    """(study GPU-hours, makespan bound in hours with `train_gpus` GPUs reserved for training, makespan bound if
    any GPU may train), on `num_gpus` GPUs. A bound is max(the training on its GPUs plus the last run's
    measurement, all GPU-hours / num_gpus); benchmarks/scheduler.py's elastic order came within 1.11 x it."""
    total = sum(s.hours for s in stages)
    runs = [s.hours for s in stages if s.name.startswith("train ")]
    infer = sum(s.hours for s in stages if s.role == "infer")
    last = infer / max(1, len(runs)) / max(1, num_gpus - 1)     # one run's measurement on the other GPUs
    spread = total / num_gpus
    k = min(max(1, train_gpus), num_gpus) if train_gpus else num_gpus
    serial = max(sum(runs) / k, max(runs, default=0.0))
    fixed = max(serial + last, (total - sum(runs)) / max(1, num_gpus - k) if num_gpus > k else total, spread)
    return total, fixed, max(max(runs, default=0.0) + last, spread)


def render(result: dict, num_gpus: int) -> list[str]:
    card = result["card"]
    head = pd.assume("headroom")
    lines = [f"plan {result['scale']} on {card.name} ({card.memory_gib:g} GiB, fits = peak <= {head:g} x card; "
             f"{card.bf16_tflops:g} bf16 TFLOPs, {card.bandwidth_gbs:g} GB/s)",
             f"{'stage':<34} {'peak GiB':>9} {'card GiB':>9} {'fits':>5} {'GPU-hours':>10}"]
    for s in result["stages"]:
        need = f"  (needs {s.need_gib:.1f} of its {s.reserve_gib:.1f} GiB reservation)" if s.need_gib is not None else ""
        lines.append(f"{s.name:<34} {s.peak_gib:>9.1f} {card.memory_gib:>9.1f} {'yes' if s.fits else 'NO':>5} "
                     + (f"{s.hours:>10.1f}" if s.hours == s.hours else f"{'n/a':>10}")
                     + need + ("" if s.fits else f"  -> fix: {s.fix}"))
    from rcea.launch import launch

    k = len(launch(result["scale"]).train_gpus) or 1   # the override, else one training GPU (the paper's)
    total, fixed, elastic = totals(result["stages"], num_gpus, k)
    if total != total:   # a pass no card holds was not measured: no time either
        lines.append("study: GPU-hours and makespan not predicted (a training pass was not measured)")
    else:
        lines.append(f"study: {total:,.0f} GPU-hours; makespan on {num_gpus} GPU(s) at least {fixed:,.1f} h "
                     f"({fixed / 24:.1f} days) with {k} training GPU(s) (train_gpus, else the paper's one), at least "
                     f"{elastic:,.1f} h if any GPU may train")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", required=True)
    ap.add_argument("--gpu", default="", help="card name (configs/plan.toml [cards]), or all (every card's "
                    "table, exit 0); default: the scale's first training card (its scale file's [targets])")
    ap.add_argument("--num-gpus", type=int, default=8)
    ap.add_argument("--override", action="append", default=[])
    ap.add_argument("--fresh", action="store_true", help="measure again instead of reusing a kept measurement")
    a = ap.parse_args(argv)
    from rcea.config import SCALES, ConfigError

    try:
        if a.scale not in SCALES:
            raise ConfigError(f"unknown scale {a.scale!r}; valid scales: {', '.join(SCALES)}")
        if a.num_gpus < 1:
            raise ConfigError(f"--num-gpus must be >= 1, got {a.num_gpus}")
        from rcea.config import load_config
        from rcea.launch import tiny_model

        if tiny_model(load_config(a.scale, None, a.override)):
            print(f"plan {a.scale}: the tiny model trains and measures on CPU; no GPU stage to plan")
            return 0
        gpu = a.gpu or pd.targets(a.scale)["train"][0]
        if gpu == "all":   # a survey: every card's table from one measurement, exit 0
            measured = None
            for name in pd.cards():
                result = plan(a.scale, name, a.override, measured=measured, fresh=a.fresh)
                measured = result["measured"]
                print("\n".join(render(result, a.num_gpus)) + "\n")
            return 0
        pd.card(gpu)
        result = plan(a.scale, gpu, a.override, fresh=a.fresh)
    except ConfigError as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    for line in render(result, a.num_gpus):
        print(line)
    bad = [s for s in result["stages"] if not s.fits]
    for s in bad:
        why = (f"needs {s.need_gib:.1f} GiB of its {s.reserve_gib:.1f} GiB reservation"
               if s.need_gib is not None and s.need_gib > s.reserve_gib else
               f"{s.peak_gib:.1f} GiB > {pd.assume('headroom'):g} x {result['card'].memory_gib:g} GiB")
        print(f"plan: {s.name} does not fit {result['card'].name}: {why}; fix: {s.fix}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
