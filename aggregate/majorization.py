"""Mode-collapse variants (the label-free majorization check).

Judge calibration and the partition audit live in rcea.stats (one implementation, used by infer/judge.py
and infer/audit/metrics.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def majorizes(q_new: Sequence[float], q_old: Sequence[float]) -> bool:
    """q_new majorizes q_old (stricter, label-free collapse, docs/estimators.md#semantic-modes): sorted partial sums
    dominate."""
    n = max(len(q_new), len(q_old))
    a = np.sort(np.pad(np.asarray(q_new, float), (0, n - len(q_new))))[::-1].cumsum()
    b = np.sort(np.pad(np.asarray(q_old, float), (0, n - len(q_old))))[::-1].cumsum()
    return bool(np.all(a >= b - 1e-12))
