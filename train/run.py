"""One training run, top to bottom: config -> policy + data -> TRL config -> trainer -> checkpoints + log.

Every step is an importable function; `train.cli` is the command line around `run_training`.
Output folder (default data/train/<scale>/<method>/):
    config/                        the training settings (cfg.write, scope "train"), refused if they differ
                                   once a checkpoint exists (before that, a corrected rerun replaces them)
    run.lock                       held while a process trains here: a second one is refused, naming it
    checkpoints/checkpoint-<step>/ PEFT adapter (save_pretrained), optimizer, scheduler, RNG, trainer state,
                                   rcea_trainer_state.pt (+ manifest, written last = complete)
    steps.jsonl, tb/               per-step log and its TensorBoard mirror (train.report_to; also wandb)
    summary.json                   where everything went, the failure detector's verdict
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path
from typing import Callable

from rcea import layout
from rcea.config import Config

REWARDS = ("verifier", "synthetic")


class TrainSetupError(RuntimeError):
    """The run cannot start here; the message says what to run instead."""


def default_output(scale: str, method: str) -> Path:
    return layout.run_dir(scale, method)


def on_cpu(cfg: Config) -> bool:
    """The tiny model trains on CPU whatever the scale's name; real models on the GPU."""
    from rcea.launch import tiny_model

    return tiny_model(cfg)


def check_host(cfg: Config) -> None:
    """Real scales run in the train container on a GPU (vLLM colocated, bitsandbytes 8-bit AdamW); the tiny
    model runs on CPU at any scale (the tiny scale, and the Compose rehearsal of the 3b recipe)."""
    if on_cpu(cfg):
        return
    import torch

    hint = f"run `invoke train --method {cfg.method} --scale {cfg.scale}` on a GPU host (it starts the train container)"
    if not torch.cuda.is_available():
        raise TrainSetupError(f"scale {cfg.scale} needs a CUDA GPU and none is visible; {hint}, or use --scale tiny")
    missing = [m for m in ("vllm", "bitsandbytes") if importlib.util.find_spec(m) is None]
    if missing:
        raise TrainSetupError(f"scale {cfg.scale} needs the train container ({', '.join(missing)} missing here); {hint}")


# ---- policy, data, rewards ------------------------------------------------------------------------


def load_policy(cfg: Config):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rcea.tiny import model_path

    path = model_path(cfg)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    dtype = torch.bfloat16 if cfg["train.precision"] == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


def training_dataset(cfg: Config, tokenizer):
    """Prompts (chat messages) + reference answers, filtered to 204 prompt tokens and drawn (rcea.data)."""
    import datasets

    from rcea.data import chat_messages, load_train_records
    from rcea.store import is_complete

    prepared = layout.prepared_pool(cfg.scale)
    if is_complete(prepared) and _prepared_matches(cfg, prepared):
        from rcea.jsonl import read_jsonl

        records = read_jsonl(prepared, required=("problem", "answer"), allow_empty=True)
    else:
        records = load_train_records(cfg, tokenizer)
    if not records:
        raise TrainSetupError("the training pool is empty after filtering; check data.* settings")
    rows = [{"prompt": chat_messages(r["problem"], cfg), "answer": r["answer"]} for r in records]
    return datasets.Dataset.from_list(rows)


def _prepared_matches(cfg: Config, prepared: Path) -> bool:
    """The pool `python -m rcea.prepare` drew serves this run only if it was drawn with the same data.*
    settings (prepare uses the scale's defaults; a run overriding data.* draws its own)."""
    from rcea.config import load_config
    from rcea.store import manifest_path

    default = load_config(cfg.scale)
    made_with = json.loads(manifest_path(prepared).read_text()).get("config_hash")
    return made_with == default.hash() and default.section("data") == cfg.section("data")


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def verifier(completions, answer, **_) -> list[float]:
    """1 if the last \\boxed{} answer equals the reference (rcea.verify), else 0."""
    from rcea.verify import reward

    return [reward(_text(c), a) for c, a in zip(completions, answer)]


