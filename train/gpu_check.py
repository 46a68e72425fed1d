"""Device check of the training role: a few real GRPO steps per scale, as a study runs them; PASS/FAIL per check.

    python -m train.gpu_check                 # GPU host, in the train image: Qwen2.5-3B and 7B shapes
    python -m train.gpu_check --cpu           # the tiny shape on CPU, TRL without vLLM (what CI runs)

For each scale, in its own process: a random-initialised Qwen2 of the scale's shape (rcea/device_check.py;
no weights download, no network) and a word-level tokenizer covering its whole vocabulary are written to a
temporary folder (`--workdir`; about 6 GB at 3B, 15 GB at 7B, removed afterwards), and `--steps` optimizer
steps run through the study's own pieces: the scale's configuration (configs/scales), train.run's
GRPOConfig and LoRA config, and ObjectiveGRPOTrainer with the grpo objective, so TRL 0.29.0's GRPOTrainer
generates with colocated vLLM exactly as a study does (same memory fraction, context, sampling; sleep mode
as the scale sets it: off at 3B, on at 7B, with train/vllm_sync.py). What the check changes, to fit its
time budget: one micro-batch per step (train.grad_accum = 1: 16 sequences at 3B, 8 at 7B, the scale's
micro-batch, so the training pass has the study's memory shape), a fresh rollout every step
(train.num_iterations = 1, so the second rollout is the first one after a weight update), no warm-up, and
a large learning rate (`--lr`) so that one update moves a random model by more than bf16 noise. Prompts are
`data.max_prompt_tokens` long; a random model samples EOS about once per vocabulary size of tokens, and the
check raises only <|im_end|>'s head row (see stop-tokens), so most completions run to
`train.max_completion_tokens` (2,048; `--completion` shortens them) and every rollout holds one that does:
the worst case for memory, and close to it for time.
The reward is the smoke-test one (train.run.synthetic). The word tokenizer follows Qwen2.5 base's conventions
(EOS <|endoftext|>, ChatML turns ending in <|im_end|>).

Checks, one line each per scale:
  grpo-steps       every step ran and its loss is finite; the LoRA parameter count equals the hand count;
                   seconds per step (the check's own probe passes excluded) and the set-up time;
  memory           peak GPU memory in use (the whole device, vLLM's pool included, sampled every 0.1 s, and
                   PyTorch's own peak) in GiB, below 95% of an 80 GB H100's 79.6 GiB (what the scales are
                   sized for) on any GPU: on a larger one the engine's vLLM fraction is scaled down so that it
                   holds the GiB it would hold on the H100 (train/gpu_measure.py);
  rollout-weights  after the update vLLM samples from the policy being trained: the sampler-vs-policy gap
                   the trainer logs at every step (sampling/sampling_logp_difference/mean) stays near its
                   value before any update, while the policy has moved from the base weights by `moved`
                   (mean |log p_policy - log p_base| on the rollout's tokens). Rollouts from stale weights
                   (TRL 0.29.0 in sleep mode without train/vllm_sync.py) show a gap of about `moved`.
                   FAIL too when the update is too small to tell the two apart.
  base-weights     the frozen base weights after the steps equal a copy taken before them, bit for bit (the
                   weight sync merges LoRA out of place, train/vllm_sync.py; TRL's in-place merge / unmerge in
                   bf16 changes them);
  stop-tokens      the share of rollout completions that end at a stop token (data.stop_tokens); FAIL if one
                   runs on past a stop token (the sampler ignores the stop set). Counted on the completions as
                   the sampler returned them: the trainer cuts each after its first stop token, which hides a
                   sampler ignoring the set from the trained rows (not its cost). A random head samples a stop id
                   once per ~150,000 tokens, too rarely to catch that (35% of the time at 3B), so before the run
                   the non-EOS stop id's head row is raised (train/gpu_measure.py raise_stop_row) to the rate
                   per token at which the steps' completions catch a sampler ignoring the stop set with
                   probability POWER (0.999; 1.1e-4 per token at 3B: 32 completions of 2,048 tokens); the
                   line prints that power and the rate measured on the raised model. EOS is not raised: every
                   sampler stops there, so only a non-EOS stop token shows whether the stop set is applied.
After the check lines, on a GPU: the planner's prediction for each scale's step (train/plan.py on an 80 GB
H100, with the check's overrides) against the measured device peak, PyTorch's allocated peak and the last
step's seconds, one line each with measured / predicted (train/gpu_measure.py print_predictions).
On CPU (`--cpu`) the same code runs the tiny shape with TRL's own generation (the vLLM 0.11 wheel needs a
GPU): rollout-weights then checks that one update moved the policy measurably and says that the sampler gap
was not measured; memory reports the peak resident memory. The sampler-gap verdict on the GPU code path is
tested on CPU with a recording stand-in for the vLLM engine (tests/train/test_gpu_check.py).
"""

