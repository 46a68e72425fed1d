"""`python -m train --method <m> --scale <s> [--resume] [--max-steps N] [--output DIR] [--override k=v ...]`"""

from __future__ import annotations

import argparse
import sys

from rcea.config import METHODS, SCALES, ConfigError, check_choice, load_config


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m train", description="Train a LoRA policy with one RLVR objective.")
    ap.add_argument("--method", required=True, help=f"objective: {', '.join(METHODS)}")
    ap.add_argument("--scale", required=True, help=f"scale: {', '.join(SCALES)} (3b/7b: GPU + train container)")
    ap.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    ap.add_argument("--max-steps", type=int, default=0, help="optimizer steps (0: the config's train.max_steps)")
    ap.add_argument("--output", default=None, help="run folder (default data/train/<scale>/<method>/)")
    ap.add_argument("--override", action="append", default=[], help="section.key=value (repeatable)")
    ap.add_argument("--reward", default="verifier", help="verifier (default) | synthetic (tiny smoke test only)")
    return ap


def main(argv=None) -> int:
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
