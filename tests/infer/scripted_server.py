"""A local OpenAI-compatible chat server with deterministic scripted answers (test fixture).

The answer depends only on the request (never on call order), except that markers make the first
attempts of a request fail: the judge and codebook pipelines are run against it end to end.

Tasks are recognised by the `TASK: <name>` line of the system message. Markers in a trajectory:
  FATAL        judge: fatal reasoning error            GARBLE   judge: malformed (non-JSON) answer
  ERR500       first two attempts answer HTTP 500
  SLOWONCE     judge: first attempt sleeps (past a short client timeout)
  SLOW         answer after a short sleep              AMBIG    assignment confidence 0.3
  FLIP         assignment pass 2 picks another mode    UNSURE   assignment and arbitration say UNCERTAIN
  RARE         induction ignores its strategy (so assignment proposes NEW)
  LOCALX       induction lists it under another mode (local assignment disagrees)
  BADJSON      assignment pass 1 answers malformed text for the whole batch
  RATE429      first attempt answers HTTP 429 with `Retry-After: <Script.retry_after>`
  HTML200      every attempt answers HTTP 200 with an HTML page (a proxy's error page), not JSON
  TRUNC200     first two attempts answer HTTP 200 with a chat completion cut off mid-JSON
  AUTH401      every attempt answers HTTP 401 (a wrong key)
  CTX400       every attempt answers HTTP 400 as vLLM's server does for a prompt longer than its context
  (a request of an unknown TASK answers HTTP 400 with no reason)
`Script(served={...})` serves only those model names (a request for another answers 404 as vLLM does, and
/v1/models lists them); by default every name is accepted and /v1/models lists "scripted".
Strategies are keywords: factoring, quadratic formula, substitution, graphing.

Toy-world problems ("Compute 17+12.") are answered as a careful model would, by the toy world's own rules
(rcea.toy): the judge calls a solution fatal when it is not process-valid (a false equation, or none), and
a solution's strategy is its rule mode (operands in order, swapped, left pair first, right pair first, other).
Real model output carries no markers, so `Script(faults={"GARBLE": {text, ...}, ...})` attaches markers
to exact solution texts chosen by the test.

Run standalone: python -m tests.infer.scripted_server --port 8011
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STRATEGIES = {
    "factoring": ("Factoring", "Factor the polynomial and read off roots."),
    "quadratic formula": ("Quadratic formula", "Apply the quadratic formula directly."),
    "substitution": ("Substitution", "Introduce a new variable to reduce the equation."),
    "graphing": ("Graphing", "Locate the roots from the graph of the function."),
}
SOLUTION = re.compile(r"### Solution (\w+)\n(.*?)(?=\n### |\Z)", re.S)


# keyed "toy-<rcea.toy.mode label>", so the math keyword search below never matches them
TOY_STRATEGIES = {
    "toy-forward": ("Operands in order", "Add the operands in the order the problem writes them."),
    "toy-swap": ("Swapped operands", "Write the second operand first, then add the first."),
    "toy-left": ("Left pair first", "Add the first two operands, then add the third."),
    "toy-pair": ("Right pair first", "Add the last two operands first, then add the first."),
    "toy-other": ("Other order", "Start from an equation that is not one of the ordered pairs."),
}
STRATEGIES.update(TOY_STRATEGIES)


def toy_problem(user: str) -> str | None:
    """The toy problem line of a prompt ("Compute 17+12."), or None for any other problem."""
    from rcea import toy

    line = user.split("Problem:", 1)[-1].strip().split("\n", 1)[0]
    try:
        toy.operands_of(line)
    except ValueError:
        return None
    return line


def strategy(text: str, problem: str | None = None) -> str | None:
    """The strategy key of a solution: by rcea.toy's rule for a toy problem, else by math keyword."""
    if problem is not None:
        from rcea import toy

        return "toy-" + toy.mode(problem, text)
    low = text.lower()
    hits = [k for k in STRATEGIES if not k.startswith("toy-") and k in low]
    return hits[0] if hits else None


# vLLM's OpenAI server's answer to a prompt longer than --max-model-len (vllm/entrypoints/serve/utils/api_utils.py)
CTX400_MESSAGE = "Input length (5120) exceeds model's maximum context length (4096)."
HTML_PAGE = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>upstream down</body></html>"


class Raw(str):
    """A reply body sent verbatim (not wrapped in a chat completion), with its content type and headers."""

    content_type = "application/json"
    headers: dict[str, str] = {}


def raw(body: str, content_type: str, **headers: str) -> Raw:
    r = Raw(body)
    r.content_type, r.headers = content_type, headers
    return r