from __future__ import annotations

import json
import sys
import time

from rcea.device_check import CPU_SHAPE, GPU_SCALES  # a GPU scale is its shape (rcea.device_check.SHAPES)

CPU = {"scale": "tiny", "shape": CPU_SHAPE, "prompt": 16, "completion": 16}
CHECK_OVERRIDES = ["train.num_iterations=1", "train.warmup_ratio=0.0", "train.report_to='none'",
                   "train.save_steps=100000", "train.logging_steps=1"]
GPU_OVERRIDES = ["train.grad_accum=1"]  # one micro-batch per step: the study's per-step memory, a quarter of its time
# ids 0, 1, 2 = pad, bos, eos of qwen2_config; as Qwen2.5 base: EOS <|endoftext|>, ChatML turns end in <|im_end|>
SPECIAL = ["<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['content'] }} <|im_end|> {% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>{% endif %}")
MIN_MOVE = 1e-3  # nats: a smaller mean change of log p cannot be told from bf16 noise


class CheckError(RuntimeError):
    """The check cannot run here; the message names the fix."""


def word_tokenizer(vocab_size: int):
    """A tokenizer with one word per id (w4 ... w<V-1>) over the model's whole vocabulary, and a chat template:
    whatever id a random model samples decodes, and a prompt of n words is n tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + [f"w{i}" for i in range(len(SPECIAL), vocab_size)])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", eos_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"], chat_template=TEMPLATE,
                                   padding_side="left", model_input_names=["input_ids", "attention_mask"])


def prompts(n: int, words: int, vocab_size: int, seed: int = 0):
    """n chat prompts of `words` random words each (one token per word; the template adds 3)."""
    import random

    import datasets

    rng = random.Random(seed)
    rows = [{"prompt": [{"role": "user", "content": " ".join(f"w{rng.randrange(len(SPECIAL), vocab_size)}"
                                                              for _ in range(words))}], "answer": "0"}
            for _ in range(n)]
    return datasets.Dataset.from_list(rows)


def check_saved_tokenizer(folder, rows) -> None:
    """The engine loads the tokenizer from `folder` with AutoTokenizer: it must give the same ids (a
    Transformers that maps model_type qwen2 to its own tokenizer class would drop every word)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    text = tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    words = len(rows[0]["prompt"][0]["content"].split())
    if len(ids) != words + 3 or tok.unk_token_id in ids:
        raise CheckError(f"the saved tokenizer reloads as {type(tok).__name__} and turns a {words}-word prompt into "
                         f"{len(ids)} ids; run the check in the train image (Transformers 4.57)")


def weights_verdict(gap_before: float, gap_after: float, moved: float) -> tuple[bool, str]:
    """Did the rollout after the update come from the updated policy? A stale engine samples from weights
    `moved` away from the policy, so its gap grows by about `moved`; a fresh one keeps the gap it had."""
    if not moved > max(2 * gap_before, MIN_MOVE):
        return False, (f"the update moved the policy by {moved:.4f} nats, too little against the sampler's noise "
                       f"{gap_before:.4f} to tell stale weights from fresh: raise --lr")
    ok = gap_after <= gap_before + 0.5 * moved
    return ok, (f"sampler-vs-policy gap {gap_before:.4f} before any update, {gap_after:.4f} after it, while the "
                f"policy moved {moved:.4f} from the base" + ("" if ok else ": vLLM SAMPLES FROM STALE WEIGHTS"))


def check_overrides(steps: int, lr: float, completion: int, gpu: bool) -> list[str]:
    over = list(CHECK_OVERRIDES) + (GPU_OVERRIDES if gpu else []) + [f"train.max_steps={steps}",
                                                                     f"train.learning_rate={lr}"]
    return over + ([f"train.max_completion_tokens={completion}"] if completion else [])


def check_config(scale: str, steps: int, lr: float, completion: int, gpu: bool, overrides=()):
    """The scale's study configuration with the check's changes; TrainSetupError names a bad value."""
    from rcea.config import load_config
    from train.run import colocated_vllm

    cfg = load_config(scale, "grpo", check_overrides(steps, lr, completion, gpu) + list(overrides))
    if cfg["train.use_vllm"]:
        colocated_vllm(cfg)  # the engine's context must hold a prompt and its completion
    return cfg