def synthetic(completions, completion_ids, **_) -> list[float]:
    """Smoke-test reward with variance on a random tiny model: 1 if the first completion token id is even."""
    return [float(len(ids) > 0 and ids[0] % 2 == 0) for ids in completion_ids]


def reward_function(name: str) -> Callable:
    if name not in REWARDS:
        raise TrainSetupError(f"unknown reward {name!r}; valid: {', '.join(REWARDS)}")
    return {"verifier": verifier, "synthetic": synthetic}[name]


# ---- TRL configuration ----------------------------------------------------------------------------


def grpo_config(cfg: Config, ckpt_dir: Path, tokenizer=None):
    """TRL's configuration of this run; given the policy `tokenizer`, rollouts stop at data.stop_tokens."""
    from trl import GRPOConfig

    t = cfg.section("train")
    gpu = not on_cpu(cfg)
    from train.objectives import settings_for
    from train.objectives.loss import aggregation

    s = settings_for(cfg)
    # TRL's own clip and aggregation, recorded in the config for readers of TRL's fields; our loss replaces
    # TRL's (train/trainer.py), so an objective without a clip (KL-Cov) leaves TRL's default in place.
    clip = {"epsilon": s.epsilon} if hasattr(s, "epsilon") else {}
    kwargs = dict(
        output_dir=str(ckpt_dir), per_device_train_batch_size=t["per_device_batch"],
        gradient_accumulation_steps=t["grad_accum"], num_generations=t["num_generations"],
        num_iterations=t["num_iterations"], temperature=t["temperature"], top_p=t["top_p"],
        max_completion_length=t["max_completion_tokens"], beta=t["beta"],
        loss_type=aggregation(s.loss_type), **clip,
        scale_rewards="group", mask_truncated_completions=False, importance_sampling_level="token",
        learning_rate=t["learning_rate"], weight_decay=t["weight_decay"], lr_scheduler_type=t["lr_scheduler"],
        warmup_ratio=t["warmup_ratio"], optim=t["optimizer"], bf16=t["precision"] == "bf16",
        gradient_checkpointing=t["gradient_checkpointing"], max_steps=t["max_steps"],
        num_train_epochs=t["epochs"], save_strategy="steps", save_steps=t["save_steps"],
        logging_steps=t["logging_steps"], seed=t["seed"], data_seed=t["seed"], report_to=trl_report_to(cfg),
        use_cpu=not gpu, use_vllm=t["use_vllm"], dataloader_num_workers=0, save_only_model=False,
        log_completions=False, disable_tqdm=True, cast_lm_head_to_fp32=t["lm_head_fp32"],
    )
    if tokenizer is not None:
        kwargs["generation_kwargs"] = stop_generation_kwargs(cfg, tokenizer)
    if t["use_vllm"]:
        kwargs.update(vllm_mode="colocate", vllm_importance_sampling_correction=t["vllm_is_correction"],
                      **colocated_vllm(cfg))
    return GRPOConfig(**kwargs)


def stop_generation_kwargs(cfg: Config, tokenizer) -> dict:
    """data.stop_tokens as TRL's `generation_kwargs`: vLLM's `stop_token_ids` (SamplingParams), or the
    transformers path's `eos_token_id` (GenerationConfig, replacing the tokenizer's single EOS)."""
    from rcea.data import stop_token_ids

    ids = stop_token_ids(tokenizer, cfg)
    return {"stop_token_ids": ids} if cfg["train.use_vllm"] else {"eos_token_id": ids}


def colocated_vllm(cfg: Config) -> dict:
    """TRL's colocated-vLLM memory settings of this scale (configs: the reasoning is in their docs)."""
    t = cfg.section("train")
    need = cfg["data.max_prompt_tokens"] + t["max_completion_tokens"]
    if t["vllm_max_model_length"] < need:
        raise TrainSetupError(f"train.vllm_max_model_length = {t['vllm_max_model_length']} is shorter than a prompt "
                              f"plus its completion ({need} tokens); set it to at least {need}")
    if not 0.0 < t["vllm_gpu_memory_utilization"] < 1.0:
        raise TrainSetupError("train.vllm_gpu_memory_utilization must be a fraction in (0, 1), got "
                              f"{t['vllm_gpu_memory_utilization']}")
    return dict(vllm_gpu_memory_utilization=t["vllm_gpu_memory_utilization"],
                vllm_enable_sleep_mode=t["vllm_enable_sleep_mode"], vllm_max_model_length=t["vllm_max_model_length"])