class Script:
    def __init__(self, delay: float = 0.0, slow_s: float = 0.15, timeout_sleep_s: float = 3.0,
                 faults: dict[str, set[str]] | None = None, retry_after: str = "1", served=None,
                 err500_retry_after: str | None = None):
        self.delay, self.slow_s, self.timeout_sleep_s = delay, slow_s, timeout_sleep_s
        # ERR500 answers carry `Retry-After: <this>` when set: a CLI run in a subprocess (the client's own 1 s,
        # 2 s backoff, not settable there) then retries at once; the retry itself is still made and counted
        self.err500_retry_after = err500_retry_after
        self.served = None if served is None else set(served)
        self.retry_after = retry_after
        self.times: list[float] = []  # monotonic arrival time of every request
        self.faults = {k: {t.strip() for t in v} for k, v in (faults or {}).items()}
        self.attempts: Counter = Counter()
        self.requests = 0
        self.by_task: Counter = Counter()
        self.seen: list[str] = []  # every prompt received (system + user), for blinding checks
        self.lock = threading.Lock()

    def _solutions(self, user: str) -> list[str]:
        if "<<<" in user:
            return [user.split("<<<\n", 1)[-1].rsplit("\n>>>", 1)[0]]
        return [text for _, text in SOLUTION.findall(user)]

    def marked(self, marker: str, text: str) -> bool:
        """`marker` written in the text, or attached to this exact solution text by `faults`."""
        return marker in text or text.strip() in self.faults.get(marker, ())

    def _request_marked(self, marker: str, user: str) -> bool:
        return marker in user or any(self.marked(marker, t) for t in self._solutions(user))

    # returns (status, body-text or None, sleep seconds)
    def answer(self, body: dict) -> tuple[int, str, float]:
        msgs = body.get("messages", [])
        system = " ".join(m["content"] for m in msgs if m["role"] == "system")
        user = "\n".join(m["content"] for m in msgs if m["role"] == "user")
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self.lock:
            self.requests += 1
            self.times.append(time.monotonic())
            self.seen.append(system + "\n" + user)
            self.attempts[key] += 1
            n = self.attempts[key]
        task = (re.search(r"TASK: ([\w-]+)", system) or [None, "unknown"])[1]
        with self.lock:
            self.by_task[task] += 1
        sleep = self.delay + (self.slow_s if self._request_marked("SLOW", user) else 0.0)
        if self.served is not None and body.get("model") not in self.served:
            return 404, raw(json.dumps({"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                  "type": "NotFoundError", "param": "model", "code": 404}}),
                            "application/json"), 0.0
        if self._request_marked("AUTH401", user):
            return 401, raw(json.dumps({"error": {"message": "Invalid API key", "type": "auth"}}),
                            "application/json"), 0.0
        if self._request_marked("CTX400", user):
            return 400, raw(json.dumps({"error": {"message": CTX400_MESSAGE, "type": "BadRequestError",
                                                  "param": None, "code": 400}}), "application/json"), 0.0
        if self._request_marked("TRUNC200", user) and n <= 2:
            return 200, raw('{"id": "chatcmpl-cut", "object": "chat.completion", "choices": [{"index": 0, "mes',
                            "application/json"), 0.0
        if self._request_marked("ERR500", user) and n <= 2:
            if self.err500_retry_after is not None:
                return 500, raw(json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}),
                                "application/json", **{"Retry-After": self.err500_retry_after}), 0.0
            return 500, "", 0.0
        if self._request_marked("RATE429", user) and n == 1:
            return 429, raw(json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}),
                            "application/json", **{"Retry-After": self.retry_after}), 0.0
        if self._request_marked("HTML200", user):
            return 200, raw(HTML_PAGE, "text/html; charset=utf-8"), 0.0
        if self._request_marked("SLOWONCE", user) and n == 1 and task == "validity-judge":
            sleep += self.timeout_sleep_s  # past a short client timeout; the answer itself is normal
        fn = getattr(self, "task_" + task.replace("-", "_"), None)
        if fn is None:
            return 400, "", 0.0
        return 200, fn(user), sleep

    def task_validity_judge(self, user: str) -> str:
        from rcea import toy

        sol = self._solutions(user)[0]
        if self.marked("GARBLE", sol):
            return "Looks fine to me, mostly, I think."
        problem = toy_problem(user)
        fatal = self.marked("FATAL", sol) or (problem is not None and not toy.process_valid(problem, sol))
        return "<think>checking</think>\n" + json.dumps({"fatal_error": fatal, "reason": "scripted"})

    def task_codebook_induce(self, user: str) -> str:
        names, members = [], {}
        sols = SOLUTION.findall(user)
        problem = toy_problem(user)
        for sid, text in sols:
            s = strategy(text, problem)
            if s and not self.marked("RARE", text) and s not in names:
                names.append(s)
        for sid, text in sols:
            s = strategy(text, problem)
            if s in names:
                if self.marked("LOCALX", text) and len(names) > 1:  # the local grouping disagrees with later passes
                    s = names[(names.index(s) + 1) % len(names)]
                members.setdefault(s, []).append(sid)
        modes = [{"name": STRATEGIES[s][0], "definition": STRATEGIES[s][1], "members": members.get(s, [])}
                 for s in names]
        return "```json\n" + json.dumps({"modes": modes}) + "\n```"

    def task_codebook_merge(self, user: str) -> str:
        cands = re.findall(r"^- \[(C\d+)\] (.+?):", user, re.M)
        seen = sorted({n for _, n in cands})
        by_name = {v[0]: v for v in STRATEGIES.values()}
        modes = [{"name": n, "definition": by_name[n][1], "merged": [c for c, m in cands if m == n]}
                 for n in seen if n in by_name]
        return json.dumps({"modes": modes})

    def _codebook(self, user: str) -> dict[str, str]:
        return {name: mid for mid, name in re.findall(r"^(M\d+): (.+?) — ", user, re.M)}

    def task_codebook_assign(self, user: str) -> str:
        pass_no = int((re.search(r"Assignment pass: (\d)", user) or [0, "1"])[1])
        cb = self._codebook(user)
        if pass_no == 1 and self._request_marked("BADJSON", user):
            return '{"assignments": [ {"id": "t1", "mode": '
        out = []
        ids = sorted(cb.values(), key=lambda m: int(m[1:]))
        problem = toy_problem(user)
        for sid, text in SOLUTION.findall(user):
            s = strategy(text, problem)
            item = {"id": sid, "confidence": 0.3 if self.marked("AMBIG", text) else 0.9}
            if self.marked("UNSURE", text) or s is None:
                item["mode"] = "UNCERTAIN"
            elif STRATEGIES[s][0] in cb:
                mid = cb[STRATEGIES[s][0]]
                if self.marked("FLIP", text) and pass_no == 2 and len(ids) > 1:
                    mid = ids[(ids.index(mid) + 1) % len(ids)]
                item["mode"] = mid
            else:
                item["mode"] = "NEW"
                item["proposed"] = {"name": STRATEGIES[s][0], "definition": STRATEGIES[s][1]}
            out.append(item)
        return json.dumps({"assignments": out})

    def task_codebook_arbitrate(self, user: str) -> str:
        cb = self._codebook(user)
        out = []
        problem = toy_problem(user)
        for sid, text in SOLUTION.findall(user):
            s = strategy(text, problem)
            if self.marked("UNSURE", text) or s is None:
                out.append({"id": sid, "mode": "UNCERTAIN", "confidence": 0.2})
            elif STRATEGIES[s][0] in cb:
                out.append({"id": sid, "mode": cb[STRATEGIES[s][0]], "confidence": 0.95})
            else:
                out.append({"id": sid, "mode": "NEW", "confidence": 0.9,
                            "proposed": {"name": STRATEGIES[s][0], "definition": STRATEGIES[s][1]}})
        return json.dumps({"assignments": out})

    def task_codebook_extend(self, user: str) -> str:
        by_name = {v[0]: v[1] for v in STRATEGIES.values()}
        out = [{"proposal": pid, "decision": "confirm", "name": name,
                "definition": by_name.get(name, "A distinct method.")}
            for pid, name in re.findall(r"^(P\d+): (.+?) — ", user, re.M)]
        return json.dumps({"decisions": out})


