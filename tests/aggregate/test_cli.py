"""The CLI end to end on small synthetic datasets: outputs, missing inputs, invariances."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks import synth
from aggregate.cli import main
from aggregate.report import SUMMARY_KEYS

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "300", "--pass-k", "4", "--quiet"]


def _run(tmp: Path, tables: dict[str, pa.Table], extra: list[str] = SMALL, parts: int = 1,
         figs: bool = False) -> tuple[dict, Path]:
    src, out = tmp / "in", tmp / "out"
    synth.write_dataset(tables, src, parts=parts)
    assert main(["--input", str(src), "--output", str(out), *extra, *([] if figs else ["--no-figures"])]) == 0
    return json.loads((out / "summary.json").read_text()), out


@pytest.fixture(scope="module")
def tiny() -> dict[str, pa.Table]:
    return synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12))


def test_tiny_outputs_complete(tmp_path: Path, tiny) -> None:
    old_mask = os.umask(0o022)  # a shared cluster's usual umask: colleagues must be able to read the results
    try:
        s, out = _run(tmp_path, tiny, parts=2, figs=True)
    finally:
        os.umask(old_mask)
    modes = {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()}
    assert {"report.md", "summary.json", "tables/table1.md", "figures/fig_traces.png"} <= set(modes)
    assert {m for m in modes.values()} == {"0o644"}, modes  # mkstemp alone would leave 0o600
    assert len(s["endpoints"]) == 3
    for e in s["endpoints"]:
        assert set(SUMMARY_KEYS) <= set(e)
    for key in ("table1", "table2", "tableA4", "tableA5", "tableA6", "tableA7", "tableA8", "tableA9"):
        md = (out / "tables" / f"{key}.md").read_text()
        tex = (out / "tables" / f"{key}.tex").read_text()
        assert md.strip() and "\\begin{table}" in tex
        assert tex.isascii(), f"{key}.tex has non-ASCII characters (pdflatex)"
        assert key[5:].upper() in (out / "report.md").read_text().upper()
    for fig in ("fig_traces", "fig_reward_ratios", "fig_covariance_fit"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000 and (out / "figures" / f"{fig}.pdf").exists()
    assert "toprule" in (out / "tables" / "table1.tex").read_text()
    assert s["covariance_fit"]["all_nonfailed"]["n"] == 4
    assert max(e["max_decomposition_residual"] for e in s["endpoints"]) < 1e-9


def test_ratios_match_independent_pandas_computation(tmp_path: Path, tiny) -> None:
    s, _ = _run(tmp_path, tiny)
    df = tiny["samples"].to_pandas()
    df["scale"], df["method"], df["question_id"] = (df[c].astype(str) for c in ("scale", "method", "question_id"))
    for e in s["endpoints"]:
        d = df[(df.scale == e["scale"]) & (df.method == e["method"]) & (df.step == e["step"])]
        g = d.groupby(["question_id", "reward"]).token_entropy_mean.agg(["mean", "size"]).unstack("reward")
        pos = g["mean"][1].where(g["size"][1] >= 2)
        neg = g["mean"][0].where(g["size"][0] >= 2)
        assert e["coverage_success"] == pytest.approx(pos.notna().mean())
        assert e["coverage_failure"] == pytest.approx(neg.notna().mean())
        both = pos.notna() & neg.notna()
        if both.any():
            assert e["paired_ratio"] == pytest.approx(neg[both].mean() / pos[both].mean(), rel=1e-12)
            assert e["paired_n"] == int(both.sum())
        if pos.notna().any() and neg.notna().any():
            assert e["broad_ratio"] == pytest.approx(neg.mean() / pos.mean(), rel=1e-12)


def test_default_k_r_on_tiny_reports_null_with_coverage_zero(tmp_path: Path) -> None:
    tabs = synth.generate(synth.tiny_spec())  # 4 questions x 4 samples: K_r >= 8 impossible
    s, out = _run(tmp_path, tabs, extra=["--bootstrap-resamples", "50", "--quiet"])
    for e in s["endpoints"]:
        assert e["coverage_success"] == 0 and e["coverage_failure"] == 0
        assert e["broad_ratio"] is None and e["paired_ratio"] is None and e["paired_n"] == 0
    assert "zero coverage" in (out / "report.md").read_text()


def test_missing_tokens_and_null_modes(tmp_path: Path, tiny) -> None:
    tabs = dict(tiny)
    del tabs["tokens"]
    samples = tabs["samples"]
    tabs["samples"] = samples.set_column(samples.column_names.index("mode"), "mode", pa.nulls(samples.num_rows,
                                                                                              pa.string()))
    s, out = _run(tmp_path, tabs)
    assert all(e["q99_share_success"] is None and e["mode_retention"] is None for e in s["endpoints"])
    assert "tokens" in s["unavailable"]["q99"] and "mode" in s["unavailable"]["mode_retention"]
    assert "Missing input: no tokens table" in (out / "tables" / "table2.md").read_text()
    assert "all null" in (out / "tables" / "tableA6.md").read_text()
    assert "no tokens table" in (out / "report.md").read_text()


def test_a_stage_whose_labels_are_missing_is_not_presented_as_a_result(tmp_path: Path, tiny) -> None:
    """The validity judge's labels all null (its stage failed or never ran) while modes exist: retention over
    unjudged successes would look like a result. Nothing of it is reported, and the report says so first."""
    s_ok, _ = _run(tmp_path / "ok", tiny)                                  # the control: the judge labelled
    assert any(e["mode_retention"] is not None for e in s_ok["endpoints"])
    samples = tiny["samples"]
    assert samples.column("mode").null_count < samples.num_rows
    unjudged = samples.set_column(samples.column_names.index("process_valid"), "process_valid",
                                  pa.nulls(samples.num_rows, pa.bool_()))
    for name, tabs in (("judge", {**tiny, "samples": unjudged}),
                       ("modes", {**tiny, "samples": samples.set_column(samples.column_names.index("mode"), "mode",
                                                                        pa.nulls(samples.num_rows, pa.string()))})):
        s, out = _run(tmp_path / name, tabs)
        assert all(e["mode_retention"] is None for e in s["endpoints"]), name
        report = (out / "report.md").read_text()
        first = report.split("\n## ")[0]
        assert "**Not a result: labels are missing.**" in first and "rerun the labelling stage" in first, name
        assert "all null" in (out / "tables" / "tableA6.md").read_text()
    assert "validity judge's labels are missing" in s_judge_note(tmp_path / "judge")
    assert "Not a result" not in (tmp_path / "ok" / "out" / "report.md").read_text()


def s_judge_note(tmp: Path) -> str:
    return json.loads((tmp / "out" / "summary.json").read_text())["unavailable"]["mode_retention"]


def test_only_greedy_and_empty_input(tmp_path: Path, tiny) -> None:
    s, out = _run(tmp_path / "a", {"greedy": tiny["greedy"]})
    assert s["endpoints"] == [] and "reward_ratios" in s["unavailable"] and "covariance_fit" in s["unavailable"]
    assert "| Base tiny |" in (out / "tables" / "table1.md").read_text()
    assert main(["--input", str(tmp_path / "nope"), "--output", str(tmp_path / "no"), "--quiet"]) == 2


def test_an_input_folder_without_any_table_is_an_error_saying_how_to_make_one(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["--input", str(tmp_path / "empty"), "--output", str(tmp_path / "eo"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds none of the schema tables" in err and "scripts/run demo" in err
    assert not (tmp_path / "eo").exists()


@pytest.mark.parametrize("option,value,needle", [
    ("--bootstrap-resamples", "-5", "aggregate.bootstrap_resamples must be >= 1, got -5"),
    ("--pass-k", "0", "passk.n must be >= 1, got 0"),
    ("--rarefaction-draws", "0", "aggregate.rarefaction_draws must be >= 1"),
    ("--min-mode-m", "-1", "aggregate.min_mode_m must be >= 1"),
])
def test_out_of_range_options_are_one_line_errors(tmp_path: Path, tiny, capsys, option, value, needle) -> None:
    src = synth.write_dataset(tiny, tmp_path / "in")
    assert main(["--input", str(src), "--output", str(tmp_path / "o"), option, value, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {option} {value}: {needle}" or (err.startswith(f"error: {option} {value}: ") and needle in err)
    assert not (tmp_path / "o").exists()


def test_a_column_of_the_wrong_type_names_the_file_column_and_type(tmp_path: Path, tiny, capsys) -> None:
    """reward stored as text: checked against docs/schema.md, not coerced into missing values."""
    tabs = dict(tiny)
    s = tabs["samples"]
    i = s.schema.get_field_index("reward")
    tabs["samples"] = s.set_column(i, "reward", s.column("reward").cast(pa.string()))
    src = synth.write_dataset(tabs, tmp_path / "in")
    assert main(["--input", str(src), "--output", str(tmp_path / "o"), *SMALL, "--no-figures"]) == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "samples.parquet" in ln)
    assert str(src / "samples.parquet") in line and "column reward is string, expected int" in line
    assert not (tmp_path / "o" / "summary.json").exists()


def test_a_part_folder_without_manifests_is_not_read(tmp_path: Path, tiny) -> None:
    """docs/schema.md: a part without its manifest is incomplete and ignored, also when none has one."""
    src = synth.write_dataset(tiny, tmp_path / "in", parts=2)
    for m in (src / "greedy").glob("*.manifest.json"):
        m.unlink()
    assert main(["--input", str(src), "--output", str(tmp_path / "o"), *SMALL, "--no-figures"]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert any("greedy" in n and "has a manifest" in n for n in s["notes"])


def test_malformed_table_stops_the_run_unless_skipped(tmp_path: Path, tiny, capsys) -> None:
    tabs = dict(tiny)
    tabs["covariance"] = tabs["covariance"].drop_columns(["observed_delta"])
    src = synth.write_dataset(tabs, tmp_path / "in")
    assert main(["--input", str(src), "--output", str(tmp_path / "o1"), *SMALL, "--no-figures"]) == 1
    assert "covariance.parquet" in capsys.readouterr().err and not (tmp_path / "o1" / "summary.json").exists()
    s, _ = _run(tmp_path, tabs, extra=[*SMALL, "--skip-bad-parts"])
    assert any("observed_delta" in n for n in s["notes"]) and s["covariance_fit"] is None
    assert [p["file"] for p in s["skipped_parts"]] == [str(src / "covariance.parquet")]


def _bad_parts(tmp_path: Path, tiny) -> Path:
    """samples as two healthy parts, one truncated part (a writer killed mid-copy) and one part lacking
    a required column; every part has its manifest, so each looks complete."""
    src = synth.write_dataset({k: v for k, v in tiny.items() if k != "samples"}, tmp_path / "in")
    folder = src / "samples"
    folder.mkdir()
    s = tiny["samples"]
    half = s.num_rows // 2
    pq.write_table(s.slice(0, half), folder / "p0.parquet")
    pq.write_table(s.slice(half), folder / "p1.parquet")
    pq.write_table(s.slice(0, 5), folder / "p2.parquet")
    blob = (folder / "p2.parquet").read_bytes()
    (folder / "p2.parquet").write_bytes(blob[: len(blob) // 2])
    pq.write_table(s.slice(0, 5).drop_columns(["reward"]), folder / "p3.parquet")
    for p in ("p0", "p1", "p2", "p3"):
        (folder / f"{p}.parquet.manifest.json").write_text("{}")
    return src


def test_bad_parts_are_named_and_stop_the_run(tmp_path: Path, tiny, capsys) -> None:
    """One truncated part and one lacking a column: exit 1, each file named with its reason, no output
    (the healthy parts are not silently aggregated alone)."""
    src = _bad_parts(tmp_path, tiny)
    assert main(["--input", str(src), "--output", str(tmp_path / "out"), *SMALL, "--no-figures"]) == 1
    err = capsys.readouterr().err
    lines = {ln.strip().split(":", 1)[0]: ln for ln in err.splitlines() if ".parquet" in ln}
    assert set(lines) == {str(src / "samples" / "p2.parquet"), str(src / "samples" / "p3.parquet")}, err
    assert "reward" in lines[str(src / "samples" / "p3.parquet")]
    assert "Parquet" in lines[str(src / "samples" / "p2.parquet")]  # pyarrow's reason: not a (complete) Parquet file
    assert "--skip-bad-parts" in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_skip_bad_parts_aggregates_the_healthy_ones_and_lists_the_rest(tmp_path: Path, tiny, capsys) -> None:
    src = _bad_parts(tmp_path, tiny)
    out = tmp_path / "out"
    assert main(["--input", str(src), "--output", str(out), *SMALL, "--no-figures", "--skip-bad-parts"]) == 0
    err = capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    bad = [str(src / "samples" / "p2.parquet"), str(src / "samples" / "p3.parquet")]
    assert [p["file"] for p in s["skipped_parts"]] == bad and all(p["reason"] for p in s["skipped_parts"])
    assert all(b in err for b in bad)
    report = (out / "report.md").read_text()
    assert "## Skipped input files" in report and all(b in report for b in bad)
    ref, _ = _run(tmp_path / "ref", tiny)  # exactly the two healthy parts = the whole samples table
    assert [e["paired_ratio"] for e in s["endpoints"]] == [e["paired_ratio"] for e in ref["endpoints"]]


def _strip(s: dict) -> dict:
    s = dict(s)
    s.pop("timings_s"), s.pop("provenance")
    return s


def test_row_order_invariance(tmp_path: Path, tiny) -> None:
    """Shuffling samples and token rows leaves every number unchanged (keyed RNG, grouped keys)."""
    a, _ = _run(tmp_path / "a", tiny)
    rng = np.random.default_rng(0)
    shuffled = dict(tiny)
    for name in ("samples", "tokens", "greedy", "passk"):
        shuffled[name] = tiny[name].take(pa.array(rng.permutation(tiny[name].num_rows)))
    b, _ = _run(tmp_path / "b", shuffled)
    ja, jb = _strip(a), _strip(b)
    for ea, eb in zip(ja.pop("endpoints"), jb.pop("endpoints")):
        for k, v in ea.items():
            if isinstance(v, float):
                assert eb[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
            else:
                assert eb[k] == v, k
    assert json.dumps(ja["covariance_fit"]) == json.dumps(jb["covariance_fit"])


def test_q99_matches_direct_computation(tmp_path: Path, tiny) -> None:
    """Token join + proxy against a pandas merge and the estimator functions, per endpoint."""
    from aggregate import covariance

    s, _ = _run(tmp_path, tiny)
    smp = tiny["samples"].to_pandas()
    tok = tiny["tokens"].to_pandas()
    for df in (smp, tok):
        for c in ("scale", "method", "question_id"):
            df[c] = df[c].astype(str)
    keys = ["scale", "method", "step", "question_id"]
    smp["c"] = smp.groupby(keys).reward.transform("sum")
    smp["G"] = smp.groupby(keys).reward.transform("size")
    std = np.sqrt(smp.c / smp.G * (1 - smp.c / smp.G) * smp.G / (smp.G - 1))
    smp["A"] = (smp.reward - smp.c / smp.G) / (std + 1e-4)
    m = tok.merge(smp[keys + ["sample", "reward", "A"]], on=keys + ["sample"])
    got = {(e["scale"], e["method"], e["step"]): e for e in s["endpoints"]}
    for (sc, me, st), d in m.groupby(["scale", "method", "step"]):
        cov = (d.A - d.A.mean()) * (d.logprob.astype(float) - d.logprob.astype(float).mean())
        e = got[(sc, me, st)]
        assert e["q99_share_failure"] == pytest.approx(covariance.q99_share(cov[d.reward == 0].to_numpy(), 0.99, "linear")["share"],
                                                       rel=1e-9)
        assert e["q99_share_success"] == pytest.approx(covariance.q99_share(cov[d.reward == 1].to_numpy(), 0.99, "linear")["share"],
                                                       rel=1e-9)


def test_worker_count_does_not_change_results() -> None:
    """Forked workers and the serial path give identical numbers (per-endpoint keyed generators)."""
    from aggregate import io, pipeline
    from aggregate.settings import AggregateSettings

    tabs = synth.generate(synth.tiny_spec(seed=5, n_questions=8, k=16, methods=("grpo", "dapo"), progress=(0.5, 1.0)))
    st = AggregateSettings(min_k_r=3, min_mode_m=3, bootstrap_resamples=200, pass_k=4)
    a = pipeline.run_aggregation(io.from_tables(tabs), st.replace(workers=1))
    b = pipeline.run_aggregation(io.from_tables(tabs), st.replace(workers=2))
    assert len(a["endpoints"]) == 5
    assert json.dumps(a["endpoints"], default=str) == json.dumps(b["endpoints"], default=str)
    assert any(e.get("mode_retention_n") for e in a["endpoints"])


def test_store_layout_parts_with_manifests_and_mixed_types(tmp_path: Path, tiny) -> None:
    """rcea.store layout: DIR/<table>/<part>.parquet + <part>.parquet.manifest.json; a part without a
    manifest is incomplete and ignored; parts may differ in string/dictionary types."""
    src = tmp_path / "in"
    synth.write_dataset({k: v for k, v in tiny.items() if k != "samples"}, src)
    (src / "samples").mkdir()
    s = tiny["samples"]
    half = s.num_rows // 2
    a = s.slice(0, half)
    b = s.slice(half).cast(pa.schema([pa.field(f.name, pa.large_string() if pa.types.is_dictionary(f.type) else f.type)
                                      for f in s.schema]))
    pq.write_table(a, src / "samples" / "p0.parquet")
    pq.write_table(b, src / "samples" / "p1.parquet")
    for p in ("p0", "p1"):
        (src / "samples" / f"{p}.parquet.manifest.json").write_text("{}")
    pq.write_table(a, src / "samples" / "p2.parquet")  # killed writer: no manifest
    (src / "samples" / ".p3.parquet.x.tmp").write_text("garbage")
    assert main(["--input", str(src), "--output", str(tmp_path / "out"), *SMALL, "--no-figures"]) == 0
    out = json.loads((tmp_path / "out" / "summary.json").read_text())
    ref, _ = _run(tmp_path / "ref", tiny)
    assert [e["paired_ratio"] for e in out["endpoints"]] == [e["paired_ratio"] for e in ref["endpoints"]]
    assert any("without a manifest" in n for n in out["notes"])


def test_bad_scale_is_a_clear_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "in").mkdir()
    assert main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"), "--scale", "huge"]) == 2
    assert "valid scales" in capsys.readouterr().err


def test_report_shows_sampled_accuracy_against_base_and_the_seed_noise(tmp_path: Path, tiny) -> None:
    """The accuracy section is computed from the samples table (mean over questions of the per-question
    success share) and the seeds file beside the report is quoted, not recomputed."""
    out = tmp_path / "out"
    out.mkdir()
    noise = {"method": "grpo", "seeds": [1, 2, 3], "questions": 200, "k": 8, "warm_start": 0.461,
             "accuracy": [0.552, 0.53, 0.541], "gain": 0.080, "sd": 0.011, "gain_over_sd": 7.3}
    (out / "seeds-grpo.json").write_text(json.dumps(noise))
    s, out = _run(tmp_path, tiny)
    df = tiny["samples"].to_pandas()
    df["method"], df["question_id"] = df.method.astype(str), df.question_id.astype(str)
    acc = {(m, int(st)): g.groupby("question_id").reward.mean().mean() for (m, st), g in df.groupby(["method", "step"])}
    base = acc[("base", 0)]
    text = (out / "report.md").read_text()
    for e in s["endpoints"]:
        assert e["accuracy"] == pytest.approx(acc[(e["method"], e["step"])])
        if e["method"] != "base":
            assert f"| {e['scale']}/{e['method']}/{e['step']} | {e['accuracy']:.3f} | {e['accuracy'] - base:+.3f} |" in text
    assert "run-to-run sd 0.011 (gain / sd = 7.3)" in text and "seeds 0.552, 0.530, 0.541" in text
    assert s["seed_noise"] == [noise]


def test_terminal_summary_lists_each_objective_and_the_covariance_fit(tmp_path: Path, tiny, capsys) -> None:
    s, _ = _run(tmp_path, tiny, extra=[a for a in SMALL if a != "--quiet"])
    out = capsys.readouterr().out
    assert "Per method (Table 1" in out
    for r in s["runs"]:
        row = next(ln for ln in out.splitlines() if ln.startswith(f"{r['scale']}/{r['method']} "))
        cells = row.split()
        assert cells[1] == f"{r['macro_average']:.1f}" and cells[2] == f"{r['pass_at_4']:.1f}"
    fit = s["covariance_fit"]["all_nonfailed"]
    assert f"covariance fit (all non-failed runs): n = {fit['n']}" in out
    # the entropy table: each run's final checkpoint only (every endpoint is in report.md)
    firsts = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    shown = {tuple(w.rsplit("/", 1)) for w in firsts if w.count("/") == 2 and w.rsplit("/", 1)[-1].isdigit()}
    last = {}
    for e in s["endpoints"]:
        last[f"{e['scale']}/{e['method']}"] = max(e["step"], last.get(f"{e['scale']}/{e['method']}", -1))
    assert shown == {(k, str(v)) for k, v in last.items()}
    assert len(s["endpoints"]) > len(last) and f"all {len(s['endpoints'])} endpoints in report.md" in out


def test_summary_provenance_carries_the_lockfile_hash(tmp_path: Path, tiny) -> None:
    """summary.json records what every manifest records (rcea.provenance), the lockfile hash included."""
    import hashlib

    from rcea.paths import project_root

    s, _ = _run(tmp_path, dict(tiny))
    lock = project_root() / "lockfiles" / "aggregate.txt"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    assert s["provenance"]["lockfile"] == f"aggregate.txt:sha256:{digest}"
    assert s["provenance"]["git_commit"] and "numpy" in s["provenance"]["libraries"]


@pytest.mark.parametrize("where", ["file", "proc", "readonly"])
def test_an_unwritable_output_folder_is_one_line_before_any_work(tmp_path: Path, tiny, capsys, where) -> None:
    """An output folder that cannot be made or written (under a file, in /proc, read-only) is one line naming
    it, exit 1 (issue 31: a 13-22-line PermissionError / FileNotFoundError after the whole aggregation)."""
    src = tmp_path / "in"
    synth.write_dataset(tiny, src)
    (tmp_path / "a_file").write_text("x")
    out = {"file": tmp_path / "a_file" / "out", "proc": Path("/proc/rcea-no-such/out"),
           "readonly": tmp_path / "ro" / "out"}[where]
    import subprocess

    immutable = False
    if where == "readonly":
        out.mkdir(parents=True)
        out.chmod(0o555)
        if os.access(out, os.W_OK):   # root ignores the mode bits; an immutable folder stops root too
            immutable = subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("this user writes to read-only folders and chattr +i is not available here")
    try:
        assert main(["--input", str(src), "--output", str(out), *SMALL]) == 1
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(out)])
        if where == "readonly":
            out.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: cannot write ") and str(out) in err, err
    assert "--output" in err and not (out / "summary.json").exists()
