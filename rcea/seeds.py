"""One place to seed every random generator a step uses, and to set its CPU thread count."""

from __future__ import annotations

import os
import random
import sys
from contextlib import contextmanager


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


@contextmanager
def rng_untouched():
    """Run a block (e.g. building a model from its own seed) without moving the process's random generators:
    Python's, NumPy's and torch's CPU generator are as they were before it. A run that builds the tiny model
    in the same process then draws what a run that loads it draws."""
    state = random.getstate()
    np = sys.modules.get("numpy")
    np_state = np.random.get_state() if np is not None else None
    torch = sys.modules.get("torch")
    if torch is None and _has_torch():   # the block may import torch and seed it: keep today's state to restore
        import torch
    torch_state = torch.random.get_rng_state() if torch is not None else None
    try:
        yield
    finally:
        random.setstate(state)
        if np_state is not None:
            np.random.set_state(np_state)
        if torch_state is not None:
            torch.random.set_rng_state(torch_state)


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
