"""Issue 40 item 2: tables of an outside run measured under other settings than the study's (a --quick demo, then
`invoke measure-run` on main) are refused by the aggregation with the one command that makes them agree: that
run's `invoke measure-run` again, which now measures under the data folder's settings."""
from __future__ import annotations

import json

import pytest

from aggregate import made_with
from rcea.config import load_config


def _part(data, name, overrides):
    cfg = load_config("tiny", None, overrides)
    part = data / "infer" / "tiny" / "tables" / "probe" / f"{name}.parquet"
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_bytes(b"")
    part.with_name(part.name + ".manifest.json").write_text(json.dumps({
        "config_hash": cfg.hash(), "settings": {k: v["value"] for k, v in cfg.to_dict()["settings"].items()}}))
    return part, cfg.hash()


def test_the_refusal_names_the_outside_runs_measure_run(tmp_path, monkeypatch):
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    parts = [_part(tmp_path, f"probe-grpo-{s}", ["probe.k=4", "probe.n_questions=12"])[0] for s in (2, 4)]
    mine, theirs = _part(tmp_path, "probe-my-grpo-2", [])
    run = tmp_path / "train" / "tiny" / "my-grpo"
    run.mkdir(parents=True)
    (run / "outside.json").write_text(json.dumps({"config_hash": theirs, "source": "/runs/my-grpo",
                                                  "base_given": "/models/base", "base_differs": False}))
    with pytest.raises(made_with.Mismatch) as err:
        made_with.resolve([*parts, mine], "tiny", {}, None)
    msg = str(err.value)
    assert "\n" not in msg and "made under 2 configurations" in msg
    assert ("measure the outside run again under the study's settings: `invoke measure-run --path /runs/my-grpo "
            "--name my-grpo --scale tiny --base /models/base`, then aggregate") in msg
    (run / "outside.json").unlink()   # no outside run to name: the advice as before
    with pytest.raises(made_with.Mismatch, match="remove the stale parts"):
        made_with.resolve([*parts, mine], "tiny", {}, None)
