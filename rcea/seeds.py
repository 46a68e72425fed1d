"""One place to seed every random generator a step uses."""

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
