"""The LLM judge and codebook clients (infer/judge.py, infer/codebook.py, infer/llm.py, infer/labels.py) and
the endpoint preflight (rcea/endpoints.py) against a real vLLM 0.23.0 OpenAI server on CPU.

The server is the session's one (conftest): `python -m infer.judge_server`, the Compose judge service's own
command, serving the tiny model (JUDGE_MODEL) under the names the configuration gives it, with the judge and
the codebook both pointed at it (as the CPU rehearsal does). A model name it does not serve must fail here,
before and during a stage, not hours into a study on the GPU host.
"""

from __future__ import annotations

import json

import pytest

from infer.llm import LLMClient, LLMFailure, LLMSettings, Request, preflight
from rcea.endpoints import judge_served_names, served_models
from rcea.endpoints import preflight as study_preflight

UNSERVED = "Qwen/Qwen3.5-9B-Instruct"     # one word away from the configured judge: a plausible typo


def settings(cfg, section: str, **kw) -> LLMSettings:
    """The configuration's endpoint for `section`, with replies short enough for a tiny model on CPU."""
    return LLMSettings.from_config(cfg, section, **{"max_tokens": 16, "timeout_s": 120.0, "max_retries": 1,
                                                    "backoff_s": 0.1, "concurrency": 2, "progress": False, **kw})


def test_the_server_lists_exactly_the_names_the_configuration_gives_it(judge_server):
    cfg = judge_server.config()
    assert judge_served_names(cfg) == ["Qwen/Qwen3.5-9B", "Qwen3.7-Flash"]     # judge.model, codebook.model
    assert sorted(served_models(judge_server.base_url)) == sorted(judge_served_names(cfg))
    assert study_preflight(cfg) == []                                         # tiny: both asked over HTTP


def test_the_judge_gets_an_answer_for_every_item_and_caches_it(judge_server, tmp_path):
    from infer.judge import LLMJudge

    s = settings(judge_server.config(), "judge")
    assert (s.model, s.temperature, s.seed) == ("Qwen/Qwen3.5-9B", 0.0, 2027)
    items = [("Compute 17+12.", "29", "17+12=29. \\boxed{29}"), ("Compute 3+4.", "7", "3+4=8. \\boxed{7}")]
    judge = LLMJudge(s, cache_dir=tmp_path / "cache")
    verdicts = judge.judge_many(items)
    # the tiny model writes no JSON verdict: every answer arrives and is recorded as unparsed, none as an error
    assert all(v.status in ("ok", "unparsed") for v in verdicts), verdicts
    assert judge.client.stats() == {"calls": 2, "cache_hits": 0, "failures": 0}
    again = LLMJudge(s, cache_dir=tmp_path / "cache")
    assert [v.detail for v in again.judge_many(items)] == [v.detail for v in verdicts]   # cached, not re-asked
    assert again.client.stats() == {"calls": 0, "cache_hits": 2, "failures": 0}
    # temperature 0 and the judge's seed: a fresh cache asks again and gets the same replies
    fresh = LLMJudge(s, cache_dir=tmp_path / "fresh")
    assert [v.detail for v in fresh.judge_many(items)] == [v.detail for v in verdicts]


def test_the_codebook_induction_reaches_the_server(judge_server, tmp_path, monkeypatch):
    from infer.codebook import CodebookSettings, Pipeline

    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "data"))
    cfg = judge_server.config()
    pipe = Pipeline("tiny", settings(cfg, "codebook"), CodebookSettings.from_config(cfg))
    assert pipe.client.settings.model == "Qwen3.7-Flash"
    codebooks = pipe.induce_and_merge({"q1": [("t1", "17+12=29"), ("t2", "12+17=29")]}, {"q1": "Compute 17+12."})
    assert pipe.client.stats()["calls"] >= 1 and pipe.client.failures == 0
    # the tiny model proposes no parsable modes: the problem log says so (unparsed, not an endpoint error)
    assert {e["problem"] for e in pipe.log if e["stage"] == "induce"} <= {"unparsed"}
    assert codebooks == {} or all(cb["modes"] for cb in codebooks.values())