def _build_model(shape: str, dtype, device: str):
    """A random model of `shape` built in `dtype` directly (a 7B built in fp32 first would leave 30 GB of cached
    blocks behind, which vLLM's start-up would count as taken)."""
    import torch

    from rcea.device_check import random_model

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return random_model(shape, dtype, device)
    finally:
        torch.set_default_dtype(before)


def part_grpo(scale: str, device: str, steps: int, lr: float, prompt_tokens: int = 0, completion_tokens: int = 0,
              overrides: tuple[str, ...] = (), workdir: str | None = None) -> dict:
    """Run the steps of one scale; returns {"checks": [...], "sampler": ...}."""
    import tempfile
    from pathlib import Path

    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rcea.data import stop_strings, stop_token_ids
    from rcea.device_check import LORA_TARGETS, lora_params
    from train.gpu_measure import MemoryWatch, base_change, engine_fraction, frozen_copy, raise_stop, stop_counts
    from train.monitor import GAP_MEAN
    from train.objectives import settings_for
    from train.progress import quiet_trainer
    from train.run import grpo_config, lora_config, synthetic
    from train.trainer import ObjectiveGRPOTrainer

    gpu = device.startswith("cuda")
    if not gpu:
        from rcea.seeds import limit_cpu_threads

        limit_cpu_threads()  # as training on CPU does: one thread for the tiny model on shared cores
    shape = scale if gpu else CPU["shape"]
    cfg = check_config(scale, steps, lr, completion_tokens, gpu, overrides)
    total = torch.cuda.mem_get_info()[1] / 2**30 if gpu else None
    if gpu and cfg["train.use_vllm"]:  # the engine holds the GiB it would hold on an 80 GB H100
        fraction = engine_fraction(cfg["train.vllm_gpu_memory_utilization"], total)
        cfg = check_config(scale, steps, lr, completion_tokens, gpu,
                           [*overrides, f"train.vllm_gpu_memory_utilization={fraction}"])
    prompt_tokens = prompt_tokens or cfg["data.max_prompt_tokens"]
    t = cfg.section("train")
    rollouts: list[dict] = []
    stops: list[dict] = []
    step_s: list[float] = []
    probe_s = [0.0]

    def sync():
        if gpu:
            torch.cuda.synchronize()

    class Sampled(GRPOTrainer):
        """Below ObjectiveGRPOTrainer in Probe's MRO: sees each training rollout as the sampler returned it,
        before ObjectiveGRPOTrainer cuts every completion after its first stop token."""

        def _generate_single_turn(self, prompts):
            res = super()._generate_single_turn(prompts)
            if self.model.training:
                stops.append(stop_counts(res[1], stop_ids, self.processing_class.pad_token_id))
            return res

    class Probe(ObjectiveGRPOTrainer, Sampled):
        """Per training rollout: how far the policy is from the base weights on the rollout's tokens."""

        def _add_objective_inputs(self, out, inputs):
            if self.model.training:
                sync()
                t0 = time.perf_counter()
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                keep, bs = out["completion_ids"].size(1), self.args.per_device_train_batch_size
                with torch.no_grad():
                    policy, _ = self._get_per_token_logps_and_entropies(self.model, ids, attn, keep, bs)
                base = self._rollout_forward(out, with_ref=True, with_entropy=False)["ref_logp"]
                mask = out["completion_mask"].float()
                moved = float(((policy - base).abs() * mask).sum() / mask.sum().clamp(min=1))
                rollouts.append({"step": self.state.global_step, "moved": moved})
                sync()
                probe_s[0] += time.perf_counter() - t0
            return super()._add_objective_inputs(out, inputs)

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            sync()
            self.t0, probe_s[0] = time.perf_counter(), 0.0

        def on_step_end(self, args, state, control, **kw):
            sync()
            step_s.append(time.perf_counter() - self.t0 - probe_s[0])

    t_setup = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rcea-train-check-", dir=workdir) as tmp, MemoryWatch(device) as mem:
        model = _build_model(shape, torch.bfloat16 if t["precision"] == "bf16" else torch.float32, device)
        tokenizer = word_tokenizer(model.config.vocab_size)
        stop_ids = stop_token_ids(tokenizer, cfg)
        stop_power = raise_stop(model, tokenizer, stop_ids, steps * t["per_device_batch"] * t["grad_accum"],
                                t["max_completion_tokens"])
        per_rollout = t["per_device_batch"] * t["grad_accum"] // t["num_generations"]
        dataset = prompts(per_rollout * (steps + 1), prompt_tokens - 3, model.config.vocab_size)
        model.save_pretrained(tmp)  # the colocated engine loads from this folder (model.name_or_path)
        tokenizer.save_pretrained(tmp)
        check_saved_tokenizer(tmp, dataset)
        model.config._name_or_path = model.name_or_path = tmp
        trainer = Probe(model=model, reward_funcs=[synthetic], args=grpo_config(cfg, Path(tmp) / "out", tokenizer),
                        train_dataset=dataset, processing_class=tokenizer, peft_config=lora_config(cfg),
                        callbacks=[Clock()], objective="grpo", objective_settings=settings_for(cfg))
        quiet_trainer(trainer)
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        before = frozen_copy(trainer.model)  # host memory: 15 GB at 7B
        setup_s = time.perf_counter() - t_setup
        history = trainer.train()
        change = base_change(trainer.model, before)
        del before
        logs = trainer.state.log_history
        torch_peak = torch.cuda.max_memory_reserved() / 2**30 if gpu else 0.0
        allocated = torch.cuda.max_memory_allocated() / 2**30 if gpu else None
    losses = [r["loss"] for r in logs if "loss" in r]
    gaps = {r["step"]: r[GAP_MEAN] for r in logs if GAP_MEAN in r}
    want = lora_params(shape, t["lora_rank"]) if sorted(t["lora_targets"]) == sorted(LORA_TARGETS) else None
    lora = (want is None or trainable == want,
            f"trainable {trainable:,}" + (f" (by hand {want:,})" if want is not None else ""))
    sampler = ("vLLM colocated" + (", sleep mode" if t["vllm_enable_sleep_mode"] else "")) if t["use_vllm"] \
        else "TRL generate"
    timing = {"setup_s": setup_s, "step_s": step_s, "train_runtime": history.metrics.get("train_runtime")}
    extra = {"base": change, "stops": stops, "stop_names": stop_strings(cfg), "stop_power": stop_power,
             "fraction": t["vllm_gpu_memory_utilization"] if t["use_vllm"] else None}
    measured = {"peak_gib": max(mem.peak, torch_peak), "allocated_gib": allocated,
                "step_s": step_s[-1] if step_s else None}  # the last step: warm (the first compiles)
    return {"checks": verdicts(scale, steps, losses, timing, measured["peak_gib"], total, rollouts, gaps,
                               lora, t["use_vllm"], extra), "sampler": sampler, "measured": measured}


