"""The tiny-model factory: a Qwen2-architecture causal LM and a byte-level BPE tokenizer, built offline.

The `tiny` scale uses it in every role. The tokenizer is trained on the offline problem texts; the model
is randomly initialised from `model.tiny_seed`. Both are saved in the Hugging Face format, so
`AutoModelForCausalLM` / `AutoTokenizer` load them in the training and the inference environments.
"""

from __future__ import annotations

import json
from pathlib import Path

from rcea import layout
from rcea.data import TURN_END
from rcea.jsonl import read_jsonl
from rcea.paths import mathdata_dir

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
# Qwen2.5 base's conventions, which the tiny model mirrors: the tokenizer's and the generation config's EOS,
# and the padding token, are <|endoftext|>; the ChatML turn ends with <|im_end|>, which is NOT an EOS, so a
# completion stops there only through the stop set (data.stop_tokens), as at the real scales.
EOS_TOKEN = "<|endoftext|>"
CONVENTION = "qwen2.5-base"  # part of the build spec: a model built with another convention is rebuilt


def _corpus(limit: int = 4000) -> list[str]:
    texts: list[str] = []
    for path in sorted(mathdata_dir().glob("*/*.jsonl")):
        for rec in read_jsonl(path, required=("problem", "answer")):
            texts.append(rec["problem"] + " \\boxed{" + str(rec["answer"]) + "}")
    texts.sort()
    return texts[:limit]


def build_tokenizer(vocab_size: int, corpus: list[str] | None = None):
    """A byte-level BPE with Qwen-style special tokens and chat template; EOS and padding are `<|endoftext|>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits are single tokens, so copying and adding numbers is a per-digit pattern a tiny model can learn.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus if corpus is not None else _corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
        additional_special_tokens=["<|im_start|>", TURN_END], chat_template=CHAT_TEMPLATE,
        model_input_names=["input_ids", "attention_mask"], padding_side="left",
    )


def build_tiny_model(out_dir: str | Path, layers: int = 3, hidden: int = 128, heads: int = 4, kv_heads: int = 2,
                     intermediate: int = 256, vocab: int = 512, seed: int = 0, corpus: list[str] | None = None) -> Path:
    """Build and save the tiny policy; returns `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = build_tokenizer(vocab, corpus)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,  # one EOS, as Qwen2.5 base
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def tiny_model_dir(cfg=None) -> Path:
    world = cfg["data.world"] if cfg is not None else "math"
    return layout.models_dir("tiny" if world == "math" else f"tiny-{world}")


def _build_once(out: Path, spec: dict, build) -> Path:
    """Build into a temporary folder, then rename; reuse a complete build with the same spec."""
    import shutil

    from rcea.seeds import rng_untouched
    from rcea.store import atomic_write_json, is_complete, write_manifest

    marker = out / "build.json"
    if is_complete(marker) and json.loads(marker.read_text()) == spec:
        return out
    tmp = out.with_name(out.name + ".building")
    for stale in (out, tmp):
        if stale.exists():
            shutil.rmtree(stale)
    with rng_untouched():   # the build seeds torch itself: a caller's seeded generators must not notice
        build(tmp)
    atomic_write_json(tmp / "build.json", spec)
    tmp.rename(out)
    write_manifest(marker, seeds={"model": spec.get("seed")})
    return out


TINY_SHAPE = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "seed")


def tiny_spec(cfg) -> dict:
    """What the untrained tiny model is built from (its build.json): shape, world and token conventions."""
    spec = {k: cfg[f"model.tiny_{k}"] for k in TINY_SHAPE}
    return {**spec, "world": cfg["data.world"], "convention": CONVENTION}


def tiny_corpus(cfg) -> list[str] | None:
    """The tokenizer's training texts: the toy world's own texts, or (None) the offline problem texts."""
    if cfg["data.world"] != "toy":
        return None
    from rcea import toy
    return toy.corpus(cfg["toy.seed"]) + [cfg["data.instruction"]] * 10


def build_tiny_base(cfg, out_dir: str | Path) -> Path:
    """Build the untrained tiny model of this configuration at `out_dir`: `tiny_spec`'s shape, its tokenizer
    fitted to `tiny_corpus` (no build.json: the callers record the spec)."""
    spec = tiny_spec(cfg)
    return build_tiny_model(out_dir, corpus=tiny_corpus(cfg), **{k: spec[k] for k in TINY_SHAPE})


def ensure_tiny_model(cfg) -> Path:
    """The untrained tiny model of this configuration (tokenizer fitted to its world), built once."""
    return _build_once(tiny_model_dir(cfg), tiny_spec(cfg), lambda tmp: build_tiny_base(cfg, tmp))


def ensure_policy(cfg) -> Path:
    """The tiny base policy: in the toy world, the warm-started model (built once, cached; the default
    configuration's is copied from the repository, see rcea.warmstart)."""
    base = ensure_tiny_model(cfg)
    if cfg["data.world"] != "toy" or cfg["toy.warm_start_steps"] == 0:
        return base
    from rcea.warmstart import copy_shipped, shipped_for, warm_spec, warm_start

    spec = warm_spec(cfg, base)

    def build(tmp: Path) -> Path:
        # Only when it is built: the repository's copy of this exact warm start (hashed), if there is one.
        shipped = shipped_for(spec, base)
        return copy_shipped(shipped, tmp) if shipped else warm_start(base, tmp, cfg)

    return _build_once(base.with_name(base.name + "-warm"), spec, build)


def model_path(cfg) -> str:
    """What every role passes to `from_pretrained` as the base policy: the local tiny policy, or a local
    snapshot of the hub model at `model.revision` (rcea.hub; its commit goes into every manifest)."""
    from rcea.launch import tiny_model

    if tiny_model(cfg):
        return str(ensure_policy(cfg))
    from rcea.hub import pinned_model

    return pinned_model(cfg["model.name"], cfg["model.revision"])
