"""A training run made with other settings is never "already complete" (issue 28 item 1).

`scripts/run demo` after `scripts/run demo --quick` on one data folder reported the quick runs as the full demo
(the quick settings travel in RCEA_OVERRIDES, outside the unit's key, and TrainUnit.done() saw summary.json).
Here the quick demo's grpo run (session fixture) meets the training unit of other settings, as the demo's train
stage runs it (orchestrate.engines, local engine): the unit is not skipped, trains its own run, and the quick
run is kept aside intact, coming back (complete, reused) when the quick settings are asked for again.
"""
from __future__ import annotations

import json
import shutil

from orchestrate.ops.study import QUICK_OVERRIDES


def test_a_run_of_other_settings_trains_instead_of_reusing_the_quick_run(demo, tmp_path, monkeypatch):
    from orchestrate.engines import execute
    from orchestrate.units import TrainUnit
    from rcea import layout

    data = tmp_path / "data"
    shutil.copytree(demo[0] / "models", data / "models")
    shutil.copytree(layout.run_dir("tiny", "grpo", demo[0]), layout.run_dir("tiny", "grpo", data))
    monkeypatch.setenv("RCEA_DATA", str(data))
    monkeypatch.setenv("RCEA_OVERRIDES", ";".join(QUICK_OVERRIDES))
    quick = TrainUnit("grpo", "tiny")
    assert quick.done(data)   # the quick demo's own run: complete under its settings
    quick_summary = json.loads((quick.output(data) / "summary.json").read_text())

    monkeypatch.setenv("RCEA_OVERRIDES", ";".join([*QUICK_OVERRIDES, "train.max_steps=6"]))   # other settings
    other = TrainUnit("grpo", "tiny")
    assert other.key != quick.key and not other.done(data)
    report = execute([other], "local", data_root=data, store_path=tmp_path / "state.sqlite")
    assert report.done == [other.key] and not report.skipped and not report.failed
    summary = json.loads((other.output(data) / "summary.json").read_text())
    assert summary["global_step"] == 6 and summary["config_hash"] == other.config_hash != quick_summary["config_hash"]
    kept = layout.superseded_run_dir("tiny", "grpo", quick.config_hash, data)
    assert json.loads((kept / "summary.json").read_text()) == quick_summary   # the quick run, kept whole

    monkeypatch.setenv("RCEA_OVERRIDES", ";".join(QUICK_OVERRIDES))
    again = execute([TrainUnit("grpo", "tiny")], "local", data_root=data, store_path=tmp_path / "state.sqlite")
    assert again.done == [quick.key] and not again.failed   # ran: the quick run came back, reused as it was
    assert json.loads((quick.output(data) / "summary.json").read_text()) == quick_summary
