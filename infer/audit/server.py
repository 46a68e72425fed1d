"""The annotation page: a small stdlib HTTP server over the audit SQLite file.

    GET  /                      the page (static/index.html); ?annotator=A, or ?annotator=C&adjudicate=1
    GET  /api/people                             the annotators, the pairs drawn, and what to do when none are
    GET  /api/queue?annotator=A[&adjudicate=1]   ordered pair ids, this annotator's labels, progress
    GET  /api/pair?id=N&annotator=A[&adjudicate=1]   the two blinded trajectories and the problem
    POST /api/label       {"annotator", "pair_id", "label": "same"|"different"}
    POST /api/adjudicate  {"adjudicator", "pair_id", "label", "note"}

Every request gets an HTTP answer (a JSON body {"error": ...} unless 2xx): 400 for malformed input (an id that
is not a whole number in SQLite's range, a Content-Length that is not a non-negative integer, a body that is not
a JSON object, JSON nested too deep), 413 for a body over MAX_BODY bytes, 414 for a target over MAX_TARGET
characters, 408 for a body that does not arrive within TIMEOUT_S, 404 for an unknown path or pair. One rule for
people on every endpoint: a name that is not [A-Za-z0-9_-]{1,32} is 400; labelling (queue, pair, label) is open
to the audit's annotators only (403 for anyone else); adjudicating (adjudicate=1, /api/adjudicate) to any valid
name.

Texts are model output: the page inserts them with textContent only (never as HTML).
"""

from __future__ import annotations

import json
import mimetypes
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from infer.audit import store

STATIC = Path(__file__).parent / "static"
MAX_BODY = 10_000     # bytes of a POST body
MAX_TARGET = 2_048    # characters of the request target (path and query)
TIMEOUT_S = 10.0      # seconds a connection may stay silent (a body shorter than its Content-Length)
MAX_ID = 2**63 - 1    # SQLite's INTEGER range


class Refused(Exception):
    """An answer other than 200: (status, message)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def pair_id(value) -> int:
    """A pair id from a query string or JSON: a whole number in SQLite's range, else Refused(400)."""
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 19:
        value = int(value)
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise Refused(400, "pair id must be a whole number from 0 to 2^63-1")
    return value


def check_person(con, who, adjudicate: bool) -> str:
    """The one rule for who may call an endpoint (see the module doc)."""
    if not store.valid_name(who):
        raise Refused(400, "annotator must match [A-Za-z0-9_-]{1,32}")
    names = store.annotators(con)
    if not adjudicate and who not in names:
        raise Refused(403, f"unknown annotator {who}; the annotators are {', '.join(names)}")
    return who


def people(con, empty_hint: str) -> dict:
    n = con.execute("SELECT COUNT(*) FROM pairs").fetchone()[0]
    return {"annotators": store.annotators(con), "pairs": n, "message": "" if n else empty_hint}


