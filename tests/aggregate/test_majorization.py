"""The majorization variant of docs/estimators.md#semantic-modes (judge calibration and the partition
audit are tested on rcea.stats and the infer tooling)."""

from __future__ import annotations


from aggregate import majorization


def test_majorization() -> None:
    assert majorization.majorizes([0.8, 0.15, 0.05], [0.5, 0.3, 0.2])
    assert not majorization.majorizes([0.5, 0.3, 0.2], [0.8, 0.15, 0.05])
    assert majorization.majorizes([1.0], [0.5, 0.5])  # support loss
    assert not majorization.majorizes([0.6, 0.1, 0.3], [0.5, 0.45, 0.05])  # crossing partial sums: neither
    assert not majorization.majorizes([0.5, 0.45, 0.05], [0.6, 0.1, 0.3])
