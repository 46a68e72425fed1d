"""One place to seed every random generator a step uses, and to set its CPU thread count."""

from __future__ import annotations

import os
import random
import sys


def seed_everything(seed: int) -> None:
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import numpy as np
        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    if "torch" in sys.modules or _has_torch():
        import torch
        torch.manual_seed(seed)


def _has_torch() -> bool:
    from importlib.util import find_spec
    return find_spec("torch") is not None


def limit_cpu_threads() -> None:
    """One torch CPU thread unless OMP_NUM_THREADS says otherwise, for every role running the tiny model on
    CPU: the model is too small for a second thread to help, and it spins when the cores are shared (warm
    start, 60 steps at load ~6 on 2 cores: 171 CPU-s and 264 s with two threads, 24 CPU-s and 46 s with one;
    inference under load up to 40x slower)."""
    if "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(1)
