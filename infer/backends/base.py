"""The backend interface's types: how to decode, what a completion and a score hold, the protocol.

Apart from `infer.backends` so that a backend module imports these without importing the package's
registry, which imports the backends lazily (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class SamplingSpec:
    """How to decode. `greedy` ignores temperature/top_p/seeds; otherwise one seed per prompt."""

    max_new_tokens: int
    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class Completion:
    token_ids: list[int]             # generated tokens, including the terminating EOS when there is one
    finished: bool                   # True iff it ended with EOS (False: cut at the token budget)
    sampler_logprobs: list[float] | None = None  # log-prob of each token under the sampling distribution


@dataclass
class Scored:
    logprob: np.ndarray              # (T,) fp64, chosen-token log-prob, nats (<= 0)
    entropy: np.ndarray              # (T,) fp64, full-vocabulary entropy, nats, in [0, log V]
    logits: np.ndarray | None = None  # (P, V) fp32 logits at requested positions (covariance), else None
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    vocab_size: int                  # V: the model's full logit dimension

    def set_adapter(self, adapter: str | None) -> None:
        """Use the LoRA adapter folder `adapter` over the base (None: the base policy) for later calls."""

    def set_model(self, model: str | None) -> None:
        """Use the full model folder `model` itself, no adapter (None: the base policy) for later calls; the
        tokenizer and the stop set stay the base's."""

    def generate(self, prompts: Sequence[list[int]], spec: SamplingSpec,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per prompt; sampling uses `seeds[i]` for prompt i (deterministic per seed)."""

    def score(self, prompts: Sequence[list[int]], completions: Sequence[list[int]],
              logits_at: Sequence[Sequence[int]] | None = None) -> list[Scored]:
        """Teacher-forced statistics of each completion given its prompt.

        `logits_at[i]` lists completion positions of item i whose full logits are also returned.
        """
