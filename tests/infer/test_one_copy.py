"""One weight copy on the GPU (measure.one_weight_copy): the engine sleeps while the scorer, moved to the device
for the call, scores; where the worker decides it (infer.worker.placement); the real HF scorer's move."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infer.backends.one_copy import OneCopy

CKPT = "train/tiny/grpo/checkpoints/checkpoint-{}"


class Card:
    """Counts the copies of the weights on the device: the awake engine's and the scorer's when it is there."""

    def __init__(self):
        self.calls, self.peak = [], 0
        self.engine_awake, self.scorer_on = True, False

    def note(self, what):
        self.calls.append(what)
        self.peak = max(self.peak, self.engine_awake + self.scorer_on)


class Engine:
    def __init__(self, card):
        self.card = card
        card.note("start")

    def sleep(self):
        self.card.engine_awake = False
        self.card.note("sleep")

    def wake_up(self):
        self.card.engine_awake = True
        self.card.note("wake")


class Scorer:
    tokenizer, vocab_size = "tok", 11

    def __init__(self, card, fail=False):
        self.card, self.fail, self.adapter = card, fail, None

    def to(self, device):
        self.card.scorer_on = str(device) != "cpu"
        self.card.note(f"to {device}")

    def set_adapter(self, adapter):
        self.adapter = adapter

    def score(self, prompts, completions, logits_at=None):
        assert self.card.scorer_on and not self.card.engine_awake, "scoring without the device to itself"
        self.card.note("score")
        if self.fail:
            raise RuntimeError("out of memory")
        return [len(c) for c in completions]


def test_each_score_call_sleeps_the_engine_moves_the_scorer_and_wakes_it_after():
    card = Card()
    one = OneCopy(Engine(card), Scorer(card), "cuda:0")
    one.set_adapter("ck-2")                        # the scorer's own methods pass through
    assert one.scorer.adapter == "ck-2" and one.vocab_size == 11
    assert one.score([[1]], [[2, 3]]) == [2]
    assert one.score([[1]], [[4]]) == [1]
    cycle = ["sleep", "to cuda:0", "score", "to cpu", "wake"]
    assert card.calls == ["start"] + cycle + cycle
    assert card.peak == 1                          # never the engine's weights and the scorer's at once
    with pytest.raises(TypeError, match="only scores"):
        one.generate([[1]], None)


def test_a_failing_score_still_sends_the_scorer_back_and_wakes_the_engine():
    card = Card()
    one = OneCopy(Engine(card), Scorer(card, fail=True), "cuda:0")
    with pytest.raises(RuntimeError, match="scoring on cuda:0 failed: RuntimeError: out of memory"):
        one.score([[1]], [[2]])
    assert card.calls[-2:] == ["to cpu", "wake"] and card.engine_awake and not card.scorer_on and card.peak == 1


def test_on_a_gpu_the_scorer_waits_in_host_memory_and_the_engine_can_sleep(built):
    kw, gen, scorer, described = built("cuda:0", overrides=["measure.gpu_memory_utilization=0.75"])
    assert kw["hf"]["device"] == "cpu" and kw["hf"]["dtype"] == "bfloat16" and kw["hf"]["batch_size"] == 8
    assert kw["vllm"]["enable_sleep_mode"] is True and kw["vllm"]["gpu_memory_utilization"] == 0.75
    assert isinstance(scorer, OneCopy) and scorer.engine is gen and scorer.device == "cuda:0"
    assert described["one_weight_copy"] and described["score"] == "Fake"


def test_the_setting_off_keeps_two_copies_on_the_gpu(built):
    kw, gen, scorer, described = built("cuda:1", overrides=["measure.one_weight_copy=false",
                                                            "measure.gpu_memory_utilization=0.5"])
    assert kw["hf"]["device"] == "cuda:1" and kw["hf"]["dtype"] == "auto"
    assert "enable_sleep_mode" not in kw["vllm"] and kw["vllm"]["gpu_memory_utilization"] == 0.5
    assert not isinstance(scorer, OneCopy) and not described["one_weight_copy"]


@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_on_cpu_nothing_sleeps_and_nothing_moves(built, backend):
    kw, gen, scorer, described = built("cpu", backend)
    assert kw["hf"]["device"] == "cpu" and kw["hf"]["dtype"] == "auto" and not isinstance(scorer, OneCopy)
    if backend == "vllm":     # vLLM's CPU engine: eager, no GPU share, never asleep (sleep mode is CUDA-only)
        assert kw["vllm"] == {**kw["vllm"], "enforce_eager": True}
        assert "enable_sleep_mode" not in kw["vllm"] and "gpu_memory_utilization" not in kw["vllm"]
    else:
        assert "vllm" not in kw and gen is scorer


def test_the_hf_scorer_moves_with_its_adapter_and_drops_its_head_copy(tiny_data_template, tiny_model_dir):
    """The real scorer through OneCopy gives the bare scorer's numbers; its move carries the loaded adapter's
    weights (PEFT's layers inside the model) and drops the fp32 head copy ("meta": a second device on CPU)."""
    from infer.backends import get_backend

    be = get_backend("hf", str(tiny_model_dir), batch_size=2, chunk=5)
    be.set_adapter(str(tiny_data_template / CKPT.format(2)))
    prompts, comps = [[1, 2, 3], [4, 5]], [[6, 7, 8], [9]]
    want = be.score(prompts, comps)
    card = Card()
    got = OneCopy(Engine(card), be, "cpu").score(prompts, comps)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a.entropy, b.entropy)
        np.testing.assert_array_equal(a.logprob, b.logprob)
    assert be._w32 is not None
    lora = [n for n, _ in be.model.named_parameters() if "lora_" in n]
    assert lora
    be.to("meta")
    assert be.device == torch.device("meta") and be._w32 is None
    assert all(p.device.type == "meta" for p in be.model.parameters())
