"""The annotation page: a small stdlib HTTP server over the audit SQLite file.

    GET  /                      the page (static/index.html); ?annotator=A, or ?annotator=C&adjudicate=1
    GET  /api/queue?annotator=A[&adjudicate=1]   ordered pair ids, this annotator's labels, progress
    GET  /api/pair?id=N&annotator=A              the two blinded trajectories and the problem
    POST /api/label       {"annotator", "pair_id", "label": "same"|"different"}
    POST /api/adjudicate  {"adjudicator", "pair_id", "label", "note"}

Texts are model output: the page inserts them with textContent only (never as HTML).
"""

from __future__ import annotations

import json
import mimetypes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from infer.audit import store

STATIC = Path(__file__).parent / "static"
MAX_BODY = 10_000


def make_handler(db: Path):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj, status: int = 200) -> None:
            self._send(status, json.dumps(obj).encode())

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path in ("/", "/index.html"):
                return self._send(200, (STATIC / "index.html").read_bytes(), "text/html; charset=utf-8")
            if url.path.startswith("/static/"):
                f = (STATIC / url.path[len("/static/"):]).resolve()
                if STATIC.resolve() in f.parents and f.is_file():
                    return self._send(200, f.read_bytes(), mimetypes.guess_type(f.name)[0] or "text/plain")
                return self._json({"error": "not found"}, 404)
            who = q.get("annotator", "")
            if not store.valid_name(who):
                return self._json({"error": "annotator must match [A-Za-z0-9_-]{1,32}"}, 400)
            with store.connect(db) as con:
                if url.path == "/api/queue":
                    if q.get("adjudicate") == "1":
                        ids = store.disagreements(con)
                        done = {r["pair_id"]: r["label"]
                                for r in con.execute("SELECT pair_id, label FROM adjudications")}
                    else:
                        if who not in store.annotators(con):
                            return self._json({"error": f"unknown annotator {who}"}, 403)
                        ids = [r["pair_id"] for r in con.execute("SELECT pair_id FROM pairs ORDER BY position")]
                        done = {r["pair_id"]: r["label"] for r in
                                con.execute("SELECT pair_id, label FROM labels WHERE annotator=?", (who,))}
                    labels = {str(i): done[i] for i in ids if i in done}
                    return self._json({"ids": ids, "labels": labels, "done": len(labels), "total": len(ids)})
                if url.path == "/api/pair":
                    try:
                        pid = int(q.get("id", ""))
                    except ValueError:
                        return self._json({"error": "id must be an integer"}, 400)
                    p = con.execute("SELECT * FROM pairs WHERE pair_id=?", (pid,)).fetchone()
                    if p is None:
                        return self._json({"error": "no such pair"}, 404)
                    t = {r["blind_id"]: r["text"] for r in con.execute(
                        "SELECT blind_id, text FROM trajectories WHERE blind_id IN (?,?)", (p["a"], p["b"]))}
                    prob = con.execute("SELECT problem FROM questions WHERE question_id=?",
                                       (p["question_id"],)).fetchone()
                    return self._json({"pair_id": pid, "position": p["position"],
                                       "problem": prob["problem"] if prob else "",
                                       "left": t.get(p["a"], ""), "right": t.get(p["b"], "")})
            return self._json({"error": "not found"}, 404)

        def do_POST(self):  # noqa: N802
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length", 0) or 0)
            if length > MAX_BODY:
                return self._json({"error": "body too large"}, 413)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                pid, label = int(body["pair_id"]), store.LABELS[body["label"]]
            except (ValueError, KeyError, TypeError):
                return self._json({"error": "need pair_id and label same|different"}, 400)
            try:
                if url.path == "/api/label":
                    who = body.get("annotator", "")
                    with store.connect(db) as con:
                        allowed = store.annotators(con)
                    if not store.valid_name(who) or who not in allowed:
                        return self._json({"error": f"annotator must be one of {allowed}"}, 403)
                    store.set_label(db, who, pid, label)
                elif url.path == "/api/adjudicate":
                    who = body.get("adjudicator", "")
                    if not store.valid_name(who):
                        return self._json({"error": "bad adjudicator name"}, 400)
                    store.set_adjudication(db, who, pid, label, str(body.get("note", "")))
                else:
                    return self._json({"error": "not found"}, 404)
            except KeyError:
                return self._json({"error": "no such pair"}, 404)
            return self._json({"ok": True})
    return Handler


def make_server(db: Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    with store.connect(db):
        pass
    httpd = ThreadingHTTPServer((host, port), make_handler(Path(db)))
    httpd.daemon_threads = True
    return httpd
