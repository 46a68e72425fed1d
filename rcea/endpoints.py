"""The LLM endpoints of a study (the validity judge and the codebook) and the preflight that asks each one
whether it serves its configured model, before any GPU work starts.

Each endpoint is the user's explicit choice: `judge.base_url` / `judge.model` and `codebook.base_url` /
`codebook.model` (no default: the paper's codebook model runs on a remote OpenAI-compatible API, which the
local judge server does not serve). The check is `GET <base_url>/models` (what vLLM's OpenAI server and hosted
APIs answer), comparing the listed ids with the configured model; a name the server does not serve would
otherwise be a 404 on every request, hours into a study. At 3b/7b the study itself starts the judge server
(the Compose `judge` service, infer/judge_server.py) only at its judge stage, so at study start an endpoint
at judge.base_url is checked by name against `judge_served_names`: judge.model, and codebook.model when
codebook.base_url is explicitly set to the judge's endpoint (the judge's weights then answer that name too).
Standard library only (used by the host's Invoke tasks and by the inference role).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

SECTIONS = ("judge", "codebook")


class EndpointError(RuntimeError):
    """An endpoint that cannot serve its configured model; the message names the fix."""


@dataclass(frozen=True)
class Endpoint:
    section: str        # judge | codebook: the configs section naming it
    base_url: str
    model: str
    api_key_env: str = ""
    api_key_file: str = ""

    def key(self) -> str:
        if self.api_key_env and os.environ.get(self.api_key_env):
            return os.environ[self.api_key_env]
        if self.api_key_file and Path(self.api_key_file).is_file():
            return Path(self.api_key_file).read_text().strip()
        return ""


def labeller(cfg, requested: str | None = None) -> str:
    """`rules` or `llm` for this configuration (`requested` overrides `judge.labeller`): `auto` means the
    toy world's rules where they decide (data.world = toy), the LLM judge and codebook otherwise."""
    want = requested or cfg["judge.labeller"]
    if want not in ("auto", "rules", "llm"):
        raise ValueError(f"unknown labeller {want!r}; valid: auto, rules, llm")
    if want == "auto":
        return "rules" if cfg["data.world"] == "toy" else "llm"
    return want


def judge_served_names(cfg) -> list[str]:
    """The model names the judge server serves (`--served-model-name`): judge.model, and codebook.model when
    codebook.base_url is the judge's endpoint (the user's explicit choice: it has no default), each once."""
    names = [cfg["judge.model"]]
    if cfg["codebook.base_url"] and cfg["codebook.base_url"].rstrip("/") == cfg["judge.base_url"].rstrip("/"):
        names.append(cfg["codebook.model"])
    return list(dict.fromkeys(names))


def endpoints(cfg) -> list[Endpoint]:
    """The endpoints a study of this configuration calls (none when the rules label)."""
    if labeller(cfg) != "llm":
        return []
    out = []
    for s in SECTIONS:
        file_key = f"{s}.api_key_file"
        out.append(Endpoint(s, cfg[f"{s}.base_url"], cfg[f"{s}.model"], cfg[f"{s}.api_key_env"],
                            cfg[file_key] if file_key in cfg else ""))
    return out


def served_models(base_url: str, api_key: str = "", timeout_s: float = 10.0) -> list[str]:
    """The model ids `GET <base_url>/models` lists; EndpointError (naming the URL and the cause) otherwise."""
    url = base_url.rstrip("/") + "/models"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:   # noqa: S310 - a configured endpoint
            body = json.loads(resp.read(1_000_000) or b"{}")
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"{url} answered HTTP {exc.code}" + (" (is the API key set?)" if exc.code in (401, 403)
                                                                  else "")) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise EndpointError(f"{url} cannot be reached ({getattr(exc, 'reason', exc)})") from exc
    except ValueError as exc:
        raise EndpointError(f"{url} did not answer a JSON model list") from exc
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise EndpointError(f"{url} did not answer a model list (no 'data')")
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]


def problem(ep: Endpoint, study_judge: tuple[str, list[str]] | None = None, timeout_s: float = 10.0) -> str | None:
    """One line naming what is wrong with `ep` and the fix, or None when it serves its model.
    `study_judge`: (base_url, served names) of the judge server a 3b/7b study starts later (not running yet):
    an endpoint at that URL is checked against those names instead of asked."""
    fix = (f"set {ep.section}.base_url to an OpenAI-compatible server that serves {ep.model!r} (and its key in "
           f"${ep.api_key_env or 'the key variable'}), or {ep.section}.model to a name that server lists")
    if not ep.base_url:
        return f"{ep.section}.base_url is not set: {ep.section} calls need an endpoint. Fix: {fix}"
    if study_judge is not None and ep.base_url.rstrip("/") == study_judge[0].rstrip("/"):
        if ep.model not in study_judge[1]:
            return (f"{ep.section}: the judge server the study starts at {ep.base_url} serves only "
                    f"{', '.join(map(repr, study_judge[1]))}, not {ep.model!r}. Fix: {fix}")
        return None
    try:
        served = served_models(ep.base_url, ep.key(), timeout_s)
    except EndpointError as exc:
        return f"{ep.section}: {exc}. Fix: start that server, or {fix}"
    if ep.model not in served:
        return (f"{ep.section}: {ep.base_url} does not serve {ep.model!r} (it lists: "
                f"{', '.join(served) or 'nothing'}). Fix: {fix}")
    return None


def stand_ins(cfg) -> list[str]:
    """Warnings (one line each) for an endpoint configured to answer under another model's name: the codebook
    sent to the judge's endpoint is answered by the judge's weights under codebook.model's name, so the
    codebook labels and manifests name a model that did not run. Allowed (a rehearsal, a user without a
    remote API), but said."""
    cb, judge = cfg["codebook.base_url"], cfg["judge.base_url"]
    if labeller(cfg) == "llm" and cb and cb.rstrip("/") == judge.rstrip("/") and cfg["codebook.model"] != cfg["judge.model"]:
        return [f"codebook: {cb} is the judge's endpoint, so {cfg['codebook.model']!r} is answered by the judge's "
                f"weights ({cfg['judge.model']!r}), a stand-in: set codebook.base_url to a server that runs "
                f"{cfg['codebook.model']!r} for the paper's codebook"]
    return []


def study_judge(cfg, scale: str) -> tuple[str, list[str]] | None:
    """(base_url, served names) of the judge server a study at `scale` starts itself (3b/7b), None at tiny."""
    from rcea.launch import launch   # the scale's [launch] judge_server: whether the study starts it

    return (cfg["judge.base_url"], judge_served_names(cfg)) if launch(scale).judge_server else None


def preflight(cfg, scale: str | None = None, timeout_s: float = 10.0) -> list[str]:
    """Problems (one line each, with the fix) of every endpoint a study of `cfg` at `scale` (default: the
    configuration's own) calls; [] when all serve."""
    judge = study_judge(cfg, scale or cfg.scale)
    return [p for ep in endpoints(cfg) if (p := problem(ep, judge, timeout_s))]
