"""`python -m train --method <m> --scale <s> [--resume] [--max-steps N] [--output DIR] [--override k=v ...]`"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rcea.config import METHODS, SCALES, ConfigError, check_choice, load_config


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m train", description="Train a LoRA policy with one RLVR method.")
    ap.add_argument("--method", required=True, help=f"RLVR method: {', '.join(METHODS)}")
    ap.add_argument("--scale", required=True, help=f"scale: {', '.join(SCALES)} (3b/7b: GPU + train container)")
    ap.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    ap.add_argument("--max-steps", type=int, default=0, help="optimizer steps (0: the config's train.max_steps)")
    ap.add_argument("--output", default=None, help="run folder (default data/train/<scale>/<method>/)")
    ap.add_argument("--override", action="append", default=[], help="section.key=value (repeatable)")
    ap.add_argument("--reward", default="verifier", help="verifier (default) | synthetic (tiny smoke test only)")
    return ap


def main(argv=None) -> int:
    """The command line; a full disk (rcea.diskfull) ends in one line naming the folder, the space left and a
    checkpoint's size (the space the next one needs); the rerun resumes from the newest complete checkpoint."""
    from rcea.diskfull import guard

    return guard(lambda: _main(argv), needed=lambda: _checkpoint_need(argv))


def _checkpoint_need(argv) -> str:
    from rcea import layout
    from rcea.diskfull import size
    from rcea.store import checkpoint_complete

    try:
        args = parser().parse_known_args(argv)[0]
    except SystemExit:
        return ""
    run = layout.RunFolder(Path(args.output) if args.output else layout.run_dir(args.scale, args.method))
    done = sorted((d for d in run.checkpoints.glob("checkpoint-*") if checkpoint_complete(d)),
                  key=lambda d: int(d.name.split("-")[-1]) if d.name.split("-")[-1].isdigit() else -1)
    if not done:
        return ""
    return f"a checkpoint of this run takes {size(sum(p.stat().st_size for p in done[-1].rglob('*') if p.is_file()))}"


def _main(argv=None) -> int:
    args = parser().parse_args(argv)
    from rcea.store import DamagedRun
    from train.run import TrainSetupError, run_training

    try:
        check_choice("method", args.method, METHODS)
        check_choice("scale", args.scale, SCALES)
        overrides = list(args.override) + ([f"train.max_steps={args.max_steps}"] if args.max_steps else [])
        cfg = load_config(args.scale, args.method, overrides)
        from rcea.config_check import check_library_choices

        check_library_choices(cfg)   # e.g. train.lr_scheduler against transformers' own list, before any output
        from rcea.launch import tiny_model

        if args.reward != "verifier" and not tiny_model(cfg):
            raise TrainSetupError("--reward synthetic is a smoke-test reward for the tiny model (--scale tiny only)")
        run_training(cfg, args.output, resume=args.resume, reward=args.reward)
    except (ConfigError, TrainSetupError, DamagedRun) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
