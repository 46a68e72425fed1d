"""The cached, retrying, concurrent OpenAI-compatible client against the scripted local server."""

import json
import time

import pytest

from infer.llm import LLMClient, LLMFailure, LLMSettings, Request, parse_json
from tests.infer.scripted_server import ScriptedServer


def judge_req(text, seed=2027):
    return Request([{"role": "system", "content": "TASK: validity-judge"},
                    {"role": "user", "content": f"Solution:\n<<<\n{text}\n>>>"}],
                   {"temperature": 0.0, "seed": seed, "max_tokens": 64})


def settings(srv, **kw):
    base = dict(model="scripted", base_url=srv.base_url, timeout_s=1.0, max_retries=3, backoff_s=0.01,
                concurrency=4, progress=False, api_key_env="RCEA_TEST_KEY")
    base.update(kw)
    return LLMSettings(**base)


def test_parse_json_variants():
    assert parse_json('<think>{"fatal_error": true}</think> final: {"fatal_error": false}') == {"fatal_error": False}
    assert parse_json('```json\n{"a": {"b": 1}}\n```\nbye') == {"a": {"b": 1}}
    assert parse_json('text {"a": 1} more {"b": [1, 2]} end') == {"b": [1, 2]}
    assert parse_json('{"assignments": [ {"id": "t1", "mode": ') is None
    assert parse_json("no json at all") is None
    assert parse_json(None) is None
    assert parse_json('{"x": "' + "a" * 60_000 + '"}') is None  # over the size limit
    assert parse_json('{"x": 1}', max_chars=3) is None


