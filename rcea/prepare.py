"""`python -m rcea.prepare --scale S`: build the tiny model (tiny scale) and draw the training pool.

Writes `data/prepared/<scale>/train.jsonl` (+ manifest); a complete output is reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rcea import layout
from rcea.config import SCALES, ConfigError, load_config


def prepared_pool_path(scale: str) -> Path:
    return layout.prepared_pool(scale)


def prepare(scale: str, overrides=()) -> Path:
    from rcea.data import load_train_records
    from rcea.store import is_complete, run_step
    from rcea.tiny import model_path

    cfg = load_config(scale, overrides=overrides)
    from rcea.config_check import check_library_choices

    check_library_choices(cfg, overrides)   # a study's first stage: an override's value the library refuses
    t0 = time.time()
    model = model_path(cfg)
    print(f"[prepare] policy: {model} ({time.time() - t0:.1f}s)", flush=True)
    out = prepared_pool_path(scale)
    if is_complete(out):
        print(f"[prepare] training pool already prepared: {out}", flush=True)
        return out
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    records = load_train_records(cfg, tokenizer)

    def produce(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")

    run_step(out, produce, cfg=cfg, seeds={"dataset": cfg["data.dataset_seed"]}, rows=len(records))
    print(f"[prepare] {len(records)} training records -> {out} ({time.time() - t0:.1f}s)", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rcea.prepare", description=__doc__)
    ap.add_argument("--scale", default="tiny", help=f"one of {', '.join(SCALES)}")
    ap.add_argument("--override", action="append", default=[], help="section.key=value (repeatable)")
    args = ap.parse_args(argv)
    try:
        prepare(args.scale, args.override)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
