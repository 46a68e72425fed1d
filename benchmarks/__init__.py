"""Benchmarks and synthetic data, outside the role packages. Each runs in its role's environment:

    .envs/train/bin/python -m benchmarks.train          each objective's step cost vs plain TRL GRPO
    .envs/train/bin/python -m benchmarks.bf16 drift     TRL's in-place LoRA merge drift in bf16 (docs/objectives.md)
    .envs/train/bin/python -m benchmarks.bf16 ratios    importance-ratio error of bf16 log-probs vs an fp32 LM head
    .envs/infer/bin/python -m benchmarks.infer          chunked vs naive entropy; worker utilisation
    .envs/aggregate/bin/python -m benchmarks.aggregate  paper-scale aggregation vs a naive bootstrap loop
    .envs/infer/bin/python -m benchmarks.scheduler      the 3b study's order of work on 8 GPUs (docs/scheduler.md)

`benchmarks.synth` builds synthetic tables in the sample schema (the aggregation tests and benchmark use it).
"""
