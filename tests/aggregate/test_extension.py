"""Archer is an extension: adding its runs changes no cell of the paper's tables and no paper statistic."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aggregate import io, pipeline, tables
from aggregate.report import jsonable
from aggregate.settings import AggregateSettings
from benchmarks import synth

ST = AggregateSettings(bootstrap_resamples=200, min_k_r=2, min_mode_m=2, pass_k=4, workers=1)
PAPER_SIX = ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo")


def _without(tables_: dict[str, pa.Table], method: str) -> dict[str, pa.Table]:
    return {k: t.filter(pc.not_equal(pc.cast(t.column("method"), pa.string()), method)) for k, t in tables_.items()}


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    spec = synth.tiny_spec(seed=5, scales={"tiny": 4, "small": 8}, methods=(*PAPER_SIX, "archer"), n_questions=8,
                           k=10, progress=(0.25, 0.5, 0.75, 1.0))
    full = synth.generate(spec)
    assert all("archer" in set(t.column("method").to_pylist()) for t in full.values())
    return (pipeline.run_aggregation(io.from_tables(_without(full, "archer")), ST),
            pipeline.run_aggregation(io.from_tables(full), ST))


def _same(a, b) -> bool:
    return json.dumps(jsonable(a), sort_keys=True) == json.dumps(jsonable(b), sort_keys=True)


def _paper_rows(t: tables.Table) -> list[list[str]]:
    return [r for r in t.rows if not any(tables.EXT in c for c in r)]


def test_the_paper_settings_name_the_six_objectives() -> None:
    assert AggregateSettings().paper_methods == PAPER_SIX
    assert AggregateSettings().is_extension("archer") and not AggregateSettings().is_extension("base")


def test_adding_archer_changes_no_paper_cell(both) -> None:
    paper, with_archer = both
    tp, ta = tables.build_tables(paper, ST), tables.build_tables(with_archer, ST)
    for key in tp:
        assert _paper_rows(ta[key]) == tp[key].rows, key  # same cells, same order: extension rows come after
    # the pooled statistics themselves, not only their rounding
    for key in ("covariance_fit", "correlations"):
        assert _same(with_archer[key], paper[key]), key
    assert _same([r for r in with_archer["runs"] if not r["extension"]], paper["runs"])
    assert any(np.isfinite(c["spearman"]) for c in paper["correlations"].values())


def test_archer_is_reported_beside_the_paper_rows_and_labelled(both) -> None:
    paper, with_archer = both
    ta = tables.build_tables(with_archer, ST)
    for key in ("table1", "table2", "tableA4", "tableA5", "tableA6", "tableA7", "tableA8"):
        ext = [r for r in ta[key].rows if any(tables.EXT in c for c in r)]
        assert ext, key
        assert any("Extension" in n for n in ta[key].notes), key
    # A7: one row per Archer run, fitted on its own four transitions; the pooled n stays the paper's
    assert set(with_archer["extension_covariance_fit"]) == {"tiny/archer", "small/archer"}
    assert all(f["n"] == 4 for f in with_archer["extension_covariance_fit"].values())
    pooled = with_archer["covariance_fit"]["all_nonfailed"]["n"]
    nonfailed = [r for r in with_archer["runs"] if r["method"] in PAPER_SIX and not r["failed"]]
    assert pooled == paper["covariance_fit"]["all_nonfailed"]["n"] == 4 * len(nonfailed)
    # A8 Direction counts the paper's endpoints only (12 here, as in the paper), Archer has its own rows
    a8 = ta["tableA8"].rows
    assert all(r[-1].endswith("/12") for r in a8 if tables.EXT not in r[0])
    assert all(r[-1].endswith("/2") for r in a8 if tables.EXT in r[0])
    # RQ3: the Spearman n counts the six objectives at most
    assert all(c["n"] <= 6 and "archer" not in c["methods"] for c in with_archer["correlations"].values())
