"""Helpers shared by the server tests: start `redline serve` on 127.0.0.1
with an OS-chosen free port (--port 0, the port is read from its log), wait
for /health, and always stop it (SIGTERM, then SIGKILL)."""
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request

from clusterlib import ProcessHandle, parse_metrics
from conftest import BUILD, MODELS


class Server(ProcessHandle):
    def __init__(self, *extra, env=None, wait_ready=True, model="smollm2-135m"):
        exe = BUILD / "redline"
        assert exe.exists(), f"{exe} not built (make)"
        m = MODELS / f"{model}.gguf"
        cmd = [str(exe), "serve", "-m", str(m), "--host", "127.0.0.1", "--port", "0", "-t", "2", *extra]
        self.log = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.port = None
        self._port_ev = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._port_ev.wait(30):
            self.stop()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))
        self.base = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready()

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m and not self._port_ev.is_set():
                self.port = int(m.group(1))
                self._port_ev.set()

    def wait_ready(self, timeout=60):
        t_end = time.time() + timeout
        while time.time() < t_end:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "\n".join(self.log))
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + "\n".join(self.log))

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Returns (status, headers, parsed JSON or text)."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, hdrs, raw = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, raw = e.code, dict(e.headers), e.read()
        try:
            return status, hdrs, json.loads(raw)
        except ValueError:
            return status, hdrs, raw.decode("utf-8", "replace")

    def metrics(self):
        _, _, txt = self.request("GET", "/metrics")
        return parse_metrics(txt)


def raw_http(port, data, timeout=10):
    """Sends raw bytes, returns the raw response bytes (until close/timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            chunks.append(b)
            if _complete(b"".join(chunks)):
                break
        return b"".join(chunks)
    finally:
        s.close()


def _complete(buf):
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    if m:
        return len(body) >= int(m.group(1))
    return b"0\r\n\r\n" in body


def parse_raw(resp):
    """(status, body JSON or None) of a raw HTTP response."""
    head, _, body = resp.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d+)", head)
    status = int(m.group(1)) if m else None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None
