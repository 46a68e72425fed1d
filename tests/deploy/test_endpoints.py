"""LLM endpoints are the user's explicit choice, checked before any GPU work: the study's preflight, `invoke
doctor` (rcea/endpoints.py, orchestrate/ops/study.py). The judge server's names and revision: tests/infer/test_judge_server.py.
The same checks against a real vLLM server: tests/vllm/test_server.py."""

from __future__ import annotations

import json

import pytest
from invoke import MockContext
from invoke.exceptions import Exit

import tasks
from rcea.config import load_config
from rcea.endpoints import Endpoint, endpoints, judge_served_names, preflight, problem, stand_ins, study_judge
from orchestrate.ops import doctor
from orchestrate.ops import study as st
from tests.deploy.test_doctor import NO_GPU_LAPTOP
from tests.infer.scripted_server import ScriptedServer


def _cfg(scale="3b", **kv):
    return load_config(scale, overrides=[f"{k.replace('__', '.')}={json.dumps(v)}" for k, v in kv.items()])


def test_the_codebook_has_no_default_endpoint_and_the_study_says_so():
    problems = preflight(_cfg())
    assert len(problems) == 1, problems            # the judge: the Compose service serving judge.model
    assert problems[0].startswith("codebook.base_url is not set") and "Fix: set codebook.base_url" in problems[0]
    assert "RCEA_CODEBOOK_API_KEY" in problems[0]


def test_an_endpoint_on_the_judge_server_the_study_starts_is_checked_by_name_without_network():
    """At 3b/7b the study starts the judge server at its judge stage: at study start it is not running. It
    will serve judge.model, and codebook.model when the user points codebook.base_url at it (the names
    infer.judge_server passes to --served-model-name): the preflight checks those names, asking no one."""
    on_judge = _cfg(codebook__base_url="http://judge:8000/v1")
    assert judge_served_names(on_judge) == ["Qwen/Qwen3.5-9B", "Qwen3.7-Flash"]
    assert preflight(on_judge, timeout_s=0.01) == []      # http://judge:8000 does not resolve here: not asked
    assert problem(Endpoint("codebook", "http://judge:8000/v1", "Other"), study_judge(on_judge, "3b")) == (
        "codebook: the judge server the study starts at http://judge:8000/v1 serves only 'Qwen/Qwen3.5-9B', "
        "'Qwen3.7-Flash', not 'Other'. Fix: set codebook.base_url to an OpenAI-compatible server that serves "
        "'Other' (and its key in $the key variable), or codebook.model to a name that server lists")
    # the same judge URL at the tiny scale (no judge server started by the study) is asked, and is not there
    tiny = preflight(_cfg("tiny", judge__labeller="llm", judge__base_url="http://127.0.0.1:9/v1",
                          codebook__base_url="http://127.0.0.1:9/v1"), timeout_s=2)
    assert len(tiny) == 2 and all("cannot be reached" in p for p in tiny)


def test_the_codebook_on_the_judges_endpoint_is_said_to_be_a_stand_in(monkeypatch, capsys):
    """Pointing the codebook at the judge works (the judge's weights answer under codebook.model's name), but
    the labels then name a model that never ran: the study says so before it starts."""
    on_judge = _cfg(codebook__base_url="http://judge:8000/v1/")
    assert stand_ins(_cfg(codebook__base_url="https://api.example/v1")) == []
    assert stand_ins(_cfg("tiny", codebook__base_url="http://judge:8000/v1")) == []   # rules label the toy world
    [line] = stand_ins(on_judge)
    assert "'Qwen3.7-Flash' is answered by the judge's weights ('Qwen/Qwen3.5-9B')" in line
    monkeypatch.setattr("rcea.config.load_config", lambda scale: on_judge)
    st.check_endpoints("3b")
    assert "study: warning: codebook: http://judge:8000/v1/ is the judge's endpoint" in capsys.readouterr().out