REPORT_TO = ("tensorboard", "wandb", "none")


def report_targets(cfg: Config) -> set[str]:
    """train.report_to as a set: 'tensorboard', 'wandb', 'tensorboard,wandb' or 'none'."""
    want = {x.strip() for x in str(cfg["train.report_to"]).split(",") if x.strip()}
    bad = want - set(REPORT_TO)
    if bad or not want or ("none" in want and len(want) > 1):
        raise TrainSetupError(f"train.report_to = {cfg['train.report_to']!r}; use tensorboard, wandb, "
                              "'tensorboard,wandb' or none")
    return want - {"none"}


def trl_report_to(cfg: Config) -> list[str]:
    """What TRL itself reports to: Weights & Biases when asked (TensorBoard is written by train.monitor's
    StepLogger into <run>/tb, with resume-safe step numbers, so TRL's own TensorBoard writer stays off)."""
    if "wandb" not in report_targets(cfg):
        return []
    if importlib.util.find_spec("wandb") is None:
        raise TrainSetupError("train.report_to asks for wandb, which is not installed in this environment: add "
                              "the locked W&B extra (`scripts/bootstrap train-wandb` here, `WITH_WANDB=1 invoke build "
                              "--role train` for the image) and set WANDB_API_KEY; or use train.report_to=tensorboard")
    return ["wandb"]


def lora_config(cfg: Config):
    from peft import LoraConfig

    t = cfg.section("train")
    return LoraConfig(r=t["lora_rank"], lora_alpha=t["lora_alpha"], lora_dropout=t["lora_dropout"],
                      target_modules=list(t["lora_targets"]), task_type="CAUSAL_LM")


