"""The resource plan of one scale on one card: every stage's peak GPU memory, whether it fits, its FLOPs and
GPU-hours, and the study's GPU-hours and makespan (docs/plan.md; `python -m train.plan`, `invoke plan`).

Stages (memory in GiB, 2**30 bytes; time in GPU-hours):
  train <method>   one training process: the policy (bf16 weights, fp32 LoRA) + LoRA gradients + optimizer
                   states + the larger of the update pass (one micro-batch, train/fake_pass.py) and the rollout
                   passes (no-grad old / reference log-probs of one row batch), + the colocated engine's
                   reservation unless it sleeps, + the CUDA context
  engine           the colocated vLLM engine: what it needs (weights + KV of per_device_batch x grad_accum
                   sequences of vllm_max_model_length tokens + its graphs and buffers) against what it reserves
  worker <kind>    one measurement worker (infer.worker.placement): with measure.one_weight_copy the larger of
                   generating (the engine's reservation) and scoring (the engine asleep; the HF scorer's bf16
                   weights, fp32 head copy and teacher-forced pass, for the kinds that score); without, both at once
  judge            the judge server (vLLM): its model's weights + KV of one judge_max_model_len sequence
"""

from __future__ import annotations

from dataclasses import dataclass, field

from train import plan_data as pd
from train.plan_data import GIB, Card, Shape



@dataclass
class Stage:
    name: str
    role: str                 # train | infer
    peak_gib: float
    card: Card
    hours: float              # GPU-hours of this stage in the whole study (all its runs / jobs)
    flops: float = 0.0        # FLOPs of the stage in the whole study
    need_gib: float | None = None     # an engine's need, which must fit inside its reservation
    reserve_gib: float | None = None  # what that engine reserves (part of peak_gib)
    fix: str = ""             # the setting that would make it fit
    detail: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        inside = self.need_gib is None or self.need_gib <= self.reserve_gib
        return inside and self.peak_gib <= pd.assume("headroom") * self.card.memory_gib