def test_a_remote_endpoint_is_asked_for_its_models():
    with ScriptedServer(served={"Qwen3.7-Flash"}) as srv:
        assert preflight(_cfg(codebook__base_url=srv.base_url)) == []
        bad = preflight(_cfg(codebook__base_url=srv.base_url, codebook__model="Qwen3.7"))
        assert bad == [f"codebook: {srv.base_url} does not serve 'Qwen3.7' (it lists: Qwen3.7-Flash). Fix: set "
                       "codebook.base_url to an OpenAI-compatible server that serves 'Qwen3.7' (and its key in "
                       "$RCEA_CODEBOOK_API_KEY), or codebook.model to a name that server lists"]
        port = srv.httpd.server_address[1]
    gone = preflight(_cfg(codebook__base_url=f"http://127.0.0.1:{port}/v1"), timeout_s=2)
    assert len(gone) == 1 and "/v1/models cannot be reached" in gone[0] and "Fix: start that server" in gone[0]


def test_rules_labelling_calls_no_endpoint():
    assert endpoints(load_config("tiny")) == []                      # the toy world: rules
    st.check_endpoints("tiny")                                       # nothing to ask, nothing raised
    assert [e.section for e in endpoints(_cfg("tiny", judge__labeller="llm"))] == ["judge", "codebook"]


def test_the_study_stops_before_any_stage_when_an_endpoint_cannot_serve(monkeypatch):
    monkeypatch.setenv("RCEA_OVERRIDES", "")     # the study extends it; monkeypatch puts it back afterwards
    with ScriptedServer(served={"Qwen/Qwen3.5-9B"}) as srv:
        with pytest.raises(Exit) as err:      # MockContext: any command it tried to run would fail loudly
            tasks.study(MockContext(), scale="3b", override=[f'codebook.base_url="{srv.base_url}"'])
    assert err.value.code == 2
    assert "checked before any GPU work" in str(err.value.message) and "does not serve 'Qwen3.7-Flash'" in str(
        err.value.message)


def test_doctor_reports_each_endpoint_with_its_fix(monkeypatch):
    with ScriptedServer(served={"Qwen3.7-Flash"}) as srv:
        monkeypatch.setenv("RCEA_OVERRIDES", f'codebook.base_url="{srv.base_url}"')
        checks = {c.name: c for c in doctor.endpoint_checks("3b")}
        assert checks["codebook endpoint (3b)"].level == "ok"
        monkeypatch.setenv("RCEA_OVERRIDES", f'codebook.base_url="{srv.base_url}";codebook.model="nope"')
        bad = {c.name: c for c in doctor.endpoint_checks("3b")}["codebook endpoint (3b)"]
    assert bad.level == "warn" and "does not serve 'nope'" in bad.detail and bad.fix.startswith("set codebook.base_url")
    judge = checks["judge endpoint (3b)"]   # http://judge:8000/v1: the study starts it; nothing answers here
    assert judge.level == "skip" and judge.detail.startswith("not checked: http://judge:8000/v1/models cannot be "
                                                             "reached") and "'Qwen/Qwen3.5-9B'" in judge.detail


@pytest.mark.parametrize("served,level", [({"Qwen/Qwen3.5-9B"}, "ok"), ({"Qwen/Qwen2.5-7B"}, "warn")])
def test_doctor_says_judge_ok_only_after_asking_its_server(monkeypatch, capsys, served, level):
    """`[OK] judge endpoint` only after /v1/models listed judge.model; a server listing another model is a
    warning; with no server, `[--] ... not checked` (the doctor printed OK there without asking anyone)."""
    with ScriptedServer(served=served) as srv:
        monkeypatch.setenv("RCEA_OVERRIDES", f'judge.base_url="{srv.base_url}"')
        check = {c.name: c for c in doctor.endpoint_checks("3b")}["judge endpoint (3b)"]
    assert check.level == level, check
    if level == "ok":
        assert check.detail == f"{srv.base_url} serves 'Qwen/Qwen3.5-9B' (asked: /v1/models lists it)"
    else:
        assert "does not serve 'Qwen/Qwen3.5-9B' (it lists: Qwen/Qwen2.5-7B)" in check.detail
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    monkeypatch.setattr(doctor, "gather_facts", lambda: dict(NO_GPU_LAPTOP))
    tasks.doctor(MockContext(), scale="3b")
    out = capsys.readouterr().out
    assert "[--  ] judge endpoint (3b): not checked: http://judge:8000/v1/models cannot be reached" in out
    assert "[OK  ] judge endpoint" not in out and "doctor: fine for the tiny scale" in out