# ---- checkpoints ----------------------------------------------------------------------------------


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    from rcea import store

    return [path for _, path in store.complete_checkpoints(ckpt_dir)]


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint; incomplete ones (a run killed while saving) are removed."""
    done = complete_checkpoints(ckpt_dir)
    for p in ckpt_dir.glob("checkpoint-*"):
        if p not in done:
            shutil.rmtree(p)
    return done[-1] if done else None


# ---- the run --------------------------------------------------------------------------------------


def run_training(cfg: Config, output: Path | None = None, resume: bool = False, reward: str = "verifier",
                 callbacks=(), log: Callable[[str], None] = print) -> dict:
    """Train into `output` (default: the run folder of the scale and method), holding its lock throughout."""
    from rcea.store import FolderBusy, folder_lock

    check_host(cfg)
    out = Path(output) if output else default_output(cfg.scale, cfg.method)
    try:
        with folder_lock(layout.RunFolder(out).lock):
            return _run_training(cfg, out, resume, reward, callbacks, log)
    except FolderBusy as exc:   # a second study (or `invoke train`) on the same folder: refuse, naming the first
        raise TrainSetupError(f"{exc}; wait until it has finished (or stop it), then rerun") from None


def _run_training(cfg: Config, out: Path, resume: bool, reward: str, callbacks, log) -> dict:
    from rcea.seeds import seed_everything
    from rcea.store import atomic_write_json, write_manifest
    from rcea.stats import FailureThresholds, failure_detector

    files = layout.RunFolder(out)
    ckpt_dir, steps_path = files.checkpoints, files.steps_log
    made = bool(complete_checkpoints(ckpt_dir)) if ckpt_dir.exists() else False
    # Refuses a folder holding a different training configuration, unless nothing was made under it (a
    # set-up that failed before its first checkpoint): then the corrected configuration replaces it.
    cfg.write(out, "train", replace=not made)
    start = newest_checkpoint(ckpt_dir) if ckpt_dir.exists() else None
    finished = files.summary
    if start is not None and finished.exists():  # a complete run of this configuration: reuse it
        prev = json.loads(finished.read_text())
        if prev.get("config_hash") == cfg.hash("train") and Path(prev.get("final_adapter") or "").name == start.name:
            log(f"[train] {out} is complete (newest {start.name}); reusing it")
            return prev
    if start is not None and not resume:
        raise TrainSetupError(f"{out} already holds checkpoints (newest {start.name}); add --resume to continue "
                              "or choose another --output")
    if resume and start is None:
        log(f"[train] --resume: no complete checkpoint in {ckpt_dir}; starting from step 0")
    # Imported only now: Transformers and TRL take tens of CPU seconds to import, which a reused run skips.
    from train.monitor import StepLogger, read_steps, truncate_steps
    from train.objectives import settings_for
    from train.progress import ProgressLine, quiet_trainer
    from train.trainer import ObjectiveGRPOTrainer

    truncate_steps(steps_path, int(start.name.split("-")[-1]) if start else 0)

    if on_cpu(cfg):
        from rcea.seeds import limit_cpu_threads

        limit_cpu_threads()
    seed_everything(cfg["train.seed"])
    model, tokenizer = load_policy(cfg)
    dataset = training_dataset(cfg, tokenizer)
    trainer = ObjectiveGRPOTrainer(
        model=model, reward_funcs=[reward_function(reward)], args=grpo_config(cfg, ckpt_dir, tokenizer),
        train_dataset=dataset, processing_class=tokenizer, peft_config=lora_config(cfg),
        callbacks=[StepLogger(steps_path, files.tensorboard if "tensorboard" in report_targets(cfg) else None),
                   ProgressLine(log), *callbacks],
        objective=cfg.method, objective_settings=settings_for(cfg), refill_seed=cfg["train.seed"],
        logprob_chunk_tokens=cfg["train.logprob_chunk_tokens"],
    )
    quiet_trainer(trainer)  # one line per step: the [train] line, not also the Trainer's raw dict
    _mark_checkpoints_complete(trainer, cfg)
    if start is not None:
        trainer.load_objective_state(start)
        log(f"[train] resuming from {start}")
    t0 = time.time()
    trainer.train(resume_from_checkpoint=str(start) if start else None)
    steps = read_steps(steps_path)
    final = complete_checkpoints(ckpt_dir)
    summary = {
        "method": cfg.method, "scale": cfg.scale, "config_hash": cfg.hash("train"), "output": str(out),
        "checkpoints": [str(p) for p in final], "final_adapter": str(final[-1]) if final else None,
        "steps_log": str(steps_path), "tensorboard": str(files.tensorboard), "config": str(files.config),
        "global_step": trainer.state.global_step, "wall_s": round(time.time() - t0, 2),
        "failure_detector_reward_trace": failure_detector(
            [r["step"] for r in steps if "reward" in r], [r["reward"] for r in steps if "reward" in r],
            FailureThresholds.from_config(cfg)),
    }
    atomic_write_json(files.summary, summary)
    write_manifest(files.summary, cfg=cfg, seeds={"train": cfg["train.seed"]})
    for key in ("output", "final_adapter", "steps_log", "tensorboard", "config"):
        log(f"[train] {key}: {summary[key]}")
    log(f"[train] failure detector (reward trace): {summary['failure_detector_reward_trace']}")
    return summary


def _mark_checkpoints_complete(trainer, cfg: Config) -> None:
    """Write a manifest after each checkpoint's last file, so only finished checkpoints count."""
    from transformers import TrainerCallback

    from rcea.store import folder_records, write_manifest

    class _Manifest(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):   # every file's size and SHA-256: a damaged copy shows
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            write_manifest(ckpt / layout.TRAINER_STATE, cfg=cfg, step=state.global_step, files=folder_records(ckpt))

    trainer.add_callback(_Manifest())
