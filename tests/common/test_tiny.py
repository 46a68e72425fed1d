"""The tiny model factory: offline, loadable, and deterministic sampling under a seed."""

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rcea.tiny import build_tiny_model
    corpus = [f"Compute {a}+{b}. The answer is \\boxed{{{a + b}}}." for a in range(30) for b in range(30)]
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=2, hidden=64, heads=2, kv_heads=1,
                            intermediate=128, vocab=300, seed=0, corpus=corpus)


def _sample(path, seed):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    enc = tok.apply_chat_template([{"role": "user", "content": "Compute 3+4."}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    torch.manual_seed(seed)
    out = model.generate(**enc, max_new_tokens=12, do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
    return out[0, enc["input_ids"].shape[1]:].tolist(), tok


def test_same_seed_same_tokens_and_chat_template(tiny):
    a, tok = _sample(tiny, 123)
    b, _ = _sample(tiny, 123)
    c, _ = _sample(tiny, 124)
    assert a == b
    assert a != c  # a 300-token vocabulary makes a 12-token collision vanishingly unlikely
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and 256 < len(tok) <= 300


def test_rebuild_is_bitwise_identical(tiny, tmp_path):
    from safetensors.torch import load_file
    from rcea.tiny import build_tiny_model
    corpus = [f"Compute {a}+{b}. The answer is \\boxed{{{a + b}}}." for a in range(30) for b in range(30)]
    again = build_tiny_model(tmp_path / "again", layers=2, hidden=64, heads=2, kv_heads=1, intermediate=128,
                             vocab=300, seed=0, corpus=corpus)
    w1, w2 = load_file(str(tiny / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
    assert (tiny / "tokenizer.json").read_text() == (again / "tokenizer.json").read_text()


def test_building_the_tiny_model_leaves_the_callers_seeded_generators_alone(tmp_path, monkeypatch):
    """A run seeds everything, then builds the tiny model in the same process (nothing cached yet): it must
    draw what a run that loads the built model draws (the build seeds torch from model.tiny_seed)."""
    import random

    import numpy as np

    from rcea.config import load_config
    from rcea.seeds import seed_everything
    from rcea.tiny import ensure_tiny_model

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    cfg = load_config("tiny", None, ["model.tiny_layers=1", "model.tiny_hidden=32", "model.tiny_intermediate=64"])

    def draws():
        return random.random(), float(np.random.rand()), torch.rand(4).tolist()

    seed_everything(11)
    ensure_tiny_model(cfg)                    # built here
    built = draws()
    seed_everything(11)
    ensure_tiny_model(cfg)                    # loaded: already built
    loaded = draws()
    assert built == loaded
