"""The annotation page driven in headless Chromium (Debian's `chromium`) over the DevTools protocol.

Label a few pairs with the keyboard, reload, and the labels are still there (in the page and in SQLite).
Screenshots go to $RCEA_TEST_OUTPUT/audit (else the test's tmp folder) and are listed in the test output.
Skipped, with the reason, when chromium is not installed (apt-get install -y --no-install-recommends chromium).
"""

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from infer.audit import store
from infer.audit.server import make_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y "
                                "--no-install-recommends chromium); the annotation page is not browser-tested")


class CDP:
    """A minimal DevTools-protocol client over a stdlib WebSocket (RFC 6455, client frames masked)."""

    def __init__(self, ws_url: str):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", ws_url)
        self.sock = socket.create_connection((m[1], int(m[2])), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET {m[3]} HTTP/1.1\r\nHost: {m[1]}:{m[2]}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                          "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.next_id = 0

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("websocket closed")
            buf += chunk
        return buf

    def _recv(self) -> str:
        data = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._recv_exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self._recv_exact(8), "big")
            payload = self._recv_exact(n)
            if b0 & 0x0F in (0x9, 0xA):  # ping/pong: ignore
                continue
            data += payload
            if b0 & 0x80:
                return data.decode()

    def call(self, method: str, **params):
        self.next_id += 1
        msg = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        n = len(msg)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
                                if n < 65536 else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
        while True:
            reply = json.loads(self._recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply.get("result", {})

    def eval(self, expr: str):
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def wait(self, expr: str, timeout: float = 20.0):
        end = time.time() + timeout
        while time.time() < end:
            v = self.eval(expr)
            if v:
                return v
            time.sleep(0.05)
        raise TimeoutError(expr)

    def key(self, ch: str):
        code = {"s": ("KeyS", 83), "d": ("KeyD", 68), "k": ("KeyK", 75), "j": ("KeyJ", 74)}[ch]
        self.call("Input.dispatchKeyEvent", type="keyDown", key=ch, text=ch, code=code[0],
                  windowsVirtualKeyCode=code[1])
        self.call("Input.dispatchKeyEvent", type="keyUp", key=ch, code=code[0], windowsVirtualKeyCode=code[1])

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path


def build_db(db: Path, n_pairs: int = 5) -> None:
    with store.connect(db) as con:
        con.execute("INSERT INTO meta VALUES ('annotators', 'A,B')")
        con.execute("INSERT INTO questions VALUES ('q1', 'Find the sum of the roots of x^2-5x+6=0.')")
        texts = ["We use factoring: (x-2)(x-3). \\boxed{5}", "By the quadratic formula. \\boxed{5}",
                 "<script>document.title='pwned'</script><b>bold?</b> Factoring again. \\boxed{5}",
                 "Vieta: the sum is 5. \\boxed{5}"]
        for i, t in enumerate(texts):
            con.execute("INSERT INTO trajectories VALUES (?,?,?,?,?)", (f"b{i}", f"x|{i}", "q1", t, f"M{i % 2}"))
        pairs = [(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)][:n_pairs]
        for pos, (a, b) in enumerate(pairs):
            con.execute("INSERT INTO pairs (position, question_id, a, b) VALUES (?,?,?,?)",
                        (pos, "q1", f"b{a}", f"b{b}"))


@pytest.fixture
def browser(tmp_path):
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={tmp_path / 'profile'}",
                             "--window-size=1280,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port, end = None, time.time() + 60
    while port is None and time.time() < end:
        line = proc.stderr.readline()
        m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line or "")
        if m:
            port = int(m[1])
        elif not line and proc.poll() is not None:
            break
    if port is None:
        proc.kill()
        pytest.fail("chromium did not start its DevTools endpoint")
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()  # keep the pipe drained
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
        page = next(t for t in json.loads(r.read()) if t["type"] == "page")
    cdp = CDP(page["webSocketDebuggerUrl"])
    cdp.call("Page.enable")
    cdp.call("Runtime.enable")
    yield cdp
    cdp.sock.close()
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_label_reload_resume(browser, tmp_path, record_property):
    out = Path(os.environ.get("RCEA_TEST_OUTPUT", tmp_path)) / "audit"
    out.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "audit.sqlite"
    build_db(db)
    httpd = make_server(db, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/?annotator=A"
    shots = []
    try:
        cdp = browser
        cdp.call("Page.navigate", url=url)
        cdp.wait("document.body && document.body.dataset.ready === '1'")
        assert cdp.eval("document.getElementById('progress').textContent") == "0 / 5 labelled"
        # model text is shown as text, never run as HTML
        cdp.key("j"), cdp.wait("document.body.dataset.pair === '2'")
        assert cdp.eval("document.querySelector('#right b') === null && document.title") == "RCEA partition audit"
        assert "<b>bold?</b>" in cdp.eval("document.getElementById('right').textContent")
        cdp.key("k"), cdp.wait("document.body.dataset.pair === '1'")
        shots.append(cdp.screenshot(out / "01-start.png"))
        for i, ch in enumerate("sds", 1):  # same, different, same
            cdp.key(ch)
            cdp.wait(f"document.getElementById('progress').textContent === '{i} / 5 labelled'")
        cdp.wait("document.body.dataset.pair === '4'")
        shots.append(cdp.screenshot(out / "02-three-labelled.png"))
        cdp.call("Page.reload", ignoreCache=True)
        time.sleep(0.2)
        cdp.wait("document.body && document.body.dataset.ready === '1'")
        assert cdp.eval("document.getElementById('progress').textContent") == "3 / 5 labelled"
        assert cdp.eval("document.body.dataset.pair") == "4"  # resumes at the first unlabelled pair
        cdp.key("k"), cdp.wait("document.body.dataset.pair === '3'")
        assert cdp.eval("document.body.dataset.label") == "0"
        assert cdp.eval("document.getElementById('same').classList.contains('chosen')") is True
        shots.append(cdp.screenshot(out / "03-after-reload.png"))
    finally:
        httpd.shutdown()
    with store.connect(db) as con:
        rows = [tuple(r) for r in con.execute("SELECT pair_id, label FROM labels WHERE annotator='A' ORDER BY pair_id")]
    assert rows == [(1, 0), (2, 1), (3, 0)]
    for s in shots:
        assert s.stat().st_size > 5_000 and s.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        record_property("screenshot", str(s))
        print("screenshot:", s)


def test_choose_the_annotator_on_the_page_and_say_what_to_do_when_empty(browser, tmp_path):
    empty, db = tmp_path / "empty.sqlite", tmp_path / "audit.sqlite"
    build_db(db)
    servers = {name: make_server(path, port=0, empty_hint="no audit pairs yet: draw them first with `invoke audit "
                                                             "--scale tiny --sample`") for name, path in
               (("empty", empty), ("drawn", db))}
    for httpd in servers.values():
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = {name: f"http://127.0.0.1:{httpd.server_address[1]}" for name, httpd in servers.items()}
    cdp = browser
    try:
        cdp.call("Page.navigate", url=base["empty"] + "/?annotator=A")   # nothing drawn: the page says what to do
        cdp.wait("document.body && document.body.dataset.ready === '1'")
        assert "invoke audit --scale tiny --sample" in cdp.eval("document.getElementById('status').textContent")
        assert cdp.eval("document.getElementById('progress').textContent") == "nothing to label"
        cdp.call("Page.navigate", url=base["drawn"] + "/")   # no annotator in the URL: choose one on the page
        cdp.wait("document.body && document.body.dataset.ready === '1'")
        assert cdp.eval("document.getElementById('status').textContent") == "choose the annotator above to start"
        options = cdp.eval("[...document.getElementById('pick').options].map(o => o.textContent)")
        assert options == ["choose…", "A", "B", "C (adjudication)"]
        cdp.eval("const p = document.getElementById('pick'); p.value = '?annotator=B'; "
                 "p.dispatchEvent(new Event('change'))")
        cdp.wait("location.search === '?annotator=B' && document.body && document.body.dataset.ready === '1'")
        assert cdp.eval("document.getElementById('progress').textContent") == "0 / 5 labelled"
        assert cdp.eval("document.getElementById('pick').selectedOptions[0].textContent") == "B"
        cdp.key("d")
        cdp.wait("document.getElementById('progress').textContent === '1 / 5 labelled'")
    finally:
        for httpd in servers.values():
            httpd.shutdown()
    with store.connect(db) as con:
        assert [tuple(r) for r in con.execute("SELECT annotator, pair_id, label FROM labels")] == [("B", 1, 1)]
