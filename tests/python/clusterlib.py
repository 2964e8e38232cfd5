"""Helpers shared by the cluster tests and bench/cluster: start
scripts/cluster (replicas behind a router) on free ports and stop it; a
multi-tenant shared-prefix chat workload (one question per request) and an
agent/chat one (multi-turn conversations that resend their history); a
threaded streaming client that records status, time to first token, the
reply and errors per request; and the replicas' prefix-cache counters from
/metrics."""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "scripts", "cluster")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def router_available(name):
    if name == "smg":
        return any(p and os.path.exists(p) for p in (os.environ.get("REDLINE_SMG"),
                                                        os.path.join(ROOT, ".venv-router", "bin", "smg"),
                                                        shutil.which("smg")))
    return bool(shutil.which("haproxy") or os.path.exists("/usr/sbin/haproxy"))


class ProcessHandle:
    """A child process in self.proc: stop() sends `sig` (SIGTERM), waits up
    to `timeout` (stop_timeout) seconds, then SIGKILLs, and returns the exit
    status; usable as a context manager (stops on exit)."""
    stop_timeout = 40

    def stop(self, sig=signal.SIGTERM, timeout=None):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout or self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


class Cluster(ProcessHandle):
    """scripts/cluster as a context manager.  .url is the router, .replicas
    a list of {"pid", "url"}; stop() sends SIGTERM and returns the status."""
    stop_timeout = 90

    def __init__(self, router="smg", policy=None, n=2, serve_args=(), extra=(), timeout=120, tries=3):
        # The ports are picked free here but bound later by the router, so
        # another process (a replica on port 0, a client's ephemeral port)
        # can take one first: then start again on fresh ports.
        for left in range(tries - 1, -1, -1):
            try:
                self._start(router, policy, n, serve_args, extra, timeout)
                return
            except RuntimeError as e:
                if left == 0 or "Address already in use" not in str(e):
                    raise

    def _start(self, router, policy, n, serve_args, extra, timeout):
        self.port = free_port()
        cmd = [CLUSTER, "-n", str(n), "--router", router, "--port", str(self.port), "--replica-port", "0",
               "--router-metrics-port", str(free_port()), *extra]
        if policy:
            cmd += ["--policy", policy]
        if serve_args:
            cmd += ["--", *serve_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.replicas, self.url, self.lines, self.err = [], None, [], []
        err_done = threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)
        err_done.start()
        ready = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.match(r"replica (\d+) pid (\d+) (\S+)", line)
                if m:
                    self.replicas.append({"pid": int(m.group(2)), "url": m.group(3)})
                m = re.match(r"router \S+ pid (\d+) (\S+)", line)
                if m:
                    self.router_pid, self.url = int(m.group(1)), m.group(2)
                m = re.match(r"logs (\S+)", line)
                if m:
                    self.logdir = m.group(1)
                if line.startswith("cluster ready"):
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        t_end = time.time() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.time() > t_end:
                self.stop()
                err_done.join(5)
                raise RuntimeError("cluster did not start:\n" + "".join(self.err) + "\n".join(self.lines))


WORDS = ("orders refunds shipping invoices warranty repairs accounts passwords delivery returns sizes colours "
         "stores hours payments cards loyalty points coupons gifts bundles tracking customs batteries chargers "
         "screens cables manuals installers firmware licences seats upgrades").split()


def system_prompt(tenant, n_words=110):
    """A tenant's own system prompt: distinct from its first words (so a
    hash of its start tells tenants apart) and about 2.5 tokens a word."""
    rng = random.Random(1000 + tenant)
    words = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return (f"Tenant {tenant:02d} support desk. You are the assistant of company number {tenant}. "
            f"Topics you handle: {words}. Answer in one short sentence.")


def tenant_workload(n_tenants, per_tenant, seed=0, n_words=110):
    """[(tenant, messages)]: per_tenant requests of each tenant, each a
    shared system prompt and a distinct question, in a seeded random order."""
    reqs = [(t, [{"role": "system", "content": system_prompt(t, n_words)},
                 {"role": "user", "content": f"Customer question {q}: what about item {q * 7 + t}?"}])
            for t in range(n_tenants) for q in range(per_tenant)]
    random.Random(seed).shuffle(reqs)
    return reqs


