"""A scripted tiny model for the stop-token tests: it answers `4 2 <|im_end|>` or `2 <|im_end|>` and then goes
on with a new turn (`<|im_start|> 7 7 7 ...`), as a base model that closes its ChatML turn and invents the next.

It is the tiny model of rcea.tiny (Qwen2.5 base's conventions: EOS and padding <|endoftext|>, <|im_end|> ends a
turn and is no EOS) with weights set by hand so that it is a bigram model: every attention and MLP output
projection is zero, so the last hidden state is the last token's embedding (after the final RMSNorm); each
scripted token's embedding is its own unit vector and the untied output layer scores the token's successor
80 nats above every other token. The first token is `4` (probability 0.62, greedy's choice) or `2` (0.38), so
sampled rows differ in length; after it any decoder follows the script (the next best token is e^-80 as
likely), so only the stop set decides where a completion ends.
"""

from __future__ import annotations

from pathlib import Path

MARGIN = 10.0   # x sqrt(hidden) after the RMSNorm: 80 nats at hidden 64
PROMPT = [{"role": "user", "content": "Compute 4+2."}]


def build_scripted_model(out_dir: Path) -> tuple[Path, dict[str, int]]:
    """Save the scripted model under `out_dir`; returns it and the scripted token ids by name."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rcea.tiny import build_tiny_model

    corpus = [f"Compute {a}+{b}. The answer is \\boxed{{{a + b}}}." for a in range(20) for b in range(20)]
    base = build_tiny_model(Path(out_dir) / "built", layers=1, hidden=64, heads=2, kv_heads=1, intermediate=64,
                            vocab=300, seed=0, corpus=corpus)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    last = tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True)
    last = (last["input_ids"] if hasattr(last, "keys") else last)[-1]
    ids = {"prompt_end": last, "four": tok.convert_tokens_to_ids("4"), "two": tok.convert_tokens_to_ids("2"),
           "im_end": tok.convert_tokens_to_ids("<|im_end|>"), "im_start": tok.convert_tokens_to_ids("<|im_start|>"),
           "seven": tok.convert_tokens_to_ids("7"), "endoftext": tok.convert_tokens_to_ids("<|endoftext|>")}
    order = ["prompt_end", "four", "two", "im_end", "im_start", "seven"]
    assert len({ids[k] for k in order}) == len(order), ids
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    edges = [(a, b, MARGIN) for a, b in zip(order, order[1:] + ["seven"])]
    edges.append(("prompt_end", "two", MARGIN - 0.5 / hidden ** 0.5))   # 0.5 nats below `4`
    head = torch.zeros(vocab, hidden)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = torch.zeros(vocab, hidden)
        for k, name in enumerate(order):
            emb[ids[name], k] = 1.0
        for a, b, margin in edges:
            head[ids[b], order.index(a)] = margin
        model.model.embed_tokens.weight = torch.nn.Parameter(emb)
    model.config.tie_word_embeddings = False
    model.lm_head = torch.nn.Linear(hidden, vocab, bias=False)
    model.lm_head.weight = torch.nn.Parameter(head)
    out = Path(out_dir) / "scripted"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out, ids


def prompt_ids(tokenizer) -> list[int]:
    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
