"""The audit page's server answers every request with an HTTP status line: the six requests that once got no
answer (and a traceback on the server's terminal), one rule for unknown annotators, and a bounded fuzz over
loopback (127.0.0.1 only, a fixed seed, a fixed count and a time limit; the server stops with the test)."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infer.audit import store
from infer.audit.server import MAX_BODY, make_server

STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")


def build_db(db: Path) -> None:
    with store.connect(db) as con:
        con.execute("INSERT INTO meta VALUES ('annotators', 'A,B')")
        con.execute("INSERT INTO questions VALUES ('q1', 'What is 2+3?')")
        for i in range(3):
            con.execute("INSERT INTO trajectories VALUES (?,?,?,?,?)", (f"b{i}", f"x|{i}", "q1", f"t{i} \\boxed{{5}}", "M"))
        for pos, (a, b) in enumerate([(0, 1), (1, 2)]):
            con.execute("INSERT INTO pairs (position, question_id, a, b) VALUES (?,?,?,?)", (pos, "q1", f"b{a}", f"b{b}"))


@pytest.fixture
def server(tmp_path, capfd):
    db = tmp_path / "audit.sqlite"
    build_db(db)
    httpd = make_server(db, port=0)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd.server_address[1], db
    httpd.shutdown()
    httpd.server_close()
    assert "Traceback" not in capfd.readouterr().err   # the server's terminal: never a traceback


def raw(port: int, data: bytes, timeout: float = 15.0) -> int | None:
    """Send `data`, end the request (half-close), and return the answer's status (None: no status line)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:   # the server answered early (413) and closed: read what it said
            pass
        out = b""
        try:
            while len(out) < 64:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    m = STATUS.match(out)
    return int(m[1]) if m else None


def post(path: str, body: bytes, headers: str | None = None) -> bytes:
    head = headers if headers is not None else f"Content-Length: {len(body)}\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body


