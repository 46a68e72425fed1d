"""OpenAI-compatible chat client with a response cache, retries and bounded concurrency.

Every call goes through the `openai` client to the endpoint named in configuration (the judge's
vLLM OpenAI server, or a remote API for the codebook model). Each response is cached on the shared
volume under the SHA-256 of (model, messages, parameters, variant), one JSON file per call written
atomically, so a rerun or a resumed run makes no repeated call. Timeouts, connection errors, 429, 5xx and
a 200 whose body is not a chat completion (an HTML proxy page, truncated or non-JSON text) are retried with
exponential backoff, or after the server's `Retry-After` (seconds or an HTTP date, capped at
`max_retry_after_s`). Permanent failures stop the stage: a 404 (a model the server does not serve),
401/403 (the key), any other 4xx (a request the server refuses: a 400 when the prompt plus max_tokens does
not fit the model's context; retrying cannot help, and answering past it would leave that item silently
unlabelled), or retries exhausted raise `LLMFailure` naming endpoint, model, status, the server's reason
and the fix (the CLIs exit 1 with it; what was answered so far stays cached, so a rerun resumes).
The API key comes from an environment variable or a secret file and is never logged or stored.

WARNING: responses are untrusted model output. They are only ever parsed as JSON with size limits
(`parse_json`), never evaluated.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import threading
import time
from email.utils import parsedate_to_datetime
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcea import records
from rcea.config import base_default
from rcea.store import atomic_write_json

# Keys of the endpoint sections that other records or modules read: [judge] names who labels (infer.labels) and
# the revision the judge server serves (infer.judge_server); [codebook] also holds the codebook's own settings
# (infer.codebook.CodebookSettings, a test keeps the two lists equal).
READ_ELSEWHERE = {"judge": ("labeller", "model_revision"),
                  "codebook": ("induce_seed", "merge_seed", "assign_seed", "assign_passes", "chunk_size",
                               "min_confidence")}
MAX_RESPONSE_CHARS = 200_000  # longer responses are truncated before parsing
MAX_JSON_CHARS = 50_000       # the JSON object itself must be smaller than this


@dataclass(frozen=True)
class LLMSettings:
    """One endpoint. Defaults are configs/base.toml [judge] (read there, not copied); `from_config` reads
    the section a caller names ([judge] or [codebook]) with its scale and overrides."""
    model: str = field(default_factory=base_default("judge.model"))
    base_url: str = field(default_factory=base_default("judge.base_url"))
    api_key_env: str = field(default_factory=base_default("judge.api_key_env"))
    api_key_file: str = ""
    temperature: float = field(default_factory=base_default("judge.temperature"))
    seed: int = field(default_factory=base_default("judge.seed"))
    max_tokens: int = 4096  # room for a thinking model's reasoning before its JSON
    concurrency: int = field(default_factory=base_default("judge.concurrency"))
    timeout_s: float = field(default_factory=base_default("judge.timeout_s"))
    max_retries: int = field(default_factory=base_default("judge.max_retries"))
    backoff_s: float = 1.0
    max_retry_after_s: float = field(default_factory=base_default("judge.max_retry_after_s"))
    progress: bool = True
    section: str = "judge"  # the configs section it came from (named in failures)

    @classmethod
    def from_config(cls, cfg, section: str, **overrides: Any) -> "LLMSettings":
        """The endpoint of `section` ([judge] or [codebook]) with `overrides` (None values ignored), built by
        rcea.records: a key of the section that is neither a field here nor read elsewhere (READ_ELSEWHERE) is
        an error naming it, as is an unknown override."""
        values = {**cfg.section(section), **{k: v for k, v in overrides.items() if v is not None}, "section": section}
        return records.build(cls, values, where=section, others=READ_ELSEWHERE.get(section, ()))

    def params(self, seed: int | None = None) -> dict[str, Any]:
        return {"temperature": self.temperature, "seed": self.seed if seed is None else seed,
                "max_tokens": self.max_tokens}


def api_key(settings: LLMSettings) -> str:
    """The key from the environment variable or the secret file; "EMPTY" for a keyless local server."""
    if settings.api_key_env and os.environ.get(settings.api_key_env):
        return os.environ[settings.api_key_env]
    if settings.api_key_file and Path(settings.api_key_file).is_file():
        return Path(settings.api_key_file).read_text().strip()
    return "EMPTY"


@dataclass
class Request:
    messages: list[dict[str, str]]
    params: dict[str, Any]
    variant: str = ""  # part of the cache key only (e.g. assignment pass), never sent


@dataclass
class Response:
    key: str
    text: str | None
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.text is not None


def request_key(model: str, req: Request) -> str:
    blob = json.dumps({"model": model, "messages": req.messages, "params": req.params, "variant": req.variant},
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _transient(exc: Exception) -> bool:
    import openai
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
                        openai.InternalServerError)):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in (408, 409, 429) or status >= 500)


class NotACompletion(Exception):
    """An HTTP 200 whose body is not a chat completion (retried like a transient fault; the message names
    what came)."""


class LLMFailure(RuntimeError):
    """A permanent failure of an endpoint (404, 401/403, retries exhausted): the stage stops."""


PERMANENT = {401: "the API key is missing or wrong", 403: "the API key is not allowed this model",
             404: "the server does not serve this model"}
REFUSED = "the server refused the request"   # any other 4xx that is not transient (_transient)


def failure(settings: LLMSettings, status: str, hint: str = "", fix: str = "") -> LLMFailure:
    s = settings
    fix = fix or f"check {s.section}.base_url / {s.section}.model and ${s.api_key_env} (invoke doctor)"
    return LLMFailure(f"{s.section} endpoint {s.base_url} model {s.model!r}: {status}"
                      + (f" ({hint})" if hint else "") + f"; {fix}")


def refused_fix(settings: LLMSettings) -> str:
    """The fix for a request the server refuses (HTTP 400 and the like): a context that holds the longest
    prompt plus `max_tokens`, then a rerun, which resumes from the cache."""
    judge = " (the Compose judge: --max-model-len in JUDGE_ARGS)" if settings.section == "judge" else ""
    return (f"serve {settings.model!r} with a context of at least the prompt plus {settings.max_tokens} answer "
            f"tokens{judge}, or fix what the server names; then rerun the stage (answers so far are cached)")


def server_reason(exc: Exception, limit: int = 200) -> str:
    """The `message` of an error body (the openai client hands the body's `error` object, or the whole
    body), or '' when there is none; server text, shown cut to `limit` characters."""
    body = getattr(exc, "body", None)
    msg = body.get("message") if isinstance(body, dict) else body if isinstance(body, str) else None
    return " ".join(str(msg).split())[:limit] if msg else ""


def preflight(settings: LLMSettings) -> None:
    """Before any request: the endpoint must list the model at GET <base_url>/models, else LLMFailure with
    the fix (rcea.endpoints, the same check the study and `invoke doctor` run)."""
    from rcea.endpoints import Endpoint, problem

    found = problem(Endpoint(settings.section, settings.base_url, settings.model, settings.api_key_env,
                             settings.api_key_file), timeout_s=min(settings.timeout_s, 30.0))
    if found:
        raise LLMFailure(found)


def exits_on_failure(main):
    """CLI entry points: an LLMFailure becomes one line on stderr and exit status 1."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except LLMFailure as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return wrapped


