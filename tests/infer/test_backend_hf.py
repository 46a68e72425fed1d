"""The Transformers backend on the tiny model: determinism, seeds, alignment, bounds, adapters."""

import math
import sys

import numpy as np
import pytest
import torch

from infer.backends import SamplingSpec, get_backend

CKPT = "train/tiny/grpo/checkpoints/checkpoint-{}"


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return get_backend("hf", str(tiny_model_dir), batch_size=3, chunk=5)


@pytest.fixture(scope="module")
def prompts(backend):
    texts = ["What is 2+2?", "Find x if 3x = 12.", "Compute 7*8.", "A long one: " + "digits " * 20]
    tok = backend.tokenizer
    return [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                         tokenize=True)["input_ids"]) for t in texts]


def test_greedy_is_deterministic_and_stops_at_budget(backend, prompts):
    spec = SamplingSpec(max_new_tokens=12, greedy=True)
    a, b = backend.generate(prompts, spec), backend.generate(prompts, spec)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for c in a:
        assert 1 <= len(c.token_ids) <= 12
        assert c.finished == (c.token_ids[-1] in backend.eos_ids)
        assert c.finished or len(c.token_ids) == 12


def test_seeds_control_sampling(backend, prompts):
    spec = SamplingSpec(max_new_tokens=10, temperature=1.0)
    a = backend.generate(prompts, spec, seeds=[1, 2, 3, 4])
    b = backend.generate(prompts, spec, seeds=[1, 2, 3, 4])
    c = backend.generate(prompts, spec, seeds=[9, 8, 7, 6])
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    with pytest.raises(ValueError, match="one seed per prompt"):
        backend.generate(prompts, spec)


def test_tiny_top_p_equals_greedy(backend, prompts):
    greedy = backend.generate(prompts, SamplingSpec(8, greedy=True))
    nucleus = backend.generate(prompts, SamplingSpec(8, temperature=0.7, top_p=1e-6), seeds=[5, 6, 7, 8])
    assert [x.token_ids for x in greedy] == [x.token_ids for x in nucleus]


def test_score_matches_full_logits_and_sampler(backend, prompts):
    """Teacher-forced log-probs equal the sampler's (T = 1) and a naive full forward pass."""
    gen = backend.generate(prompts, SamplingSpec(10, temperature=1.0), seeds=[11, 12, 13, 14])
    scored = backend.score(prompts, [g.token_ids for g in gen])
    logv = math.log(backend.vocab_size)
    for p, g, s in zip(prompts, gen, scored):
        np.testing.assert_allclose(s.logprob, g.sampler_logprobs, atol=1e-4)
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = backend.model(input_ids=ids).logits[0].double()          # (P+T, V)
        logp = torch.log_softmax(logits[len(p) - 1:-1], dim=-1)               # rows predicting the completion
        np.testing.assert_allclose(s.logprob, logp[torch.arange(len(g.token_ids)), g.token_ids].numpy(), atol=1e-5)
        np.testing.assert_allclose(s.entropy, -(logp.exp() * logp).sum(-1).numpy(), atol=1e-5)
        assert (s.logprob <= 0).all() and (s.entropy >= 0).all() and (s.entropy <= logv).all()


def test_logits_at_positions(backend, prompts):
    gen = backend.generate(prompts[:2], SamplingSpec(6, greedy=True))
    s = backend.score(prompts[:2], [g.token_ids for g in gen], logits_at=[[0, 3], []])
    assert s[0].logits.shape == (2, backend.vocab_size) and s[1].logits is None
    z = torch.tensor(s[0].logits, dtype=torch.float64)
    np.testing.assert_allclose(torch.log_softmax(z, -1)[0, gen[0].token_ids[0]].item(), s[0].logprob[0], atol=1e-5)


def test_adapters_switch_and_base_returns(backend, prompts, tiny_data_template):
    comp = [g.token_ids for g in backend.generate(prompts, SamplingSpec(8, greedy=True))]
    base = backend.score(prompts, comp)
    backend.set_adapter(str(tiny_data_template / CKPT.format(2)))
    a2 = backend.score(prompts, comp)
    backend.set_adapter(str(tiny_data_template / CKPT.format(4)))
    a4 = backend.score(prompts, comp)
    backend.set_adapter(str(tiny_data_template / CKPT.format(2)))
    a2_again = backend.score(prompts, comp)
    backend.set_adapter(None)
    base_again = backend.score(prompts, comp)
    assert not np.allclose(base[0].logprob, a2[0].logprob, atol=1e-4)
    assert not np.allclose(a2[0].logprob, a4[0].logprob, atol=1e-6)
    np.testing.assert_array_equal(a2[0].logprob, a2_again[0].logprob)
    np.testing.assert_array_equal(base[0].logprob, base_again[0].logprob)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        backend.set_adapter(str(tiny_data_template))


def test_vllm_is_not_imported_and_unknown_backend_names_choices(backend):
    assert "vllm" not in sys.modules
    with pytest.raises(ValueError, match="valid backends: hf, vllm"):
        get_backend("nope", "x")
