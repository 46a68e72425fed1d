"""One copy of the weights on the GPU: the HF scorer beside a vLLM engine that sleeps while it scores.

A measurement worker needs two models of the same weights: the vLLM engine generates, the HF scorer gives the
full-vocabulary entropies vLLM cannot. Both on one GPU hold the weights twice (7B: 2 x 14.2 GiB), more than a
32 GB card can spare next to the engine's KV cache and the scoring pass. With `measure.one_weight_copy`
(infer.worker decides where it applies) the scorer's model lives in host memory and each `score` call runs

    engine.sleep()  ->  scorer.to(device)  ->  scorer.score(...)  ->  scorer.to("cpu")  ->  engine.wake_up()

so the GPU holds either the engine (weights + KV cache) or the scorer (weights + its pass), never both. The
engine wakes even when scoring fails, so the next job finds it ready. Everything else (adapters, full model
folders, the tokenizer, the vocabulary) is the scorer's own: adapters load onto the model in host memory and
travel with it.
"""

from __future__ import annotations

from typing import Sequence

from infer.backends.base import Scored


class OneCopy:
    def __init__(self, engine, scorer, device: str):
        self.engine, self.scorer, self.device = engine, scorer, device

    def __getattr__(self, name):
        if name in ("engine", "scorer", "device"):
            raise AttributeError(name)
        return getattr(self.scorer, name)   # tokenizer, vocab_size, eos_ids, set_adapter, set_model, ...

    def score(self, prompts: Sequence[list[int]], completions: Sequence[list[int]],
              logits_at: Sequence[Sequence[int]] | None = None) -> list[Scored]:
        self.engine.sleep()
        error = None
        try:
            try:
                self.scorer.to(self.device)   # inside: a move that fails half-way is moved back too
                return self.scorer.score(prompts, completions, logits_at)
            except Exception as exc:   # its traceback's frames hold the pass's GPU tensors: let them go before the
                error = RuntimeError(f"scoring on {self.device} failed: {type(exc).__name__}: {exc}")  # engine wakes
            finally:
                self.scorer.to("cpu")
        finally:
            self.engine.wake_up()
        raise error

    def generate(self, *args, **kwargs):
        raise TypeError("the one-copy scorer only scores; generate with the engine")
