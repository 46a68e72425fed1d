"""LoRA ranks the pinned vLLM versions serve, checked when a configuration is loaded.

vLLM allocates LoRA buffers for a fixed `max_lora_rank`, which must be one of a fixed set (read from the
released sources: vLLM 0.23.0, the inference image, adds rank 1 to vLLM 0.11.0's set). Adapters of a
smaller rank are padded up to it, so a rank outside the set is served at the next accepted one; a rank
above the largest cannot be served at all and must fail before any training starts.
"""

from __future__ import annotations

VLLM_LORA_RANKS = {
    "0.23": (1, 8, 16, 32, 64, 128, 256, 320, 512),   # infer image (vllm 0.23.0)
    "0.11": (8, 16, 32, 64, 128, 256, 320, 512),      # train image (vllm 0.11.0)
}


def max_lora_rank(rank, version: str = "0.23") -> int:
    """The engine's `max_lora_rank` for adapters of rank `rank`: the smallest accepted value >= rank.
    Raises ValueError naming the valid ranks."""
    accepted = VLLM_LORA_RANKS[version]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"train.lora_rank must be a positive integer, got {rank!r}")
    for r in accepted:
        if r >= rank:
            return r
    raise ValueError(f"train.lora_rank = {rank} is above the largest LoRA rank vLLM {version} serves "
                     f"({accepted[-1]}); choose one of {', '.join(map(str, accepted))}")
