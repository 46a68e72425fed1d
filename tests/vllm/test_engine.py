"""The project's vLLM backend (infer/backends/vllm_backend.py, vllm_args.py) on the real vLLM 0.23.0 engine.

The session's one engine (conftest: bf16, LoRA on, processed log-probs, engine core in-process, the worker's
CPU options).
Against independent numbers: the Transformers backend's fp32 teacher-forced scoring of the same tokens
under the same adapter, and the engine's own earlier answers.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from infer.backends.base import SamplingSpec
from tests.vllm.conftest import LORA_RANK, prompts

# bf16 against fp32: vLLM runs the whole model in bf16, the scorer in fp32. bf16 keeps 8 significant bits
# (unit roundoff 2**-8 = 0.004), so every stored weight and activation is off by up to 0.4 %; through 3 layers
# with LoRA on all seven projections a logit collects a few hundred such roundings, and a log-prob (a logit
# minus a log-sum-exp) moves by about 0.01 nats on average, more on the rare token whose logits are large.
# Measured here over 128 sampled tokens: T = 1 mean 0.007, max 0.027; T = 0.7 mean 0.009, max 0.032 (an
# earlier run with torch.compile: max 0.069). Tolerances: mean 0.03, max 0.15, both divided by T (the sampler
# divides logits, and their errors, by T). The control, the same tokens scored under the other checkpoint's
# adapter, differs by 0.23-0.34 on average: a wrong adapter fails the mean bound 7x over.
TOL_MAX, TOL_MEAN = 0.15, 0.03
SEEDS = [11, 12, 13, 14]


@pytest.fixture(scope="module")
def scorer(tiny_model):
    from infer.backends.hf import HFBackend

    return HFBackend(str(tiny_model), dtype="float32")


def _tokens(engine, adapter, ids, spec, seeds=None):
    engine.set_adapter(adapter)
    return engine.generate(ids, spec, seeds)


def test_engine_runs_with_the_documented_reproducibility_settings(engine):
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and os.environ["VLLM_BATCH_INVARIANT"] == "1"
    core = type(engine.llm.llm_engine.engine_core).__name__
    assert core == "InprocClient", f"engine core runs as {core}, not in-process"
    cfg = engine.llm.llm_engine.vllm_config
    assert cfg.model_config.dtype.__str__() == "torch.bfloat16" and cfg.lora_config.max_lora_rank == LORA_RANK
    assert cfg.model_config.logprobs_mode == "processed_logprobs"


def test_two_checkpoints_generate_differently_under_distinct_adapter_ids(engine, checkpoints):
    ids = prompts(engine.tokenizer)
    greedy = SamplingSpec(max_new_tokens=12, greedy=True)
    first, second = checkpoints
    out, requests = {}, {}
    for name, adapter in (("a", first), ("b", second), ("a-again", first), ("base", None)):
        out[name] = [c.token_ids for c in _tokens(engine, adapter, ids, greedy)]
        requests[name] = engine._lora
    assert requests["a"].lora_int_id != requests["b"].lora_int_id
    assert requests["a"].lora_name != requests["b"].lora_name
    assert requests["a-again"].lora_int_id == requests["a"].lora_int_id   # stable: the engine's cache is reused
    assert requests["base"] is None
    assert out["a"] != out["b"], "two checkpoints gave the same greedy tokens: one adapter's weights served twice?"
    assert out["a-again"] == out["a"], "checkpoint A changed its answer after B was loaded (adapter id collision)"
    assert out["a"] != out["base"] and out["b"] != out["base"]
    assert all(len(t) >= 1 for t in out["a"] + out["b"])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_processed_logprobs_of_sampled_tokens_match_the_hf_scorer(engine, scorer, checkpoints, temperature):
    """`processed_logprobs` = log-probs of the distribution sampled from: log_softmax(logits / T) of the same
    adapter's model. The scorer computes that from its fp32 logits at every sampled position."""
    import torch

    ids = prompts(engine.tokenizer)
    spec = SamplingSpec(max_new_tokens=16, temperature=temperature)
    diffs, control = [], []
    for adapter, other in (checkpoints, checkpoints[::-1]):
        comps = _tokens(engine, adapter, ids, spec, SEEDS)
        toks = [c.token_ids for c in comps]
        for c in comps:
            assert c.sampler_logprobs is not None and len(c.sampler_logprobs) == len(c.token_ids) > 0
            assert all(lp <= 0.0 for lp in c.sampler_logprobs)
        for scorer_adapter, sink in ((adapter, diffs), (other, control)):
            scorer.set_adapter(str(scorer_adapter))
            scored = scorer.score(ids, toks, logits_at=[list(range(len(t))) for t in toks])
            for c, s, t in zip(comps, scored, toks):
                ref = torch.log_softmax(torch.from_numpy(s.logits).double() / temperature, dim=-1)
                ref = ref[torch.arange(len(t)), torch.tensor(t)].numpy()
                if temperature == 1.0:   # the scorer's own chosen-token log-probs are the same numbers
                    np.testing.assert_allclose(ref, s.logprob, atol=1e-5)
                sink.extend(np.abs(np.asarray(c.sampler_logprobs) - ref))
    diffs, control = np.asarray(diffs), np.asarray(control)
    print(f"\nT={temperature}: |vLLM bf16 - HF fp32| over {diffs.size} tokens: max {diffs.max():.4f}, "
          f"mean {diffs.mean():.4f}; against the other adapter: mean {control.mean():.3f}")
    assert diffs.max() <= TOL_MAX / temperature and diffs.mean() <= TOL_MEAN / temperature
    assert control.mean() > 4 * TOL_MEAN / temperature, "the other adapter scores as well: adapters indistinguishable"


def test_seeded_repeat_is_identical_whatever_the_batch(engine, checkpoints):
    ids = prompts(engine.tokenizer)
    spec = SamplingSpec(max_new_tokens=16, temperature=1.0)
    adapter = checkpoints[0]
    a = _tokens(engine, adapter, ids, spec, SEEDS)
    engine.llm.reset_prefix_cache()                       # as a fresh process would start
    b = _tokens(engine, adapter, ids[::-1], spec, SEEDS[::-1])
    c = _tokens(engine, adapter, ids[1:2], spec, SEEDS[1:2])
    assert [x.token_ids for x in a] == [x.token_ids for x in b[::-1]]
    assert [x.sampler_logprobs for x in a] == [x.sampler_logprobs for x in b[::-1]]
    assert c[0].token_ids == a[1].token_ids and c[0].sampler_logprobs == a[1].sampler_logprobs
    other = _tokens(engine, adapter, ids, spec, [s + 100 for s in SEEDS])
    assert [x.token_ids for x in other] != [x.token_ids for x in a], "the seed does not reach the sampler"
    assert not any(math.isnan(v) for x in a for v in x.sampler_logprobs)
