"""Range rules of settings whose type alone does not say what is valid (read by rcea.config on load).

`out_of_range(key, value)` is '' when the value suits the setting, else one line saying what it must be;
the aggregate command line checks its options against the same rules.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any


# Settings whose type alone does not say what is valid: key (a `*` matches one name part) -> rule.
# Rules: "> 0", ">= 1", ">= 0", "in [0, 1]" (brackets: closed, parentheses: open), "-1 or >= 1".
# A list or table value is checked element by element (eval.milestones, probe.composition).
RANGES: dict[str, str] = {
    **dict.fromkeys(["train.learning_rate", "toy.warm_start_lr", "train.temperature", "passk.temperature",
                     "probe.temperature", "judge.timeout_s", "covariance.advantage_eps", "objectives.*.adv_eps",
                     "objectives.*.z_eps", "train.lora_alpha", "objectives.*.clip_ratio_c"], "> 0"),
    **dict.fromkeys(["train.epochs", "train.grad_accum", "train.logging_steps", "train.num_iterations",
                     "train.per_device_batch", "train.save_steps", "train.max_completion_tokens",
                     "train.vllm_max_model_length", "passk.n", "probe.k", "probe.n_questions",
                     "probe.max_new_tokens", "passk.max_new_tokens", "probe.entropy_chunk", "eval.max_new_tokens", "eval.dense_points",
                     "covariance.n_questions", "covariance.trajectories", "covariance.max_positions",
                     "covariance.gap_steps", "toy.warm_start_batch",
                     "toy.warm_start_examples", "toy.heldout", "model.tiny_heads", "model.tiny_hidden",
                     "model.tiny_intermediate", "model.tiny_kv_heads", "model.tiny_layers", "model.tiny_vocab",
                     "data.draw_size", "data.max_prompt_tokens", "data.context_tokens",
                     "aggregate.bootstrap_resamples", "aggregate.rarefaction_draws", "aggregate.min_k_r",
                     "aggregate.min_mode_m", "aggregate.smoothing_window", "aggregate.steps_per_epoch",
                     "codebook.assign_passes", "codebook.chunk_size", "codebook.concurrency", "judge.concurrency",
                     "eval.minerva_subset_size", "objectives.*.max_num_gen_batches", "objectives.*.num_buckets",
                     "objectives.*.max_completion_length"], ">= 1"),
    "train.num_generations": ">= 2",  # a group needs two completions for an advantage
    **dict.fromkeys(["judge.max_retries", "judge.max_retry_after_s", "judge.temperature", "train.weight_decay",
                     "train.beta", "train.logprob_chunk_tokens", "aggregate.workers", "eval.questions_per_benchmark",
                     "passk.questions",
                     "probe.composition", "objectives.*.epsilon_high", "objectives.*.epsilon_high_entropy",
                     "objectives.*.kl_loss_coef", "objectives.*.high_entropy_kl_loss_scale_coef",
                     "objectives.*.ppo_kl_coef", "objectives.*.clip_cov_lb", "objectives.*.clip_cov_ub",
                     "objectives.*.gate_coef", "objectives.*.process_scale", "objectives.*.ent_scale",
                     "objectives.*.ent_threshold", "objectives.*.w_raw", "objectives.*.overlong_penalty_factor",
                     "*.seed", "*.*_seed", "passk.seed_base",
                     "toy.warm_start_steps"], ">= 0"),  # 0 warm-start steps: start from the built model
    **dict.fromkeys(["train.top_p", "passk.top_p", "probe.top_p", "train.vllm_gpu_memory_utilization",
                     "eval.milestones"], "in (0, 1]"),
    **dict.fromkeys(["train.warmup_ratio", "toy.early_rate", "toy.slip_rate", "codebook.min_confidence",
                     "failure.peak_min", "failure.end_max", "failure.drop_min", "objectives.*.epsilon",
                     "objectives.*.entropy_quantile", "objectives.*.kl_cov_ratio", "objectives.*.clip_cov_ratio",
                     "objectives.*.overlong_buffer_ratio", "objectives.*.progress_weight"], "in [0, 1]"),
    **dict.fromkeys(["train.lora_dropout"], "in [0, 1)"),
    **dict.fromkeys(["aggregate.q99_quantile", "aggregate.rank_budgets"], "in (0, 1)"),
    "aggregate.ci_level": "in (0, 100)",
    "train.max_steps": "-1 or >= 1",  # TRL's -1: derived from the epochs
}


def _fits_rule(rule: str, v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return True  # the type check speaks for non-numbers
    if rule.startswith("-1 or "):
        return v == -1 or _fits_rule(rule[len("-1 or "):], v)
    if rule.startswith("in "):
        lo, hi = (float(x) for x in rule[4:-1].split(","))
        return (lo <= v if rule[3] == "[" else lo < v) and (v <= hi if rule[-1] == "]" else v < hi)
    op, bound = rule.split()
    return v > float(bound) if op == ">" else v >= float(bound)


def range_rule(key: str) -> str | None:
    """The range rule of `key` (RANGES), or None when its type is all there is to check."""
    if key in RANGES:
        return RANGES[key]
    parts = key.split(".")
    for pattern, rule in RANGES.items():
        pat = pattern.split(".")
        if len(pat) == len(parts) and all(fnmatchcase(k, p) for k, p in zip(parts, pat)):
            return rule
    return None


def out_of_range(key: str, value: Any) -> str:
    """'' when `value` suits `key`, else one line saying what the setting must be."""
    rule = range_rule(key)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    if rule is None or all(_fits_rule(rule, v) for v in items):
        return ""
    each = " (each value)" if isinstance(value, (list, dict)) else ""
    return f"{key} must be {rule}{each}, got {value!r}"
