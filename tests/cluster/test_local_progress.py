"""The local engine's progress line counts what really runs (issue 31: "N/7 done, 1 running" while two ran)."""
from __future__ import annotations

import re

from orchestrate.engines import execute
from tests.cluster.standin import StandIn


def test_running_counts_the_units_side_by_side(tmp_path, capsys):
    """Five units, two slots: every line printed while units are left to start says 2 running (a finished
    unit's slot is filled before the line is shown), and the counts only grow."""
    units = [StandIn(f"u{i}", role="train", seconds=0.5 + 0.3 * (i % 2)) for i in range(5)]
    report = execute(units, "local", data_root=tmp_path, store_path=tmp_path / "state.sqlite",
                     parallel={"train": 2})
    assert len(report.done) == 5 and not report.failed
    lines = re.findall(r"train (\d)/5 done, (\d) running", capsys.readouterr().out)
    counts = [(int(d), int(r)) for d, r in lines]
    assert counts[0] == (0, 2) and counts[-1] == (5, 0), counts
    for done, running in counts:
        assert running == min(2, 5 - done), counts   # two while at least two are left, then what is left
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)