def test_cache_makes_second_run_free(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_TEST_KEY", "sk-very-secret-123")
    with ScriptedServer() as srv:
        reqs = [judge_req("fine"), judge_req("FATAL"), judge_req("fine", seed=1), judge_req("fine")]
        c1 = LLMClient(settings(srv), tmp_path / "cache")
        r1 = c1.complete_many(reqs)
        assert [json.loads(r.text.split("</think>")[-1])["fatal_error"] for r in r1] == [False, True, False, False]
        assert srv.script.requests == 3 and c1.calls == 3  # the duplicate request is made once
        c2 = LLMClient(settings(srv), tmp_path / "cache")
        r2 = c2.complete_many(reqs)
        assert srv.script.requests == 3 and c2.calls == 0 and c2.cache_hits == 3
        assert [r.text for r in r2] == [r.text for r in r1] and all(r.cached for r in r2)
        # a different model is a different cache key
        c3 = LLMClient(settings(srv, model="other"), tmp_path / "cache")
        c3.complete_many(reqs[:1])
        assert c3.calls == 1
    blob = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert "sk-very-secret-123" not in blob


def test_retries_500_and_timeouts(tmp_path):
    with ScriptedServer(timeout_sleep_s=2.5) as srv:
        c = LLMClient(settings(srv), tmp_path / "cache")
        r = c.complete_many([judge_req("ERR500 x"), judge_req("SLOWONCE y")])
        assert all(x.ok for x in r)
        assert c.calls == 3 + 2  # two 500s then success; one timeout then success
        assert c.failures == 0


def test_retries_exhausted_stop_with_endpoint_model_and_status_and_cache_nothing(tmp_path):
    with ScriptedServer() as srv:
        c = LLMClient(settings(srv, max_retries=1), tmp_path / "cache")
        with pytest.raises(LLMFailure) as err:
            c.complete_many([judge_req("ERR500 z")])
        msg = str(err.value)
        assert c.calls == 2 and srv.base_url in msg and "'scripted'" in msg
        assert "2 attempts failed, the last with InternalServerError: 500" in msg and "retries exhausted" in msg
        assert not list((tmp_path / "cache").rglob("*.json"))
        # a later run retries and succeeds (third attempt of ERR500 succeeds on the server)
        c2 = LLMClient(settings(srv, max_retries=1), tmp_path / "cache")
        assert c2.complete_many([judge_req("ERR500 z")])[0].ok


def test_a_request_the_server_refuses_stops_the_stage_with_the_reason_and_the_fix(tmp_path):
    """HTTP 400 (vLLM: the prompt does not fit the model's context) is neither retried nor left as one silent
    unlabelled item: the first one stops every request with one line naming endpoint, model, status, the
    server's reason and the fix; what was answered before stays cached, so a rerun resumes."""
    from tests.infer.scripted_server import CTX400_MESSAGE

    with ScriptedServer() as srv:
        c = LLMClient(settings(srv, max_retries=3, concurrency=1), tmp_path / "cache")
        with pytest.raises(LLMFailure) as err:
            c.complete_many([judge_req("fine a"), judge_req("CTX400 too long"), judge_req("fine b")])
        msg = str(err.value)
        assert msg.startswith(f"judge endpoint {srv.base_url} model 'scripted': HTTP 400 (the server refused the "
                              f"request: {CTX400_MESSAGE})"), msg
        assert "--max-model-len in JUDGE_ARGS" in msg and "4096 answer tokens" in msg and "\n" not in msg
        assert c.calls == 2 and c.failures == 1 and c.stopped     # not retried; the third request never sent
        assert srv.script.requests == 2 and len(list((tmp_path / "cache").rglob("*.json"))) == 1
        # any other refusal (the server answers an unknown task with a 400) stops the same way
        c = LLMClient(settings(srv, section="codebook"), tmp_path / "cache2")
        with pytest.raises(LLMFailure, match=r"^codebook endpoint .* HTTP 400 \(the server refused the request: "
                                             r"scripted failure\); serve 'scripted' with a context"):
            c.complete_many([Request([{"role": "user", "content": "hi"}], {"temperature": 0.0})])
        assert c.calls == 1


def test_a_refused_judge_request_fails_the_validity_stage(tmp_path):
    """Through the judge: the item is not left with an `error` verdict while the stage goes on."""
    from infer.judge import LLMJudge

    with ScriptedServer() as srv:
        judge = LLMJudge(settings(srv, max_retries=1), tmp_path / "cache")
        assert [v.status for v in judge.judge_many([("Find x.", "1", "x = 1")])] == ["ok"]
        with pytest.raises(LLMFailure, match="HTTP 400"):
            judge.judge_many([("Find x.", "1", "x = 1"), ("Find y.", "2", "CTX400 y = 2")])


def test_requests_run_concurrently(tmp_path):
    """Concurrency is read from what the server saw (arrival times), not from the wall clock, so a
    loaded machine cannot make it fail: with 8 workers several requests arrive while the first is still
    being answered; with 1 worker each arrives only after the previous answer (the server's delay)."""
    delay = 0.6
    with ScriptedServer(delay=delay) as srv:
        c = LLMClient(settings(srv, concurrency=8), tmp_path / "cache")
        r = c.complete_many([judge_req(f"item {i}") for i in range(8)])
        assert all(x.ok for x in r)
        t = sorted(srv.script.times)
        in_flight_with_first = sum(1 for x in t if x - t[0] < delay)
        assert in_flight_with_first >= 2, t  # sequential would give exactly 1
        n = len(t)
        c1 = LLMClient(settings(srv, concurrency=1), tmp_path / "cache1")
        c1.complete_many([judge_req(f"item {i}") for i in range(3)])
        seq = srv.script.times[n:]
        assert len(seq) == 3 and all(b - a >= delay for a, b in zip(seq, seq[1:])), seq


def _gap(srv) -> float:
    """Seconds between the first and the second request the server received."""
    return srv.script.times[1] - srv.script.times[0]


@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_is_honoured(tmp_path, form):
    """A 429 asking for a wait gets it, however short the client's own backoff (0.01 s here)."""
    from email.utils import formatdate

    value = "2" if form == "seconds" else formatdate(time.time() + 3, usegmt=True)
    with ScriptedServer(retry_after=value) as srv:
        c = LLMClient(settings(srv), tmp_path / "cache")
        r = c.complete_many([judge_req("RATE429 a")])[0]
        assert r.ok and c.calls == 2
        assert 1.5 <= _gap(srv) < 4.5  # an HTTP date has whole seconds: 2..3 s from the first answer


def test_retry_after_is_bounded(tmp_path):
    with ScriptedServer(retry_after="3600") as srv:
        c = LLMClient(settings(srv, max_retry_after_s=0.3), tmp_path / "cache")
        assert c.complete_many([judge_req("RATE429 b")])[0].ok
        assert 0.25 <= _gap(srv) < 2.0


def test_html_answer_is_retried_then_names_the_cause(tmp_path):
    """An HTTP 200 with an HTML page (a proxy's error page) is retried like a transient fault; on every
    attempt it stops the stage with a message that says what came."""
    with ScriptedServer() as srv:
        c = LLMClient(settings(srv, max_retries=1), tmp_path / "cache")
        with pytest.raises(LLMFailure, match="the last with server answered HTML, not JSON: <!DOCTYPE html>"):
            c.complete_many([judge_req("HTML200 c")])
        assert c.calls == 2 and srv.script.requests == 2
        assert not list((tmp_path / "cache").rglob("*.json"))


def test_truncated_json_200_is_retried_like_a_transient_fault(tmp_path):
    with ScriptedServer() as srv:
        c = LLMClient(settings(srv, max_retries=3), tmp_path / "cache")
        r = c.complete_many([judge_req("TRUNC200 d")])[0]
        assert r.ok and json.loads(r.text.split("</think>")[-1])["fatal_error"] is False
        assert c.calls == 3 and c.failures == 0    # two cut-off bodies, then the whole answer


def test_a_model_the_server_does_not_serve_stops_at_once_naming_endpoint_model_and_404(tmp_path):
    """vLLM answers 404 for a model it does not serve: no retry, no silent null labels."""
    with ScriptedServer(served={"Qwen/Qwen3.5-9B"}) as srv:
        c = LLMClient(settings(srv, model="Qwen3.7-Flash", concurrency=2, section="codebook"), tmp_path / "cache")
        with pytest.raises(LLMFailure) as err:
            c.complete_many([judge_req(f"item {i}") for i in range(12)])
        msg = str(err.value)
        assert msg.startswith(f"codebook endpoint {srv.base_url} model 'Qwen3.7-Flash': HTTP 404"), msg
        assert "does not serve this model" in msg and "codebook.base_url / codebook.model" in msg
        assert srv.script.requests <= 4, "requests went on after the first 404"
        # the served name works on the same server
        ok = LLMClient(settings(srv, model="Qwen/Qwen3.5-9B"), tmp_path / "cache2").complete_many([judge_req("x")])
        assert ok[0].ok


def test_a_rejected_key_stops_with_401(tmp_path):
    with ScriptedServer() as srv:
        c = LLMClient(settings(srv), tmp_path / "cache")
        with pytest.raises(LLMFailure, match=r"model 'scripted': HTTP 401 \(the API key is missing or wrong\)"):
            c.complete_many([judge_req("AUTH401 e")])
        assert c.calls == 1


def test_no_endpoint_refuses_instead_of_calling_a_default_api(tmp_path):
    c = LLMClient(LLMSettings(model="m", base_url="", section="codebook", progress=False), tmp_path / "cache")
    with pytest.raises(LLMFailure, match="codebook.base_url is empty"):
        c.complete_many([judge_req("x")])


def test_endpoint_and_codebook_settings_are_built_strictly_from_their_sections():
    """rcea.records.build: every key of [judge] and [codebook] is a field of a record or named as read elsewhere;
    an unknown key (or override) stops naming it, instead of being dropped."""
    from infer.codebook import CodebookSettings
    from infer.llm import READ_ELSEWHERE
    from rcea.config import load_config
    from rcea.records import RecordError, names

    cfg = load_config("tiny")
    judge = LLMSettings.from_config(cfg, "judge", model="m", base_url=None)
    assert (judge.model, judge.base_url, judge.section) == ("m", cfg["judge.base_url"], "judge")
    assert isinstance(judge.timeout_s, float)
    cb = CodebookSettings.from_config(cfg)
    assert (cb.induce_seed, cb.min_confidence) == (cfg["codebook.induce_seed"], cfg["codebook.min_confidence"])
    own = set(cfg.section("codebook")) - set(names(LLMSettings))
    assert own == set(READ_ELSEWHERE["codebook"]) and own <= set(names(CodebookSettings))   # the lists agree

    class WithExtra:
        def __init__(self, extra):
            self.extra = extra

        def section(self, name):
            return {**cfg.section(name), **self.extra}

    with pytest.raises(RecordError, match="judge has no setting 'temprature'; valid: model, base_url"):
        LLMSettings.from_config(WithExtra({"temprature": 0.5}), "judge")
    with pytest.raises(RecordError, match="codebook has no setting 'chunksize'"):
        CodebookSettings.from_config(WithExtra({"chunksize": 4}))
    with pytest.raises(RecordError, match="judge has no setting 'modle'"):
        LLMSettings.from_config(cfg, "judge", modle="m")
    with pytest.raises(RecordError, match="judge.concurrency must be int, got '8'"):
        LLMSettings.from_config(WithExtra({"concurrency": "8"}), "judge")