def verdicts(scale, steps, losses, timing, peak, total, rollouts, gaps, lora, vllm, extra) -> list[dict]:
    """The five check lines of one scale from what the run measured."""
    import math

    from train.gpu_measure import base_verdict, memory_verdict, stop_verdict

    step_s = timing["step_s"]
    finite = len(losses) == steps and all(math.isfinite(x) for x in losses)
    out = [{"check": f"grpo-steps-{scale}", "ok": finite and len(step_s) == steps and lora[0],
            "detail": f"{len(step_s)} of {steps} steps, s/step " + ", ".join(f"{s:.1f}" for s in step_s)
                      + f" (set-up {timing['setup_s']:.0f} s); losses {', '.join(f'{x:.4g}' for x in losses)};"
                      f" LoRA {lora[1]}"}]
    if total is not None:
        ok, detail = memory_verdict(peak, total, extra["fraction"])
        out.append({"check": f"memory-{scale}", "ok": ok, "detail": detail})
    else:
        out.append({"check": f"memory-{scale}", "ok": True, "detail": f"peak resident memory {peak:.2f} GiB (CPU)"})
    name = f"rollout-weights-{scale}"
    after = [r for r in rollouts if r["step"] >= 1]
    if not after:
        out.append({"check": name, "ok": False, "detail": f"{len(rollouts)} rollouts recorded, none after a weight "
                                                           "update (run --steps 2 or more)"})
    elif not vllm:
        moved = after[0]["moved"]
        out.append({"check": name, "ok": moved > MIN_MOVE,
                    "detail": f"policy moved {moved:.4f} nats from the base after one update" + (
                        "; the sampler gap needs vLLM (GPU): not measured here" if moved > MIN_MOVE
                        else ": too little to tell stale rollouts from fresh; raise --lr")})
    elif 1 not in gaps or 2 not in gaps:
        out.append({"check": name, "ok": False, "detail": f"the training log lacks the sampler gap at steps 1 and 2 "
                                                           f"(logged at {sorted(gaps)}): stale rollouts would not show"})
    else:  # log step 1 = the rollout before any update, log step 2 = the first one after it
        ok, detail = weights_verdict(gaps[1], gaps[2], after[0]["moved"])
        out.append({"check": name, "ok": ok, "detail": detail})
    for check, (ok, detail) in ((f"base-weights-{scale}", base_verdict(extra["base"])),
                                (f"stop-tokens-{scale}", stop_verdict(extra["stops"], extra["stop_names"],
                                                                      extra.get("stop_power")))):
        out.append({"check": check, "ok": ok, "detail": detail})
    return out