def _content(out: Any) -> tuple[str, str | None]:
    """(text, finish_reason) of a chat completion; NotACompletion for anything else (the openai
    client hands back the raw body as a string when the server does not answer JSON)."""
    choices = getattr(out, "choices", None)
    if not choices:
        body = out if isinstance(out, str) else repr(out)
        kind = "HTML" if body.lstrip()[:1] == "<" else "a body that is not a chat completion"
        raise NotACompletion(f"server answered {kind}, not JSON: {body.strip()[:80]}")
    return (choices[0].message.content or "")[:MAX_RESPONSE_CHARS], choices[0].finish_reason


def retry_after_s(exc: Exception, now: float | None = None) -> float | None:
    """Seconds the server asked to wait (`Retry-After`: seconds or an HTTP date), None if it did not say."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class LLMClient:
    settings: LLMSettings
    cache_dir: Path
    calls: int = 0        # HTTP attempts made (including retries)
    cache_hits: int = 0
    failures: int = 0
    stopped: bool = False  # set by the first permanent failure: the other requests stop too
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _client: Any = field(default=None, repr=False)

    def _stop(self) -> None:
        """A permanent failure: counted, and every other request of this client stops."""
        with self._lock:
            self.failures += 1
            self.stopped = True

    def _openai(self):
        if self._client is None:
            import openai
            if not self.settings.base_url:   # the openai client would otherwise call api.openai.com
                raise failure(self.settings, "no endpoint configured", f"{self.settings.section}.base_url is empty")
            # max_retries=0: the openai client's own retry loop is off, so `_call` is the only one (it also
            # caps Retry-After at judge.max_retry_after_s, counts attempts, and never retries an HTML 200).
            self._client = openai.OpenAI(base_url=self.settings.base_url, api_key=api_key(self.settings),
                                         timeout=self.settings.timeout_s, max_retries=0)
        return self._client

    def _path(self, key: str) -> Path:
        return Path(self.cache_dir) / key[:2] / f"{key}.json"

    def cached(self, req: Request) -> Response | None:
        key = request_key(self.settings.model, req)
        p = self._path(key)
        if p.exists():
            try:
                rec = json.loads(p.read_text())
                return Response(key, rec["text"], cached=True)
            except (ValueError, KeyError):
                return None  # a damaged cache file is re-requested
        return None

    def _call(self, req: Request) -> Response:
        hit = self.cached(req)
        key = request_key(self.settings.model, req)
        if hit is not None:
            with self._lock:
                self.cache_hits += 1
            return hit
        last = "no attempt"
        for attempt in range(self.settings.max_retries + 1):
            if self.stopped:
                raise failure(self.settings, "stopped after another request failed permanently")
            with self._lock:
                self.calls += 1
            try:
                out = self._openai().chat.completions.create(model=self.settings.model, messages=req.messages,
                                                             **req.params)
                text, finish = _content(out)
                atomic_write_json(self._path(key), {
                    "key": key, "model": self.settings.model, "params": req.params, "variant": req.variant,
                    "messages_sha256": hashlib.sha256(json.dumps(req.messages, sort_keys=True).encode()).hexdigest(),
                    "text": text, "finish_reason": finish, "attempts": attempt + 1})
                return Response(key, text)
            except LLMFailure:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below
                status = getattr(exc, "status_code", None)
                last = str(exc) if isinstance(exc, NotACompletion) else f"{type(exc).__name__}: {status or ''}".strip()
                if status in PERMANENT:
                    self._stop()
                    raise failure(self.settings, f"HTTP {status}", PERMANENT[status]) from exc
                if isinstance(status, int) and 400 <= status < 500 and not _transient(exc):
                    self._stop()
                    said = server_reason(exc)
                    raise failure(self.settings, f"HTTP {status}", REFUSED + (f": {said}" if said else ""),
                                  refused_fix(self.settings)) from exc
                # a body that is not a chat completion (HTML, truncated or non-JSON text: the openai client
                # raises a JSON decode error or hands back the raw text) is retried like a transient fault
                if not (_transient(exc) or isinstance(exc, (NotACompletion, ValueError))):
                    break
                if attempt == self.settings.max_retries:
                    self._stop()
                    raise failure(self.settings, f"{attempt + 1} attempts failed, the last with {last}",
                                  "retries exhausted") from exc
                asked = retry_after_s(exc)
                time.sleep(self.settings.backoff_s * 2 ** attempt if asked is None
                           else min(asked, self.settings.max_retry_after_s))
        with self._lock:
            self.failures += 1
        return Response(key, None, error=last)

    def complete_many(self, reqs: list[Request], desc: str = "llm") -> list[Response]:
        """Responses in request order; identical requests are made once."""
        from tqdm import tqdm

        keys = [request_key(self.settings.model, r) for r in reqs]
        unique = {k: r for k, r in zip(keys, reqs)}
        results: dict[str, Response] = {}
        with ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency)) as pool, \
                tqdm(total=len(unique), desc=desc, disable=not self.settings.progress, leave=False) as bar:
            futures = {k: pool.submit(self._call, r) for k, r in unique.items()}
            try:
                for k, fut in futures.items():
                    results[k] = fut.result()
                    bar.update(1)
            except LLMFailure:
                self.stopped = True
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        return [results[k] for k in keys]

    def stats(self) -> dict[str, int]:
        return {"calls": self.calls, "cache_hits": self.cache_hits, "failures": self.failures}


_THINK = re.compile(r"<think>.*?</think>", re.S)


def parse_json(text: str | None, max_chars: int = MAX_JSON_CHARS) -> dict | None:
    """The last top-level JSON object in `text`, or None when there is none that parses.

    WARNING: model output. Only `json.loads` touches it, on a bounded slice; nothing is evaluated.
    """
    if not text:
        return None
    text = _THINK.sub("", text[:MAX_RESPONSE_CHARS])
    fence = re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = list(reversed(fence))
    end = text.rfind("}")
    while end != -1 and len(candidates) < 20:
        depth, start = 0, -1
        for i in range(end, max(-1, end - max_chars), -1):
            ch = text[i]
            if ch == "}":
                depth += 1
            elif ch == "{":
                depth -= 1
                if depth == 0:
                    start = i
                    break
        if start != -1:
            candidates.append(text[start:end + 1])
        end = text.rfind("}", 0, start if start != -1 else end)
    for cand in candidates:
        if len(cand) > max_chars:
            continue
        try:
            obj = json.loads(cand)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