def get(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


SIX = [  # the requests that got no answer, and what they get now
    ("id of 30 digits", get("/api/pair?id=" + "9" * 30 + "&annotator=A"), 400),
    ("pair_id 1e400", post("/api/label", b'{"annotator": "A", "pair_id": 1e400, "label": "same"}'), 400),
    ("pair_id 10^30", post("/api/label", b'{"annotator": "A", "pair_id": 1' + b"0" * 30 + b', "label": "same"}'), 400),
    ("JSON nested 4,900 deep", post("/api/label", b"[" * 4900 + b"]" * 4900), 400),
    ("Content-Length: abc", post("/api/label", b"{}", "Content-Length: abc\r\n"), 400),
    ("Content-Length: -1", post("/api/label", b'{"annotator": "A"}', "Content-Length: -1\r\n"), 400),
]


@pytest.mark.parametrize("name, request_bytes, status", SIX, ids=[s[0] for s in SIX])
def test_the_six_requests_get_their_status(server, name, request_bytes, status):
    port, _ = server
    t = time.monotonic()
    assert raw(port, request_bytes) == status
    assert time.monotonic() - t < 5   # `-1` read until the client hung up


def test_sizes_and_the_one_rule_for_people(server):
    port, db = server
    assert raw(port, post("/api/label", b"{}", f"Content-Length: {MAX_BODY + 1}\r\n")) == 413
    assert raw(port, get("/api/queue?annotator=A&x=" + "y" * 3000)) == 414
    assert raw(port, b"\r\n") == 400 and raw(port, b"GARBAGE\r\n\r\n") == 400 and raw(port, b"GET /\r\n") == 200
    assert raw(port, get("http://[x/api/queue?annotator=A")) == 400   # not a URL (urlparse's ValueError)
    for who, status in (("Z", 403), ("A", 200), ("bad name!", 400)):   # the same status on every endpoint
        q = who.replace(" ", "%20")
        assert raw(port, get(f"/api/queue?annotator={q}")) == status, who
        assert raw(port, get(f"/api/pair?id=1&annotator={q}")) == status, who
        body = json.dumps({"annotator": who, "pair_id": 1, "label": "same"}).encode()
        assert raw(port, post("/api/label", body)) == status, who
    assert raw(port, get("/api/pair?id=1&annotator=C&adjudicate=1")) == 200   # an adjudicator: any valid name
    assert raw(port, post("/api/adjudicate", b'{"adjudicator": "C", "pair_id": 1, "label": "same"}')) == 200
    assert raw(port, post("/api/adjudicate", b'{"adjudicator": "C", "pair_id": 99, "label": "same"}')) == 404
    with store.connect(db) as con:   # exactly the two accepted writes
        assert [tuple(r) for r in con.execute("SELECT annotator, pair_id, label FROM labels")] == [("A", 1, 0)]
        assert con.execute("SELECT COUNT(*) FROM adjudications").fetchone()[0] == 1


def fuzz_request(rng: random.Random) -> bytes:
    """A random request: bytes, or a valid request with a mutated line, header, length or body."""
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    path = rng.choice(["/api/label", "/api/adjudicate", "/api/pair", "/api/queue", "/api/people", "/", "/static/app.js",
                       "/static/../server.py", "/%00", "/x" * rng.randrange(1, 1200), "http://[x/api/pair"])
    query = "&".join(f"{rng.choice(['id', 'annotator', 'adjudicate', 'x'])}="
                     f"{rng.choice(['A', 'Z', '1', '-1', '9' * 40, '1e400', '%ff', '', 'C'])}"
                     for _ in range(rng.randrange(4)))
    body = rng.choice([b"", b"{}", b"null", b"[1]", b'{"pair_id": "x"}', b"\xff\xfe", b"[" * 3000,
                       json.dumps({"annotator": rng.choice(["A", "Z", 7, None]), "pair_id": rng.choice(
                           [1, 2, -5, 10**30, 1.5, "1", True, [1]]), "label": rng.choice(["same", "nope", 0, {}])}).encode()])
    length = rng.choice([str(len(body)), "abc", "-1", "", " 5", str(MAX_BODY * 2), "0x10", str(len(body)), "１"])
    headers = [f"Content-Length: {length}"] if rng.random() < 0.9 else []
    headers += rng.choice([[], ["Transfer-Encoding: chunked"], ["Expect: 100-continue"], ["X: " + "y" * 70000],
                           [f"H{i}: v" for i in range(120)], ["no colon here"], ["Content-Length: 3"]])
    method = rng.choice(["GET", "POST", "POST", "PUT", "HEAD", "G\x00T", "DELETE"])
    version = rng.choice(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "FTP/1.0", ""])
    line = f"{method} {path}{'?' + query if query else ''} {version}".rstrip()
    if kind == 1:   # a byte flipped somewhere
        data = bytearray((line + "\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "replace") + body)
        data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return (line + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode("utf-8", "replace") + body


def test_fuzz_every_request_gets_an_http_answer(server):
    port, _ = server
    rng, end, seen = random.Random(2041), time.monotonic() + 60, {}
    for i in range(300):   # bounded: 300 requests or 60 s, whichever comes first
        if time.monotonic() > end:
            break
        data = fuzz_request(rng)
        status = raw(port, data)
        assert status is not None, (i, data[:200])
        assert 200 <= status < 600 and status != 500, (i, status, data[:200])
        seen[status] = seen.get(status, 0) + 1
    print("fuzz statuses:", dict(sorted(seen.items())))
    assert sum(seen.values()) >= 100 and {400, 404}.issubset(seen), seen


def serve_cli(tmp_path, *args) -> subprocess.Popen:
    from rcea.paths import project_root

    import os
    env = {**os.environ, "RCEA_DATA": str(tmp_path / "data")}
    return subprocess.Popen([sys.executable, "-m", "infer.audit", "serve", "--scale", "tiny", *args],
                            cwd=project_root(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = serve_cli(tmp_path, "--port", str(port))
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f":{port}" in err and "--port N" in err, err


def test_serve_on_given_port_says_to_draw_the_sample_first(tmp_path):
    with socket.socket() as s:   # a free port, named explicitly
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = serve_cli(tmp_path, "--port", str(port))
    try:
        url = proc.stdout.readline()
        assert url.startswith(f"audit page: http://127.0.0.1:{port}/"), url
        hint = proc.stdout.readline()
        assert "invoke audit --scale tiny --sample" in hint and "audit.sqlite" in hint, hint
        assert raw(port, get("/api/people")) == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(get("/api/people"))
            reply = b""
            while chunk := c.recv(4096):
                reply += chunk
        people = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert people["pairs"] == 0 and "--sample" in people["message"] and people["annotators"] == ["A", "B"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
