"""The transient-exit contract of every unit's process (a training run, a batch of measurement jobs).

Exit EXIT_TRANSIENT (or death by a signal) means a retry can cure it; so does a failure whose text matches one of
TRANSIENT (an exception's type name or message): `python -m infer run-job` classifies what it caught with
`is_transient`, and the engines read a failed unit's log with it. Standard library only.
"""

from __future__ import annotations

import re

EXIT_TRANSIENT = 75
TRANSIENT = (r"OutOfMemoryError", r"CUDA out of memory", r"NCCL error", r"ConnectionError",
             r"ConnectionResetError", r"Connection reset by peer", r"TimeoutError", r"BrokenPipeError",
             r"ECC error", r"CUDA error: an illegal memory access")


def is_transient(text: str) -> bool:
    """Whether a failure's text names a transient cause (TRANSIENT)."""
    return any(re.search(p, text) for p in TRANSIENT)
