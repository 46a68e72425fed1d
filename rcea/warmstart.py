"""Supervised warm start of the tiny policy on the toy world (so the base is neither hopeless nor solved).

Full-parameter next-token training on chat-formatted toy problems with solutions in a seeded mix of
strategies (`rcea.toy.sft_examples`), loss on the completion tokens only. Cached on the data volume.

The warm start of the default tiny configuration is shipped in the repository (`rcea/frozen/tiny-toy-warm/`,
1.9 MB, with `shipped.json`: the spec it was built for, each file's sha256 and the base model's
hashes). `rcea.tiny.ensure_policy` copies it, after checking those hashes, instead of training 1,200 steps
on one thread (minutes); any other spec, or a base model that does not hash as recorded, trains as before.
`python -m rcea.warmstart_rebuild --rebuild` (`scripts/run warm-start`) retrains it from the recipe in a temporary
folder and compares: byte-identical, or the largest weight difference within `--tolerance`; `--write`
replaces the shipped files; `--steps 10` stops after the recipe's first 10 steps and compares with their
recorded bytes (tests/train/test_warmstart_shipped.py runs that; the whole rebuild is too slow for the suite).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

from rcea.progress import Progress

SHIPPED_DIR = Path(__file__).resolve().parent / "frozen" / "tiny-toy-warm"
RECORD = "shipped.json"
PREFIX_STEPS = 10   # the short partial rebuild the tests compare with the record
TOLERANCE = 1e-4    # largest absolute weight difference a full rebuild may show on another CPU


def warm_start(base_dir: Path, out_dir: Path, cfg, progress: bool = True, stop_after: int | None = None) -> Path:
    """Train the warm start from `base_dir` into `out_dir`; `stop_after` ends early on the same schedule."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rcea import toy
    from rcea.data import TURN_END, chat_messages

    from rcea.seeds import limit_cpu_threads

    limit_cpu_threads()
    torch.manual_seed(cfg["toy.seed"])
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    examples = toy.sft_examples(cfg["toy.warm_start_examples"], cfg["toy.seed"], cfg["toy.slip_rate"],
                                cfg["toy.early_rate"])
    # A completion is an assistant turn: it ends with the turn's end <|im_end|> (as ChatML, and as the real base
    # models write it), not with the tokenizer's EOS (<|endoftext|>); generators stop there via data.stop_tokens.
    turn_end = tok.convert_tokens_to_ids(TURN_END)
    rows = []
    for ex in examples:
        prompt = tok.apply_chat_template(chat_messages(ex["problem"], cfg), add_generation_prompt=True, tokenize=False)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tok(ex["completion"], add_special_tokens=False)["input_ids"] + [turn_end]
        rows.append((p_ids, c_ids))
    steps, batch = cfg["toy.warm_start_steps"], cfg["toy.warm_start_batch"]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["toy.warm_start_lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(cfg["toy.seed"])
    pad = tok.pad_token_id
    model.train()
    shown = Progress("warm start", steps, stream=sys.stdout) if progress else None
    for step in range(steps if stop_after is None else min(steps, stop_after)):
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


# ---------------------------------------------------------------------------------------------
# the shipped warm start

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def warm_spec(cfg, base_dir: Path) -> dict:
    """What a warm start depends on: its settings, the instruction and the base model's build spec."""
    spec = {k: cfg[f"toy.{k}"] for k in ("warm_start_steps", "warm_start_batch", "warm_start_lr",
                                          "warm_start_examples", "slip_rate", "early_rate", "seed")}
    spec["instruction"] = cfg["data.instruction"]
    spec["base"] = json.loads((base_dir / "build.json").read_text())
    return spec


def _base_hashes(base_dir: Path) -> dict:
    return {name: sha256(base_dir / name) for name in ("model.safetensors", "tokenizer.json")}


def shipped_for(spec: dict, base_dir: Path, shipped: Path = SHIPPED_DIR) -> Path | None:
    """The shipped warm start if it was built for `spec` from a base that hashes like `base_dir`, else None.

    A shipped file whose hash does not match its record is an error (a damaged checkout), not a fallback."""
    record_path = shipped / RECORD
    if not record_path.exists():
        return None
    record = json.loads(record_path.read_text())
    if record["spec"] != spec or record["base_sha256"] != _base_hashes(base_dir):
        return None
    for name, digest in record["files"].items():
        if not (shipped / name).exists() or sha256(shipped / name) != digest:
            raise RuntimeError(f"{shipped / name} does not match its sha256 in {record_path}: restore it "
                               "(git checkout -- rcea/frozen) or rebuild it (scripts/run warm-start --write)")
    return shipped


def copy_shipped(shipped: Path, out_dir: Path) -> Path:
    record = json.loads((shipped / RECORD).read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in record["files"]:
        shutil.copyfile(shipped / name, out_dir / name)
    print(f"[warm start] the shipped one ({record['spec']['warm_start_steps']} steps, sha256 checked): "
          f"{shipped.name}; `scripts/run warm-start` rebuilds and compares it", flush=True)
    return out_dir


def fingerprint(model_dir: Path) -> dict[str, list[float]]:
    """Per tensor: sum and sum of absolute values (float64), a compact, CPU-portable summary."""
    from safetensors.numpy import load_file

    tensors = load_file(str(model_dir / "model.safetensors"))
    return {k: [float(v.astype("float64").sum()), float(abs(v.astype("float64")).sum())]
            for k, v in sorted(tensors.items())}


def max_abs_diff(a: Path, b: Path) -> float:
    """Largest absolute difference between the weights of two saved models (inf if they differ in shape)."""
    from safetensors.numpy import load_file

    ta, tb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    if ta.keys() != tb.keys() or any(ta[k].shape != tb[k].shape for k in ta):
        return math.inf
    return max(float(abs(ta[k].astype("float64") - tb[k].astype("float64")).max()) for k in ta)


def fingerprints_close(a: dict, b: dict, rtol: float = 1e-4) -> bool:
    return a.keys() == b.keys() and all(
        abs(x - y) <= rtol * max(1.0, abs(y)) for k in a for x, y in zip(a[k], b[k]))