def test_a_model_the_server_does_not_serve_fails_before_and_during_a_stage(judge_server, tmp_path):
    url = judge_server.base_url
    cfg = judge_server.config(f'judge.model="{UNSERVED}"')
    with pytest.raises(LLMFailure, match=rf"does not serve '{UNSERVED}' \(it lists: "):
        preflight(settings(cfg, "judge"))
    preflight(settings(judge_server.config(), "judge"))                    # the configured name passes
    client = LLMClient(settings(cfg, "judge"), tmp_path / "cache")
    reqs = [Request([{"role": "user", "content": f"hi {i}"}], {"temperature": 0.0, "max_tokens": 4}) for i in range(6)]
    with pytest.raises(LLMFailure, match=f"judge endpoint {url} model '{UNSERVED}': HTTP 404"):
        client.complete_many(reqs)
    assert 1 <= client.calls <= 2        # a 404 is not retried, and it stops the other requests (2 in flight)


def test_the_labelling_stage_exits_non_zero_naming_endpoint_model_and_status(judge_server, monkeypatch, capsys):
    """`python -m infer.labels modes` (what the study's modes stage runs) with a codebook name the server does
    not serve: exit 1 before any request, one line naming the endpoint, the model and what it lists."""
    from infer.labels import main

    monkeypatch.setenv("RCEA_OVERRIDES", ";".join([*judge_server.overrides, 'codebook.model="Qwen3.7"']))
    assert main(["modes", "--scale", "tiny", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: codebook: {judge_server.base_url} does not serve 'Qwen3.7' (it lists: ")
    assert "Qwen3.7-Flash" in err and "Fix: set codebook.base_url" in err and len(err.splitlines()) == 1


def test_the_study_preflight_asks_the_running_server(judge_server):
    problems = study_preflight(judge_server.config('codebook.model="Qwen3.7"', f'judge.model="{UNSERVED}"'))
    assert [p.split(":")[0] for p in problems] == ["judge", "codebook"]
    assert f"does not serve '{UNSERVED}'" in problems[0] and "does not serve 'Qwen3.7'" in problems[1]
    assert all("Fix: set" in p for p in problems)


def test_the_rehearsals_endpoint_check_reads_a_real_server_as_the_rehearsal_expects(judge_server, monkeypatch,
                                                                                     capsys):
    """tests/e2e's ENDPOINT_CHECK (run in an infer-cli container before the Compose rehearsal) against this
    server: what it prints is what test_rehearsal.py asserts, here without Docker."""
    from tests.e2e.studies import ENDPOINT_CHECK

    monkeypatch.setenv("RCEA_OVERRIDES", ";".join(judge_server.overrides))
    exec(compile(ENDPOINT_CHECK, "ENDPOINT_CHECK", "exec"), {})        # the project's own check script
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ENDPOINTS "))
    out = json.loads(line.removeprefix("ENDPOINTS "))
    assert out["listed"] == ["Qwen/Qwen3.5-9B", "Qwen3.7-Flash"]
    assert out["asked"]["Qwen/Qwen3.5-9B"] == "ok" and out["asked"]["Qwen3.7-Flash"] == "ok"
    assert out["asked"]["Not/Served"].startswith(
        f"codebook endpoint {judge_server.base_url} model 'Not/Served': HTTP 404")


def test_a_prompt_longer_than_the_servers_context_stops_the_stage_with_vllms_reason(judge_server, tmp_path):
    """vLLM answers HTTP 400 to a prompt past --max-model-len: the client stops the stage with vLLM's reason
    and the fix (tests/infer/scripted_server.py's CTX400 mirrors this answer), rather than leaving the item
    unlabelled."""
    client = LLMClient(settings(judge_server.config(), "judge"), tmp_path / "cache")
    long = Request([{"role": "user", "content": "1 + " * 3000}], {"temperature": 0.0, "max_tokens": 4})
    with pytest.raises(LLMFailure, match=rf"judge endpoint {judge_server.base_url} model 'Qwen/Qwen3.5-9B': HTTP 400 "
                                         r"\(the server refused the request: .*maximum context length") as err:
        client.complete_many([long])
    assert "--max-model-len in JUDGE_ARGS" in str(err.value) and client.calls == 1