def make_handler(db: Path, empty_hint: str = "no audit pairs drawn yet: draw them first (invoke audit --sample)"):
    class Handler(BaseHTTPRequestHandler):
        default_request_version = "HTTP/1.0"   # every answer, errors included, starts with a status line
        timeout = TIMEOUT_S

        def log_message(self, *args):
            pass

        def parse_request(self):
            if not self.raw_requestline.strip():   # the base class closes a blank request line without a word
                self.command, self.requestline, self.close_connection = None, "", True
                self.request_version = self.default_request_version
                self.send_error(400, "empty request line")
                return False
            return super().parse_request()

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)
            self.answered = True

        def _json(self, obj, status: int = 200) -> None:
            self._send(status, json.dumps(obj).encode())

        def _answer(self, route) -> None:
            """Run `route`; whatever goes wrong, the client gets an HTTP status (and the terminal one line)."""
            self.answered = False
            try:
                if len(self.path) > MAX_TARGET:
                    raise Refused(414, f"request target over {MAX_TARGET} characters")
                try:
                    url = urlparse(self.path)
                except ValueError:   # "http://[x": not a URL
                    raise Refused(400, "malformed request target") from None
                route(url)
            except Refused as exc:
                self._json({"error": str(exc)}, exc.status)
            except TimeoutError:
                self.close_connection = True
                if not self.answered:
                    self._json({"error": f"the body did not arrive within {TIMEOUT_S:g} s"}, 408)
            except (ConnectionError, OSError) as exc:   # the client hung up: nobody to answer
                self.close_connection = True
                print(f"audit page: {self.command} {self.path[:80]!r}: connection lost ({exc})", file=sys.stderr)
            except Exception as exc:   # a bug: the client still gets an answer, the terminal one line
                print(f"audit page: {self.command} {self.path[:80]!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
                if not self.answered:
                    self._json({"error": f"internal error ({type(exc).__name__})"}, 500)

        def do_GET(self):  # noqa: N802
            self._answer(self._get)

        def do_POST(self):  # noqa: N802
            self._answer(self._post)

        def _get(self, url) -> None:
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path in ("/", "/index.html"):
                return self._send(200, (STATIC / "index.html").read_bytes(), "text/html; charset=utf-8")
            if url.path.startswith("/static/"):
                name = url.path[len("/static/"):]
                f = STATIC / name
                if name in {p.name for p in STATIC.iterdir()} and f.is_file():
                    return self._send(200, f.read_bytes(), mimetypes.guess_type(f.name)[0] or "text/plain")
                raise Refused(404, "not found")
            if url.path not in ("/api/people", "/api/queue", "/api/pair"):
                raise Refused(404, "not found")
            adjudicate = q.get("adjudicate") == "1"
            with store.connect(db) as con:
                if url.path == "/api/people":
                    return self._json(people(con, empty_hint))
                who = check_person(con, q.get("annotator", ""), adjudicate)
                if url.path == "/api/queue":
                    if adjudicate:
                        ids = store.disagreements(con)
                        done = {r["pair_id"]: r["label"]
                                for r in con.execute("SELECT pair_id, label FROM adjudications")}
                    else:
                        ids = [r["pair_id"] for r in con.execute("SELECT pair_id FROM pairs ORDER BY position")]
                        done = {r["pair_id"]: r["label"] for r in
                                con.execute("SELECT pair_id, label FROM labels WHERE annotator=?", (who,))}
                    labels = {str(i): done[i] for i in ids if i in done}
                    return self._json({"ids": ids, "labels": labels, "done": len(labels), "total": len(ids),
                                       "message": people(con, empty_hint)["message"]})
                pid = pair_id(q.get("id", ""))
                p = con.execute("SELECT * FROM pairs WHERE pair_id=?", (pid,)).fetchone()
                if p is None:
                    raise Refused(404, "no such pair")
                t = {r["blind_id"]: r["text"] for r in con.execute(
                    "SELECT blind_id, text FROM trajectories WHERE blind_id IN (?,?)", (p["a"], p["b"]))}
                prob = con.execute("SELECT problem FROM questions WHERE question_id=?",
                                   (p["question_id"],)).fetchone()
                return self._json({"pair_id": pid, "position": p["position"],
                                   "problem": prob["problem"] if prob else "",
                                   "left": t.get(p["a"], ""), "right": t.get(p["b"], "")})

        def _body(self) -> dict:
            raw = self.headers.get("Content-Length", "0").strip() or "0"
            if not (raw.isdecimal() and raw.isascii()):
                raise Refused(400, "Content-Length must be a non-negative whole number")
            if int(raw) > MAX_BODY:
                raise Refused(413, f"body over {MAX_BODY} bytes")
            try:
                body = json.loads(self.rfile.read(int(raw)) or b"{}")
            except RecursionError:
                raise Refused(400, "JSON nested too deep") from None
            except ValueError:   # not JSON, or not UTF-8
                raise Refused(400, "body must be a JSON object") from None
            if not isinstance(body, dict):
                raise Refused(400, "body must be a JSON object")
            return body

        def _post(self, url) -> None:
            if url.path not in ("/api/label", "/api/adjudicate"):
                raise Refused(404, "not found")
            body = self._body()
            label = body.get("label")
            if not isinstance(label, str) or label not in store.LABELS:
                raise Refused(400, "need pair_id and label same|different")
            pid = pair_id(body.get("pair_id"))
            adjudicate = url.path == "/api/adjudicate"
            with store.connect(db) as con:
                who = check_person(con, body.get("adjudicator" if adjudicate else "annotator", ""), adjudicate)
            try:
                if adjudicate:
                    store.set_adjudication(db, who, pid, store.LABELS[label], str(body.get("note", "")))
                else:
                    store.set_label(db, who, pid, store.LABELS[label])
            except KeyError:
                raise Refused(404, "no such pair") from None
            return self._json({"ok": True})
    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):   # one line, never a traceback on the terminal
        exc = sys.exc_info()[1]
        print(f"audit page: request from {client_address[0]} failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def make_server(db: Path, host: str = "127.0.0.1", port: int = 8765, empty_hint: str | None = None) -> Server:
    """The page's server, bound (OSError when the port is taken); `empty_hint`: what the page says while no
    pairs are drawn."""
    with store.connect(db):
        pass
    handler = make_handler(Path(db), *([empty_hint] if empty_hint else []))
    return Server((host, port), handler)
