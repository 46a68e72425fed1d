"""Fault check: kill -9 a tiny training run at random moments, resume it each time, and compare.

    .envs/train/bin/python scripts/faults/train_kills.py [--kills 3] [--steps 6] [--seed 0]

Trains GRPO on the tiny model (untrained base, synthetic reward: seconds per step) once straight
through and once with `--kills` SIGKILLs (each at a random moment after a new checkpoint appeared,
often mid-step or mid-save), resuming with --resume after each. Prints whether every checkpoint's
adapter is byte-identical between the two runs, and whether the TensorBoard events hold each step once, with
every field of steps.jsonl under the tag the trainer writes (train.monitor.tensorboard_tag: `train/reward`, ...)
at the same steps with the same values.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def command(out: Path, steps: int, resume: bool) -> list[str]:
    over = ["train.max_completion_tokens=8", "train.warmup_ratio=0.0", "data.draw_size=32",
            f"train.max_steps={steps}", "train.save_steps=1", "toy.warm_start_steps=0"]
    return [sys.executable, "-m", "train", "--method", "grpo", "--scale", "tiny", "--reward", "synthetic",
            "--output", str(out), *(["--resume"] if resume else []), *[a for o in over for a in ("--override", o)]]


def complete(out: Path) -> list[Path]:
    from rcea.layout import RunFolder
    from train.run import complete_checkpoints   # rcea.store.checkpoint_complete: the one definition

    return complete_checkpoints(RunFolder(out).checkpoints)


def tb_steps(tb: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(tb.rglob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                val = v.simple_value if v.HasField("simple_value") else float(tensor_util.make_ndarray(v.tensor))
                found.setdefault(v.tag, []).append((ev.step, val))
    return found


def tensorboard_check(rows: list[dict], tb: dict[str, list[tuple[int, float]]]) -> tuple[bool, bool, list[str]]:
    """Compare the TensorBoard mirror with steps.jsonl the way the trainer writes it (train.monitor: each numeric
    field of a row under `tensorboard_tag(field)`): (each step once per tag, every field's steps and values the
    same as steps.jsonl, the fields whose tag is missing or differs)."""
    import math

    from train.monitor import tensorboard_tag

    once = all(len({s for s, _ in pts}) == len(pts) for pts in tb.values())
    mirrored = [(r["step"], {k: float(v) for k, v in r.items()   # what the trainer mirrors of each row
                             if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}) for r in rows]
    fields = sorted({k for _, scalars in mirrored for k in scalars})
    wrong = []
    for k in fields:
        want = [(step, scalars[k]) for step, scalars in mirrored if k in scalars]
        got = sorted(tb.get(tensorboard_tag(k), []))
        if len(got) != len(want) or any(a[0] != b[0] or not math.isclose(a[1], b[1], rel_tol=1e-6, abs_tol=1e-9)
                                         for a, b in zip(got, want)):
            wrong.append(tensorboard_tag(k))
    return once, bool(fields) and not wrong, wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    from train.monitor import read_steps

    with tempfile.TemporaryDirectory() as tmp:
        straight, killed = Path(tmp) / "straight", Path(tmp) / "killed"
        subprocess.run(command(straight, args.steps, False), env=env, cwd=ROOT, check=True, capture_output=True)
        kills = 0
        while kills < args.kills and len(complete(killed)) < args.steps:
            before = len(complete(killed))
            proc = subprocess.Popen(command(killed, args.steps, resume=kills > 0), env=env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while proc.poll() is None and len(complete(killed)) <= before:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                print(f"kill {kills}: {len(complete(killed))} complete checkpoint(s) at the kill", flush=True)
        subprocess.run(command(killed, args.steps, True), env=env, cwd=ROOT, check=True, capture_output=True)
        a, b = complete(straight), complete(killed)
        same = [x.name for x, y in zip(a, b) if (x / "adapter_model.safetensors").read_bytes()
                == (y / "adapter_model.safetensors").read_bytes()]
        print(f"checkpoints byte-identical: {len(same)} of {len(a)} ({kills} kills)")
        rows = read_steps(killed / "steps.jsonl")
        tb = tb_steps(killed / "tb")
        once, agree, wrong = tensorboard_check(rows, tb)
        print(f"steps.jsonl steps: {[r['step'] for r in rows]}; TensorBoard: each step once {once}, "
              f"every field's steps and values as in steps.jsonl {agree}"
              + (f" (differ or missing: {', '.join(wrong[:6])})" if wrong else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
