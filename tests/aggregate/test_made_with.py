"""The aggregation uses the settings its tables were made with (issue 31: `scripts/run aggregate` after a
`--quick` study aggregated with the default pass@8 and 500 bootstrap resamples without a word)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aggregate.cli import main
from benchmarks import synth
from rcea.config import load_config
from rcea.store import write_manifest

QUICK = ["passk.n=4", "aggregate.bootstrap_resamples=60", "aggregate.min_k_r=2", "aggregate.min_mode_m=2"]


@pytest.fixture(scope="module")
def tables():
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12))


def _dataset(tmp: Path, tables, manifest) -> Path:
    """The synthetic tables in parts, each part's manifest written by `manifest(part)` as a job would."""
    src = tmp / "in"
    synth.write_dataset(tables, src, parts=2)
    for part in sorted(src.glob("*/*.parquet")):
        manifest(part)
    return src


def _aggregate(src: Path, out: Path, *extra: str) -> int:
    return main(["--input", str(src), "--output", str(out), "--scale", "tiny", "--quiet", "--no-figures", *extra])


@pytest.fixture
def no_overrides(monkeypatch):
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)


def test_a_quick_study_is_aggregated_with_its_own_settings_and_says_so(tmp_path, tables, capsys, no_overrides):
    made = load_config("tiny", None, QUICK)
    src = _dataset(tmp_path, tables, lambda p: write_manifest(p, cfg=made))
    assert load_config("tiny")["passk.n"] != 4   # the current configuration (no overrides) differs
    assert _aggregate(src, tmp_path / "out") == 0
    settings = json.loads((tmp_path / "out" / "summary.json").read_text())["settings"]
    assert (settings["pass_k"], settings["bootstrap_resamples"], settings["min_k_r"]) == (4, 60, 2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"configuration {made.hash()}" in err and "passk.n = 4 (now 8)" in err
    assert "passk.n = 4" in (tmp_path / "out" / "report.md").read_text()
    # an option given on the command line still wins over the recorded value
    assert _aggregate(src, tmp_path / "out2", "--pass-k", "3") == 0
    assert json.loads((tmp_path / "out2" / "summary.json").read_text())["settings"]["pass_k"] == 3


def test_tables_of_the_current_configuration_aggregate_silently(tmp_path, tables, capsys, no_overrides):
    src = _dataset(tmp_path, tables, lambda p: write_manifest(p, cfg=load_config("tiny")))
    assert _aggregate(src, tmp_path / "out") == 0
    assert capsys.readouterr().err == ""


def test_parts_of_two_configurations_are_refused_naming_both(tmp_path, tables, capsys, no_overrides):
    quick, full = load_config("tiny", None, QUICK), load_config("tiny")
    src = _dataset(tmp_path, tables, lambda p: write_manifest(p, cfg=quick if p.name.endswith("000.parquet") else full))
    assert _aggregate(src, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and quick.hash() in err and full.hash() in err and "passk.n" in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_tables_of_another_configuration_that_record_no_settings_are_refused(tmp_path, tables, capsys, no_overrides):
    other = load_config("tiny", None, QUICK).hash()
    src = _dataset(tmp_path, tables, lambda p: write_manifest(p, config_hash=other))   # manifests of older code
    assert _aggregate(src, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and other in err and "RCEA_OVERRIDES" in err