def conversation_workload(n_tenants, per_tenant, turns, seed=0, n_words=110, tenant0=0):
    """The agent/chat mix: per_tenant conversations of each tenant (tenant
    ids tenant0..), each its tenant's system prompt and `turns` user
    messages, every turn resending the whole history.  Returns (convs,
    order): convs a list of {"tenant", "system", "questions"}; order a
    seeded random interleaving of conversation indices, the k-th occurrence
    of c being turn k of c (so turns of many conversations alternate, as
    users think between turns)."""
    rng = random.Random(seed)
    convs = []
    for t in range(tenant0, tenant0 + n_tenants):
        for k in range(per_tenant):
            qs = [f"Customer {t}-{k}, message {n + 1}: my {rng.choice(WORDS)} and {rng.choice(WORDS)} "
                  f"for order {rng.randrange(10000, 99999)} are not right, what now?" for n in range(turns)]
            convs.append({"tenant": t, "system": system_prompt(t, n_words), "questions": qs})
    order = [c for c in range(len(convs)) for _ in range(turns)]
    rng.shuffle(order)
    return convs, order


def run_conversations(url, convs, order, concurrency, max_tokens=16, timeout=120, extra=None):
    """Runs the turns of `convs` in `order` (conversation_workload) with up
    to `concurrency` requests in flight; a conversation has one turn in
    flight at most, and its next turn carries the replies so far.  Returns
    the results in the order sent (each with "conv", "turn", "tenant") and
    the final histories ([messages] per conversation)."""
    hist = [[{"role": "system", "content": c["system"]}] for c in convs]
    busy = [False] * len(convs)
    nturn = [0] * len(convs)
    pending = list(order)
    results = []
    cv = threading.Condition()
    t_load = time.time()

    def worker():
        while True:
            with cv:
                while True:
                    i = next((i for i, c in enumerate(pending) if not busy[c]), None)
                    if i is not None or not pending:
                        break
                    cv.wait()
                if i is None:
                    return
                c = pending.pop(i)
                busy[c] = True
                msgs = hist[c] + [{"role": "user", "content": convs[c]["questions"][nturn[c]]}]
            t_start = time.time() - t_load
            r = chat_stream(url, msgs, max_tokens, timeout, extra=extra)
            with cv:
                r.update(conv=c, turn=nturn[c], tenant=convs[c]["tenant"], t_start=t_start)
                results.append(r)
                hist[c] = msgs + [{"role": "assistant", "content": r["text"] or "(no answer)"}]
                nturn[c] += 1
                busy[c] = False
                cv.notify_all()
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout * (len(order) // concurrency + 2))
    return results, hist


def chat_stream(url, messages, max_tokens=4, timeout=60, model="smollm2-135m", extra=None):
    """One streaming chat request.  Returns {"status", "ttft", "latency",
    "ok", "error", "text"}: ok = HTTP 200 and the stream ended with [DONE];
    text = the reply's content."""
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, **(extra or {})}).encode()
    t0 = time.time()
    out = {"status": None, "ttft": None, "latency": None, "ok": False, "error": None, "text": ""}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["error"] = r.read()[:300].decode("utf-8", "replace")
            return out
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                out["ok"] = True
                break
            try:
                ch = json.loads(data).get("choices") or [{}]
                piece = (ch[0].get("delta") or {}).get("content")
            except (ValueError, AttributeError):
                piece = None
            if piece:
                if out["ttft"] is None:
                    out["ttft"] = time.time() - t0
                out["text"] += piece
        if not out["ok"]:
            out["error"] = "stream ended without [DONE]"
    except Exception as e:  # connection refused / reset / timeout: what the client sees
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        out["latency"] = time.time() - t0
        conn.close()
    return out


def run_load(url, reqs, concurrency, max_tokens=4, timeout=60, on_result=None, extra=None):
    """Sends reqs ([(tenant, messages)]) with `concurrency` in flight at once
    and returns the results in request order (each also has "tenant" and
    "t_start", seconds since the load began)."""
    results = [None] * len(reqs)
    nxt = [0]
    lock = threading.Lock()
    t_load = time.time()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(reqs):
                return
            t, msgs = reqs[i]
            t_start = time.time() - t_load
            r = chat_stream(url, msgs, max_tokens, timeout, extra=extra)
            r.update(tenant=t, t_start=t_start)
            results[i] = r
            if on_result:
                on_result(i, r)
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout * (len(reqs) // concurrency + 2))
    return results


def metrics(url):
    """{name: value} of a replica's /metrics (labels dropped, no buckets)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


def parse_metrics(txt):
    """Prometheus text -> {name: value}, labels dropped, histogram buckets skipped."""
    out = {}
    for line in txt.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, val = line.rsplit(" ", 1)
        base = re.sub(r"\{.*\}", "", name)
        if "_bucket" not in base:
            out[base] = float(val)
    return out


def prefix_counters(urls):
    """Per replica: prefix-cache queries and hits (blocks) and prompt tokens."""
    out = []
    for u in urls:
        m = metrics(u)
        out.append({"queries": m["redline:prefix_cache_queries_total"], "hits": m["redline:prefix_cache_hits_total"],
                    "prompt_tokens": m["redline:prompt_tokens_total"],
                    "cached_tokens": m["redline:prompt_tokens_cached_total"]})
    return out


def delta(after, before):
    return [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
