"""Supervised warm start of the tiny policy on the toy world (so the base is neither hopeless nor solved).

Full-parameter next-token training on chat-formatted toy problems with solutions in a seeded mix of
strategies (`rcea.toy.sft_examples`), loss on the completion tokens only. Cached on the data volume.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from rcea.progress import Progress


def warm_start(base_dir: Path, out_dir: Path, cfg, progress: bool = True) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rcea import toy
    from rcea.data import chat_messages

    from rcea.seeds import limit_cpu_threads

    limit_cpu_threads()
    torch.manual_seed(cfg["toy.seed"])
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    examples = toy.sft_examples(cfg["toy.warm_start_examples"], cfg["toy.seed"], cfg["toy.slip_rate"],
                                cfg["toy.early_rate"])
    rows = []
    for ex in examples:
        prompt = tok.apply_chat_template(chat_messages(ex["problem"], cfg), add_generation_prompt=True, tokenize=False)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tok(ex["completion"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append((p_ids, c_ids))
    steps, batch = cfg["toy.warm_start_steps"], cfg["toy.warm_start_batch"]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["toy.warm_start_lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(cfg["toy.seed"])
    pad = tok.pad_token_id
    model.train()
    shown = Progress("warm start", steps, stream=sys.stdout) if progress else None
    for step in range(steps):
        idx = torch.randint(len(rows), (batch,), generator=gen).tolist()
        seqs = [rows[i][0] + rows[i][1] for i in idx]
        width = max(map(len, seqs))
        ids = torch.full((batch, width), pad, dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        attn = torch.zeros((batch, width), dtype=torch.long)
        for j, i in enumerate(idx):  # right padding; labels only on the completion
            p, c = rows[i]
            ids[j, : len(p) + len(c)] = torch.tensor(p + c)
            labels[j, len(p): len(p) + len(c)] = torch.tensor(c)
            attn[j, : len(p) + len(c)] = 1
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if shown is not None:
            shown.update(step + 1, f"loss {loss.item():.3f}")
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return out_dir
