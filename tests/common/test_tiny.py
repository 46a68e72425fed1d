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
    assert 256 < len(tok) <= 300


def test_token_conventions_are_qwen25_bases(tiny):
    """As Qwen2.5 base: EOS and padding are <|endoftext|> (tokenizer, model config and generation config, one
    id); the ChatML turn ends with <|im_end|>, a special token that is not an EOS (a generator stops there only
    through data.stop_tokens)."""
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|endoftext|>", "<|endoftext|>", None)
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    assert ids == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}   # unchanged by the convention
    assert tok.encode("a<|im_end|>b", add_special_tokens=False)[1] == 2     # one special token
    assert tok.decode([5, 2, 0], skip_special_tokens=True) == tok.decode([5])
    gen = json.loads((tiny / "generation_config.json").read_text())
    conf = json.loads((tiny / "config.json").read_text())
    assert gen["eos_token_id"] == 0 and gen["pad_token_id"] == 0   # a single EOS, not [<|im_end|>, ...]
    assert conf["eos_token_id"] == 0 and conf["pad_token_id"] == 0
    turn = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}],
                                   tokenize=False)
    assert turn.endswith("<|im_start|>assistant\n4<|im_end|>\n")


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