def make_handler(script: Script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):  # what a vLLM server answers to a health check and a model listing
            if self.path not in ("/health", "/v1/models"):
                self.send_error(404)
                return
            names = sorted(script.served) if script.served is not None else ["scripted"]
            body = b"" if self.path == "/health" else json.dumps(
                {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            status, text, sleep = script.answer(body)
            if sleep:
                time.sleep(sleep)
            ctype, headers = "application/json", {}
            if isinstance(text, Raw):
                payload, ctype, headers = text.encode(), text.content_type, text.headers
            elif status != 200:
                payload = json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}).encode()
            else:
                payload = json.dumps({
                    "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
    return Handler


def llm_settings(srv: "ScriptedServer", **kw):
    """Client settings for the scripted server: no progress bar, fast backoff, a 5 s timeout unless given."""
    from infer.llm import LLMSettings

    return LLMSettings(**{"model": "scripted", "base_url": srv.base_url, "progress": False, "backoff_s": 0.01,
                          "timeout_s": 5.0, **kw})


def kill_when_cached(cmd: list[str], env: dict, cache, at: int, timeout_s: float = 120.0) -> int:
    """Start `cmd`, SIGKILL it once `cache` holds `at` answers (or it exits, or time runs out); returns how
    many answers were cached by then."""
    import signal
    import subprocess
    from pathlib import Path

    from rcea.paths import project_root

    cache = Path(cache)
    proc = subprocess.Popen(cmd, cwd=project_root(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(list(cache.rglob("*.json"))) < at and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return len(list(cache.rglob("*.json")))


class ScriptedServer:
    """Context manager: `with ScriptedServer() as srv: srv.base_url, srv.script.requests`."""

    def __init__(self, port: int = 0, **script_kwargs):
        self.script = Script(**script_kwargs)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), make_handler(self.script))
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    with ScriptedServer(args.port, delay=args.delay) as srv:
        print(srv.base_url, flush=True)
        srv.thread.join()


if __name__ == "__main__":
    main()


# ---- a tiny probe-samples fixture in the RCEA schema ---------------------------------------------

FIXTURE_TEXTS = {
    # question -> list of (reward, text); each text is one probe completion
    "q1": [
        (1, "We use factoring: x^2-5x+6=(x-2)(x-3), so the roots are 2 and 3. \\boxed{5}"),
        (1, "By the quadratic formula x=(5±1)/2, giving 2 and 3. \\boxed{5}"),
        (1, "Factoring gives (x-2)(x-3). ERR500 \\boxed{5}"),
        (1, "Quadratic formula: discriminant 1, roots 3 and 2. SLOWONCE \\boxed{5}"),
        (1, "Factoring, but 2*3=5 so FATAL error here. \\boxed{5}"),
        (1, "GARBLE factoring the polynomial. \\boxed{5}"),
        (1, "Factoring quickly, AMBIG wording. \\boxed{5}"),
        (1, "Quadratic formula once more, FLIP case. \\boxed{5}"),
        (0, "Guess 7. \\boxed{7}"),
        (1, "Factoring the trinomial SLOW. \\boxed{5}"),
    ],
    "q2": [
        (1, "Substitution u=x^2 turns it into a quadratic. \\boxed{4}"),
        (1, "Factoring x^4-5x^2+4=(x^2-1)(x^2-4). \\boxed{4}"),
        (1, "Substitution with u = x^2 again BADJSON. \\boxed{4}"),
        (1, "Graphing the quartic shows four crossings RARE. \\boxed{4}"),
        (1, "I am not sure how, UNSURE, but the count is four. \\boxed{4}"),
        (1, "Substitution t=x^2, then solve. \\boxed{4}"),
        (0, "Two roots. \\boxed{2}"),
        (1, "Factoring as a difference of squares. \\boxed{4}"),
    ],
    "q3": [
        (1, "Factoring 2x^2-8 = 2(x-2)(x+2). \\boxed{2}"),
        (1, "Quadratic formula on 2x^2-8. \\boxed{2}"),
        (1, "Factoring again, the same way LOCALX. \\boxed{2}"),
        (1, "Quadratic formula with a=2. \\boxed{2}"),
    ],
}
FIXTURE_QUESTIONS = {
    "q1": ("Find the sum of the roots of x^2-5x+6=0.", "5"),
    "q2": ("How many real roots does x^4-5x^2+4 have?", "4"),
    "q3": ("Find the positive root of 2x^2-8=0.", "2"),
}


def write_probe_fixture(data_root, scale: str = "tiny", checkpoints=(("base", 0), ("grpo", 50))) -> None:
    """Samples table (schema `samples`) + `texts` + `questions` side tables under data_root/infer/<scale>/tables.

    Each checkpoint repeats the question's texts (with the checkpoint named in the text of the second,
    so the two are distinct completions)."""
    from pathlib import Path

    import pandas as pd

    tables = Path(data_root) / "infer" / scale / "tables"
    rows, texts = [], []
    for method, step in checkpoints:
        for qid, items in FIXTURE_TEXTS.items():
            for k, (reward, text) in enumerate(items):
                key = {"scale": scale, "method": method, "step": step, "question_id": qid, "sample": k}
                rows.append({**key, "benchmark": "math500", "reward": reward, "n_tokens": 20 + k,
                             "logprob_sum": -3.0 - k, "token_entropy_mean": 0.5, "truncated": False,
                             "process_valid": None, "mode": None})
                texts.append({**key, "text": text if step == 0 else text.replace("\\boxed", "Thus \\boxed")})
    samples = pd.DataFrame(rows)
    samples["process_valid"] = samples["process_valid"].astype("boolean")
    samples["mode"] = samples["mode"].astype("string")
    from rcea.store import write_parquet
    for (method, step), part in samples.groupby(["method", "step"], sort=True):  # one part per probe job, as infer/
        write_parquet(part.reset_index(drop=True), tables / "samples" / f"probe-{method}-{step}.parquet",
                      stage="fixture")
    for name, df in (("texts", pd.DataFrame(texts)),
                     ("questions", pd.DataFrame([{"question_id": q, "problem": p, "answer": a}
                                                 for q, (p, a) in FIXTURE_QUESTIONS.items()]))):
        (tables / name).mkdir(parents=True, exist_ok=True)
        df.to_parquet(tables / name / "part-00000.parquet", index=False)
