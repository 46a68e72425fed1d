"""report.md opens with the answers (issue 40 item 5): the first heading after the title is the answers, one
block per research question, each with a number, an interval or p value and a verdict, linked to the tables and
figures below; settings and departures follow."""

from __future__ import annotations

import re

import pytest

from aggregate import answers
from aggregate.cli import main
from benchmarks import synth

SMALL = ["--min-k-r", "2", "--min-mode-m", "2", "--bootstrap-resamples", "60", "--pass-k", "4", "--quiet",
         "--no-figures"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("answers")
    tabs = synth.generate(synth.tiny_spec(seed=3, n_questions=8, k=12, methods=synth.METHODS))
    synth.write_dataset(tabs, tmp / "in")
    assert main(["--input", str(tmp / "in"), "--output", str(tmp / "out"), *SMALL]) == 0
    return (tmp / "out" / "report.md").read_text()


def _blocks(text: str) -> dict[str, str]:
    """### RQn blocks of the answers section."""
    section = text.split("## Answers", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### (RQ\d)", section, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_the_first_heading_after_the_title_is_the_answers(report):
    heads = [ln for ln in report.splitlines() if ln.startswith("#")]
    assert heads[0] == "# RCEA aggregation report" and heads[1].startswith("## Answers")
    # the settings and departures come after every answer
    assert report.index("### RQ4") < report.index("## Settings behind") < report.index("## Departures")


def test_each_research_question_has_a_number_an_interval_or_p_and_a_verdict(report):
    blocks = _blocks(report)
    assert list(blocks) == ["RQ1", "RQ2", "RQ3", "RQ4"]
    for rq, body in blocks.items():
        assert re.search(r"\d\.\d{2,}", body), f"{rq}: no number"
        assert re.search(r"\bp = (\d|–)|\[\d+\.\d+, \d+\.\d+\]", body), f"{rq}: no p value or interval"
        assert "**Verdict:**" in body, rq
        links = re.findall(r"\]\(((?:tables|figures)/[^)]+)\)", body)
        assert links, f"{rq}: not linked to a table or figure"
    assert "[0." in blocks["RQ2"] or "[1." in blocks["RQ2"]   # the lowest run's bootstrap interval
    assert "exact permutation p" in blocks["RQ1"] and "exact permutation p" in blocks["RQ3"]
    assert "sign test" in blocks["RQ4"] and "tokens" in blocks["RQ4"]   # the q99 selected fraction is shown


def test_each_answer_links_to_files_the_aggregation_writes(tmp_path):
    tabs = synth.generate(synth.tiny_spec(seed=3, n_questions=6, k=12, methods=("grpo", "dapo", "gtpo")))
    synth.write_dataset(tabs, tmp_path / "in")
    out = tmp_path / "out"
    assert main(["--input", str(tmp_path / "in"), "--output", str(out), *SMALL[:-1]]) == 0
    text = (out / "report.md").read_text()
    links = set(re.findall(r"\]\(((?:tables|figures)/[^)]+)\)", text.split("## Input and settings", 1)[0]))
    drawn = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    # every linked file exists, except the training-entropy figure of a bare dataset (no steps.jsonl beside it)
    assert links - drawn <= {"figures/fig_training_entropy.png"} and len(links & drawn) >= 8


def _run(method: str, ratio: float, ci: tuple[float, float], **kw) -> dict:
    return {"scale": "3b", "method": method, "failed": False, "extension": False, "paired_ratio": ratio,
            "paired_ci": list(ci), "probe_step": 10, **kw}


def test_the_verdicts_follow_the_numbers():
    """Hand-made results: RQ2's verdict depends on how many intervals exclude 1, RQ4's sign test is the exact
    binomial tail (12 of 12 agreements: p = 1/4096)."""
    strong = {"runs": [_run(m, 1.5, (1.2, 1.8)) for m in ("grpo", "dapo", "gtpo")]}
    weak = {"runs": [_run(m, 1.1, (0.9, 1.3)) for m in ("grpo", "dapo", "gtpo")]}
    mixed = {"runs": [_run("grpo", 0.9, (0.8, 1.0)), _run("dapo", 1.2, (1.1, 1.3))]}
    assert "failed trajectories carry more" in "".join(answers.rq2_lines(strong))
    assert "not established" in "".join(answers.rq2_lines(weak))
    assert "mixed" in "".join(answers.rq2_lines(mixed))
    k, n, p = answers.sign_test({"n": 12, "sign_agreement": 1.0})
    assert (k, n) == (12, 12) and p == pytest.approx(1 / 4096)
    k, n, p = answers.sign_test({"n": 10, "sign_agreement": 0.8})   # P(X >= 8 | 10, 1/2) = 56 / 1024
    assert (k, n) == (8, 10) and p == pytest.approx(56 / 1024)
    text = "".join(answers.rq4_lines({"covariance_fit": {"all_nonfailed": {"n": 10, "sign_agreement": 0.8,
                                                                          "spearman": 0.9, "slope": 1.0}}}))
    assert "8 of 10" in text and "p = 0.0547" in text and "Verdict:** not established" in text   # 0.0547 > 0.05
    text = "".join(answers.rq4_lines({"covariance_fit": {"all_nonfailed": {"n": 12, "sign_agreement": 1.0,
                                                                          "spearman": 0.9, "slope": 1.0}}}))
    assert "12 of 12" in text and "p = 0.0002" in text and "Verdict:** the covariance prediction tracks" in text


def test_rq1_correlates_probe_entropy_with_the_average():
    """Entropy ranks 1..5 against averages in the reverse order: rho = -1, exact p = 2 / 5! = 0.0167."""
    runs, eps = [], []
    for i, m in enumerate(("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo")):
        runs.append({"scale": "3b", "method": m, "failed": False, "extension": False, "probe_step": 7,
                     "macro_average": 30.0 - i})
        eps.append({"scale": "3b", "method": m, "step": 7, "token_entropy_mean": 0.1 * (i + 1)})
    got = answers.rq1({"runs": runs, "endpoints": eps})["3b"]
    assert got["n"] == 5 and got["spearman"] == pytest.approx(-1.0) and got["p_exact"] == pytest.approx(2 / 120)
    assert "entropy orders accuracy" in "".join(answers.rq1_lines({"runs": runs, "endpoints": eps}))



def test_section_12_counts_from_the_samples_and_the_codebooks(tmp_path):
    """Verifier-accepted = reward 1, judge-retained = reward 1 and process_valid true, extensions left out
    (counted by pandas here); initial modes = the version-1 modes of each codebook JSON."""
    import json

    from aggregate.section12 import initial_modes, pipeline_counts, pipeline_lines
    from aggregate.settings import AggregateSettings

    tabs = synth.generate(synth.tiny_spec(seed=5, n_questions=6, k=8, methods=("grpo", "archer")))
    df = tabs["samples"].to_pandas()
    df = df[df["method"].astype(str) != "archer"]
    got = pipeline_counts(tabs["samples"], AggregateSettings())
    assert got["verifier_accepted"] == int((df.reward == 1).sum()) > 0
    kept = df[(df.reward == 1) & (df.process_valid.fillna(False).astype(bool))]
    assert got["judge_retained"] == len(kept) and got["retained_questions"] == kept.question_id.nunique()
    for q, added in (("q1", [1, 1, 2]), ("q2", [1]), ("q3", [1, 1, 1, 1, 3])):
        (tmp_path / f"{q}.json").write_text(json.dumps({"question_id": q, "version": max(added),
                                                        "modes": [{"id": f"m{i}", "added_in_version": v}
                                                                  for i, v in enumerate(added)]}))
    (tmp_path / "index.json").write_text("{}")
    init = initial_modes(tmp_path)
    assert init == {"questions": 3, "modes": 7, "min": 1, "max": 4, "median": 2.0}
    text = "\n".join(pipeline_lines({"pipeline_counts": got, "initial_modes": init}))
    assert f"| verifier-accepted trajectories | {got['verifier_accepted']:,} | 118,435 |" in text
    assert "| initial modes per question | 1 to 4 | 1 to 8 |" in text and "| median initial modes per question | 2 | 2 |" in text
    assert initial_modes(tmp_path / "none") is None


def test_kl_cov_empty_mask_is_said_to_be_zero_by_construction():
    """KL-Cov selects k = max(1, ...) tokens per update: its empty-mask share is not a measurement; Clip-Cov's
    is, and stays a percentage."""
    from aggregate.context import report_lines
    from aggregate.settings import AggregateSettings

    w = {"steps_in_window": 10, "nonzero_var_share_window": 0.5, "nonzero_var_share_run": 0.5,
         "empty_mask_share_window": 0.0, "empty_mask_share_run": 0.0}
    res = {"training_traces": {}, "unavailable": {"training_traces": "none"},
           "failure_window": {"tiny/kl_cov": dict(w), "tiny/clip_cov": dict(w, empty_mask_share_window=0.25)}}
    text = "\n".join(report_lines(res, AggregateSettings()))
    assert "| tiny/kl_cov | 10 | 50.0% | 50.0% | – | – | 0 by construction | 0 by construction |" in text
    assert "| tiny/clip_cov | 10 | 50.0% | 50.0% | – | – | 25.0% | 0.0% |" in text