def steps_and_rollouts(cfg) -> tuple[int, int]:
    """Optimizer steps and generation rounds of one run: one epoch of data.draw_size prompts x num_generations
    completions, per_device_batch x grad_accum completions per rollout, num_iterations steps per rollout."""
    t = cfg.section("train")
    per_rollout = t["per_device_batch"] * t["grad_accum"]
    rollouts = t["epochs"] * cfg["data.draw_size"] * t["num_generations"] // per_rollout
    if t["max_steps"] > 0:
        return t["max_steps"], -(-t["max_steps"] // t["num_iterations"])
    return rollouts * t["num_iterations"], rollouts


def time_fraction(cfg) -> float:
    """Tokens of a time-typical micro-batch over the worst case: prompts padded to the cap, completions padded
    to padded_completion_factor x the mean (capped at the budget)."""
    T, P = cfg["train.max_completion_tokens"], cfg["data.max_prompt_tokens"]
    padded = min(T, pd.assume("padded_completion_factor") * pd.assume("mean_completion_tokens"))
    return (P + padded) / (P + T)


def decode_seconds(shape: Shape, card: Card, sequences: int, steps: float, context: float,
                   lora_params: float = 0.0) -> float:
    """Seconds to decode `steps` tokens for `sequences` sequences at once: each step reads the weights and the
    KV of every sequence (`context` tokens on average) at decode_bandwidth_share of the bandwidth, or computes
    2 x params FLOPs per sequence at decode_compute_share of the peak, whichever is slower."""
    weights = 2 * (shape.params() + lora_params)
    read = weights + sequences * context * shape.kv_bytes_per_token()
    t_mem = read / (card.bandwidth_gbs * 1e9 * pd.assume("decode_bandwidth_share"))
    t_fl = 2 * shape.params() * sequences / (card.bf16_tflops * 1e12 * pd.assume("decode_compute_share"))
    return steps * max(t_mem, t_fl)


def train_stage(cfg, shape: Shape, card: Card, m: dict, objective_bytes: float) -> Stage:
    """One objective's training run; `m`: the scale's measurements (measure_scale)."""
    from train.objectives import get

    t = cfg.section("train")
    obj = get(cfg.method)
    sleep = t["use_vllm"] and t["vllm_enable_sleep_mode"]
    engine = t["vllm_gpu_memory_utilization"] * card.memory_gib * GIB if t["use_vllm"] else 0.0
    grads = 4 * m["trainable"]
    optim = (2 if "8bit" in t["optimizer"] else 8) * m["trainable"]
    base = m["resident"] + grads + optim + pd.assume("cuda_overhead_gib") * GIB
    update = base + m["update"].peak_bytes + objective_bytes + (0 if sleep else engine)
    rollout_pass = base + m["rollout"].peak_bytes + (0 if sleep else engine)
    generate = base - grads + engine
    peak = max(update, rollout_pass, generate)
    steps, rollouts = steps_and_rollouts(cfg)
    f = time_fraction(cfg)
    ga = t["grad_accum"]
    rounds = pd.assume("dapo_generation_rounds") if obj.filters_groups and cfg.get(
        f"objectives.{cfg.method}.dynamic_sampling") else 1.0
    passes = (1 if t["num_iterations"] > 1 else 0) + (1 if obj.needs_ref else 0)
    step_flops = ga * m["update"].flops * f
    rollout_flops = rounds * passes * ga * m["rollout"].flops * f
    util = card.bf16_tflops * 1e12 * pd.assume("train_utilisation")
    seqs = t["per_device_batch"] * ga
    gen_steps = min(t["max_completion_tokens"], pd.assume("padded_completion_factor") * pd.assume("mean_completion_tokens"))
    gen_s = rounds * decode_seconds(shape, card, seqs, gen_steps, pd.assume("mean_prompt_tokens") + gen_steps / 2)
    seconds = steps * step_flops / util + rollouts * (rollout_flops / util + gen_s)
    gib = peak / GIB
    fix = "" if gib <= pd.assume("headroom") * card.memory_gib else train_fix(cfg, card, m, base, engine, sleep,
                                                                              objective_bytes)
    return Stage(f"train {cfg.method}", "train", gib, card, seconds / 3600,
                 steps * step_flops + rollouts * rollout_flops, fix=fix,
                 detail={"update_gib": update / GIB, "rollout_pass_gib": rollout_pass / GIB,
                         "generate_gib": generate / GIB, "engine_gib": engine / GIB, "steps": steps,
                         "rollouts": rollouts, "sleep": sleep})


def train_fix(cfg, card: Card, m: dict, base: float, engine: float, sleep: bool, objective_bytes: float) -> str:
    """The first setting (in this order) whose predicted peak fits: chunked log-probs (TRL's unchunked pass
    holds the micro-batch's fp32 logits several times), the engine asleep while training, then a smaller
    micro-batch with the batch kept (grad_accum up). Passes scale with the micro-batch's rows."""
    t = cfg.section("train")
    room = pd.assume("headroom") * card.memory_gib * GIB
    if t["logprob_chunk_tokens"] == 0:
        return "train.logprob_chunk_tokens=4096"
    eng = 0 if sleep else engine
    if not sleep and t["use_vllm"] and base + m["update"].peak_bytes + objective_bytes <= room:
        return "train.vllm_enable_sleep_mode=true"
    B, ga = t["per_device_batch"], t["grad_accum"]
    for b in range(B - 1, 0, -1):
        if (B * ga) % b:
            continue
        scaled = max(m["update"].peak_bytes, m["rollout"].peak_bytes) * b / B
        if base + scaled + objective_bytes + eng <= room:
            return f"train.per_device_batch={b} train.grad_accum={B * ga // b}"
    return "no setting found: a larger card (see --gpu)"


def engine_stage(cfg, shape: Shape, card: Card, m: dict) -> Stage:
    t = cfg.section("train")
    seqs = t["per_device_batch"] * t["grad_accum"]
    kv = seqs * t["vllm_max_model_length"] * shape.kv_bytes_per_token()
    need = 2 * shape.params() + 2 * m["trainable"] + kv + pd.assume("engine_overhead_gib") * GIB
    have = t["vllm_gpu_memory_utilization"] * card.memory_gib * GIB
    fix = ""
    if need > have:
        share = -(-need / (card.memory_gib * GIB) // 0.05) * 0.05     # rounded up to 0.05
        fix = (f"train.vllm_gpu_memory_utilization={share:.2f}" if share <= 0.5 else
               f"train.vllm_gpu_memory_utilization={share:.2f} with train.vllm_enable_sleep_mode=true"
               if share <= pd.assume("headroom") else
               "fewer sequences per rollout (train.per_device_batch x train.grad_accum) or a larger card")
    return Stage("engine (colocated vLLM)", "train", have / GIB, card, 0.0, need_gib=need / GIB,
                 reserve_gib=have / GIB, fix=fix,
                 detail={"kv_gib": kv / GIB, "sequences": seqs})


def worker_stage(cfg, shape: Shape, card: Card, kind: str, scorer: dict, jobs: dict) -> Stage:
    """A measurement worker running `kind`'s jobs of the whole study (`jobs`: kind -> (jobs, cost units)), on a
    GPU with a vLLM engine, placed as infer.worker.placement places it (measure.one_weight_copy,
    measure.gpu_memory_utilization; the scorer's pass measured at measure.scorer_batch rows).

    One weight copy: the peak is the larger phase. Generating: the engine's reservation + two CUDA contexts (the
    worker's, the engine process's). Scoring (a kind registered with `score_calls`: probe, covariance), the engine
    asleep (its weights in host memory, no KV; its graphs and buffers stay): engine_overhead_gib + two contexts +
    the scorer's bf16 weights, adapter, fp32 head copy and pass. Two copies: the reservation + the scorer's weights, head copy and pass + one context."""
    from infer.kinds import get, token_budget

    util = cfg["measure.gpu_memory_utilization"]
    one = bool(cfg["measure.one_weight_copy"])
    reserve = util * card.memory_gib * GIB
    lora = 2 * scorer["trainable"]                                    # one bf16 adapter
    weights = 2 * shape.params()
    max_len = cfg["data.context_tokens"] + token_budget(cfg)
    need = weights + 2 * lora + max_len * shape.kv_bytes_per_token() + pd.assume("engine_overhead_gib") * GIB
    head32 = 4 * shape.vocab * shape.hidden
    k = get(kind)
    scores = k.score_calls is not None              # the kind's registration: it runs the scorer's pass
    scoring = scorer["pass"].peak_bytes if scores else 0.0
    ctx = pd.assume("cuda_overhead_gib") * GIB
    if one:
        generate = reserve + 2 * ctx
        score = pd.assume("engine_overhead_gib") * GIB + 2 * ctx + weights + lora + head32 + scoring if scores else 0.0
    else:
        generate = score = reserve + weights + lora + head32 + scoring + ctx
    peak = max(generate, score)
    n_jobs, units = jobs.get(kind, (0, 0.0))
    tokens = units * pd.assume("mean_completion_tokens") / cfg[k.budget]     # cost units are tokens at the budget
    conc = pd.assume("worker_concurrency")
    per_token = decode_seconds(shape, card, conc, 1, pd.assume("mean_prompt_tokens") +
                               pd.assume("mean_completion_tokens") / 2, lora / 2) / conc
    swaps = n_jobs * k.score_calls(cfg) if one and scores else 0     # score calls, each a round trip
    swap_s = swaps * 4 * weights / (pd.assume("host_copy_gbs") * 1e9)   # engine out and back, scorer in and out
    room = pd.assume("headroom") * card.memory_gib
    fix = ""
    if need > reserve or peak / GIB > room:
        fix = worker_fix(cfg, card, need, score, one, room)
    return Stage(f"worker {kind}", "infer", peak / GIB, card, (tokens * per_token + swap_s) / 3600,
                 need_gib=need / GIB, reserve_gib=reserve / GIB, fix=fix,
                 detail={"jobs": n_jobs, "tokens": tokens, "engine_need_gib": need / GIB,
                         "engine_reserve_gib": reserve / GIB, "scoring_gib": scoring / GIB, "one_weight_copy": one,
                         "generate_gib": generate / GIB, "score_gib": score / GIB, "swap_hours": swap_s / 3600})


def worker_fix(cfg, card: Card, need: float, score: float, one: bool, room: float) -> str:
    """The setting that would make a worker fit (`need`: the engine's, `score`: the scoring phase, bytes; `room`:
    headroom x the card, GiB): one weight copy first, then the scoring rows, then the engine's share: at least its
    need, at most what the card leaves beside two CUDA contexts (both in steps of 0.05)."""
    if not one:
        return "measure.one_weight_copy=true"
    if score / GIB > room:
        return "a smaller measure.scorer_batch (the scorer's weights and pass are over the card), or a larger card"
    total = card.memory_gib * GIB
    low = -(-need / total // 0.05) * 0.05
    top = (room * GIB - 2 * pd.assume("cuda_overhead_gib") * GIB) / total // 0.05 * 0.05
    if low > top:
        return "no setting: the engine's weights and KV need more than the card leaves them; a larger card"
    return f"measure.gpu_memory_utilization={low if need > cfg['measure.gpu_memory_utilization'] * total else top:.2f}"


def judge_stage(cfg, card: Card, trajectories: float) -> Stage:
    shape = pd.shape(cfg["judge.model"])
    reserve = pd.assume("judge_vllm_gpu_memory_utilization") * card.memory_gib * GIB
    need = 2 * shape.params() + pd.assume("judge_max_model_len") * shape.kv_bytes_per_token() + \
        pd.assume("engine_overhead_gib") * GIB
    tokens = trajectories * pd.assume("judge_tokens_per_trajectory")
    seconds = 2 * shape.params() * tokens / (card.bf16_tflops * 1e12 * pd.assume("decode_compute_share"))
    fix = "" if need <= reserve else "JUDGE_ARGS='--max-model-len 8192' (a shorter judge context)"
    return Stage(f"judge {cfg['judge.model'].split('/')[-1]}" + (" (assumed shapes)" if shape.assumed else ""), "infer",
                 reserve / GIB, card, seconds / 3600, need_gib=need / GIB, reserve_gib=reserve / GIB, fix=fix,
                 detail={"trajectories": trajectories})