def dispatch(args: list[str]) -> dict:
    scale, device, steps, lr, prompt, completion, workdir = args
    return part_grpo(scale, device, int(steps), float(lr), int(prompt), int(completion),
                     workdir=None if workdir == "-" else workdir)


def _gpu_stack_missing() -> list[str]:
    import importlib.util

    return [m for m in ("vllm", "bitsandbytes") if importlib.util.find_spec(m) is None]


def main(argv=None) -> int:
    from rcea.device_check import check_parser, finish, gpu_present, run_part
    from train.run import TrainSetupError

    p = check_parser("train.gpu_check", __doc__, f"scales to run, comma-separated (of {', '.join(GPU_SCALES)})")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps per scale (at least 2: one after an update)")
    p.add_argument("--lr", type=float, default=1e-2,
                   help="learning rate of the check (large, so one update moves a random model measurably)")
    p.add_argument("--completion", type=int, default=0,
                   help="completion tokens (0: the scale's train.max_completion_tokens, 2,048); fewer runs faster "
                        "but measures the memory of shorter sequences than a study's")
    p.add_argument("--timeout", type=int, default=600, help="seconds one scale may take before it FAILs")
    p.add_argument("--workdir", default=None,
                   help="folder for the temporary model (needs 15 GB free at 7B; default: the system's temp folder)")
    a = p.parse_args(argv)
    if a._part:
        print(json.dumps(dispatch(a._part)))
        return 0
    scales = [CPU["scale"]] if a.cpu else [s.strip() for s in a.shapes.split(",") if s.strip()]
    bad = [s for s in scales if s not in GPU_SCALES + (CPU["scale"],) or (s == CPU["scale"] and not a.cpu)]
    if bad or not scales:
        p.error(f"--shapes {a.shapes!r}: unknown scale {', '.join(bad) or '(none)'}; use some of "
                f"{','.join(GPU_SCALES)} (or --cpu for the tiny shape)")
    if a.steps < 2:
        p.error(f"--steps {a.steps}: the check needs at least 2 steps (the second rollout follows the first update)")
    if not a.lr > 0:
        p.error(f"--lr {a.lr}: the learning rate must be positive (default 1e-2)")
    if a.completion < 0 or a.timeout <= 0:
        p.error("--completion must be 0 (the scale's) or more, --timeout positive")
    completion = a.completion or (CPU["completion"] if a.cpu else 0)
    for s in scales:
        try:
            check_config(s, a.steps, a.lr, completion, gpu=not a.cpu)
        except (TrainSetupError, ValueError) as exc:
            p.error(f"scale {s}: {exc}")
    if a.cpu:
        device, prompt = "cpu", CPU["prompt"]
    elif not gpu_present():
        return 2
    else:
        missing = _gpu_stack_missing()
        if missing:
            print(f"train.gpu_check needs {' and '.join(missing)} (the train image): run "
                  "`docker compose run --rm train python -m train.gpu_check`")
            return 2
        device, prompt = "cuda", 0
    t0 = time.perf_counter()
    results, measured = [], {}
    for s in scales:
        args = [s, device, str(a.steps), str(a.lr), str(prompt), str(completion), a.workdir or "-"]
        r = run_part("train.gpu_check", args, dispatch, timeout=a.timeout)
        if "checks" in r:
            print(f"{s}: sampler {r['sampler']}")
            results.extend(r["checks"])
            measured[s] = r.get("measured")
        else:  # the scale's process crashed or timed out: one FAIL line for it (its prediction still prints)
            results.append({**r, "check": f"grpo-steps-{s}"})
            measured[s] = None
        sys.stdout.flush()
    if not a.cpu:  # the planner covers GPU stages only: no table for the tiny shape
        from train.gpu_measure import print_predictions

        print_predictions(measured, lambda s: check_overrides(a.steps, a.lr, completion, gpu=True))
    return finish(results, t0)


if __name__ == "__main__":
    sys.exit(main())
