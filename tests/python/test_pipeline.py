"""Pipeline parallel over MPI (src/dist/, docs/PIPELINE.md): 2 and 3 ranks
of build-mpi/redline (`make MPI=1`) on this machine over TCP loopback
(Open MPI's mpirun, `--mca btl self,tcp`).

Checks: greedy `redline run` output is identical to one process (the plain
build), with 2 and 3 ranks, without and with n-gram speculation plus
quantized KV pages (-ctk/-ctv q8_0, whose K calibration also runs through
the pipeline), and with 1, the default and 5 micro-batches (so the cut
changes no output); every rank reports its layer range and that it holds
no KV block at the end; a
pipeline `serve` answers concurrent requests that share a prefix (prefix
cache, copy-on-write of shared blocks) exactly as a one-process server
does, and after SIGTERM to rank 0 every rank ends cleanly with no block
held; a rank killed with SIGKILL mid-request ends the whole job within
seconds with a non-zero exit and mpirun's message naming the rank; a
rank stopped (SIGSTOP: alive, silent) ends it by rank 0's step timeout
(--pp-timeout), whose value is checked; a build without MPI refuses to run
under mpirun.  Skipped (with the reason)
when mpirun or build-mpi/redline is absent.
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import BUILD, ROOT, model_path

MPI_EXE = ROOT / "build-mpi" / "redline"
PROMPT = "Write a short story about a robot who learns to paint."


def mpirun_cmd(n):
    mr = shutil.which("mpirun")
    if not mr:
        pytest.skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)")
    if not MPI_EXE.exists():
        pytest.skip(f"{MPI_EXE} not built (make MPI=1)")
    cmd = [mr, "-np", str(n), "--oversubscribe", "--mca", "btl", "self,tcp",
           "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def held_lines(stderr, n):
    """The ranks' end-of-job lines; asserts one per rank, none holding a block."""
    lines = [l for l in stderr.splitlines() if l.startswith("redline pipeline: rank")]
    assert len(lines) == n, stderr[-3000:]
    ranks = sorted(int(re.search(r"rank (\d+)/", l).group(1)) for l in lines)
    assert ranks == list(range(n))
    for l in lines:
        assert "kv blocks held at exit: 0 of" in l, l
    return lines


_ONE = {}


def run_one(*args):
    """Output of the one-process build; cached (the 2- and 3-rank cases
    compare against the same run)."""
    if args not in _ONE:
        exe = BUILD / "redline"
        if not exe.exists():
            pytest.fail(f"{exe} not built (make)")
        p = subprocess.run([str(exe), "run", "-m", str(model_path("smollm2-135m")), "-t", "1", *args],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        _ONE[args] = p.stdout
    return _ONE[args]


def run_pipe(n, *args):
    cmd = mpirun_cmd(n) + [str(MPI_EXE), "run", "-m", str(model_path("smollm2-135m")), "-t", "1", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr[-3000:]}"
    return p


# Without, and with both speculation and quantized KV pages at once (each
# alone is a subset of the paths the pair runs; the pair costs one K
# calibration per rank count instead of two).  The micro-batch counts vary
# across the cases: 1 (no overlap), the default (one per rank) and 5.
OPTS = {"plain": [], "ngram-q8_0": ["--spec", "ngram", "-ctk", "q8_0", "-ctv", "q8_0"]}
CASES = [(2, "plain", "1"), (3, "plain", "5"), (2, "ngram-q8_0", None), (3, "ngram-q8_0", None)]


@pytest.mark.parametrize("n,opt,micro", CASES, ids=[f"{o}-{n}" for n, o, _ in CASES])
def test_run_greedy_identical(n, opt, micro):
    args = ["-p", PROMPT, "-n", "48", "--temp", "0", *OPTS[opt]]
    p = run_pipe(n, *(["--pp-micro", micro] if micro else []), *args)
    assert p.stdout == run_one(*args)
    assert len(p.stdout) > 100
    lines = held_lines(p.stderr, n)
    # the layer ranges tile the 30 layers in order
    ranges = sorted((int(a), int(b)) for a, b in (re.search(r"layers \[(\d+), (\d+)\)", l).groups()
                                                   for l in lines))
    assert ranges[0][0] == 0 and ranges[-1][1] == 30
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(n - 1))
    if micro:  # 48 forwards (the prefill, 47 decode steps); the prefill is cut into `micro` parts
        steps = [int(re.search(r"(\d+) micro-batches", l).group(1)) for l in lines]
        assert steps == [47 + int(micro)] * n, lines


def rank_pids(mpirun_pid):
    """{rank: pid} of the redline processes mpirun started."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if str(MPI_EXE).encode() not in cmd:
            continue
        ranks = [e for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if ranks:
            out[int(ranks[0].split(b"=")[1])] = int(d)
    return out


class PipeServer:
    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT)
        self.log, self.port, ev = [], None, threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^ ]*:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ev.set()

        threading.Thread(target=read, daemon=True).start()
        if not ev.wait(60):
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))
        t_end = time.time() + 60
        while time.time() < t_end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("server not ready:\n" + "\n".join(self.log))

    def complete(self, prompt, n=24, timeout=120):
        body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())["choices"][0]["text"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


SHARED = ("You are a terse assistant that answers questions about geography in one sentence. "
          "Answer with the name only when you can. ") * 3
QUESTIONS = ["The capital of France is", "The capital of Germany is", "The capital of Italy is",
             "The longest river in Africa is", "The highest mountain on Earth is", "The capital of Spain is"]


def serve_cmd(exe):
    return [str(exe), "serve", "-m", str(model_path("smollm2-135m")), "--host", "127.0.0.1", "--port", "0",
            "-t", "1", "--kv-mem", "64M"]


def ask_all(srv):
    with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as ex:
        first = list(ex.map(lambda q: srv.complete(SHARED + q, n=8), QUESTIONS))
    again = srv.complete(SHARED + QUESTIONS[0], n=8)  # a prefix-cache hit
    return first, again


def test_serve_concurrent_shared_prefix():
    cmd = mpirun_cmd(2) + serve_cmd(MPI_EXE)
    one = PipeServer(serve_cmd(BUILD / "redline"))
    try:
        want = ask_all(one)
    finally:
        one.stop()
    srv = PipeServer(cmd)
    try:
        got = ask_all(srv)
        pids = rank_pids(srv.proc.pid)
        assert sorted(pids) == [0, 1], pids
        os.kill(pids[0], signal.SIGTERM)  # rank 0 drains, then ends the workers
        assert srv.proc.wait(60) == 0, "\n".join(srv.log[-40:])
    finally:
        srv.stop()
    assert got == want
    assert got[1] == want[0][0]
    time.sleep(0.2)
    held_lines("\n".join(srv.log), 2)


def stop_rank_mid_request(n, sig, *args):
    """Starts an n-rank server (extra args), sends rank 1 `sig` during a
    long request and checks the job ends within seconds with a non-zero
    exit, every rank gone and the request failed.  Returns the log."""
    srv = PipeServer(mpirun_cmd(n) + serve_cmd(MPI_EXE) + list(args))
    try:
        errs = []

        def long_request():
            try:
                srv.complete("Once upon a time", n=2000, timeout=60)
            except Exception as e:  # the connection drops when the job ends
                errs.append(e)

        t = threading.Thread(target=long_request, daemon=True)
        t.start()
        time.sleep(1.5)
        pids = rank_pids(srv.proc.pid)
        assert sorted(pids) == list(range(n)), pids
        t0 = time.time()
        os.kill(pids[1], sig)
        rc = srv.proc.wait(20)
        took = time.time() - t0
        assert rc != 0
        assert took < 10, took

        def alive(p):
            return os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"
        deadline = time.time() + 5
        while time.time() < deadline and any(alive(p) for p in pids.values()):
            time.sleep(0.1)
        for r, p in pids.items():
            assert not alive(p), f"rank {r} (pid {p}) still running"
        time.sleep(0.2)
        t.join(30)
        assert errs, "the in-flight request did not fail"
        return "\n".join(srv.log)
    finally:
        srv.stop()


def test_killed_rank_ends_job():
    log = stop_rank_mid_request(3, signal.SIGKILL)
    assert re.search(r"rank 1 .*exited on signal 9|rank 1 .*killed", log, re.S), log[-3000:]


def test_hung_rank_ends_job():
    # SIGSTOP: alive but silent, which mpirun does not see; rank 0's step
    # timeout ends the job (and mpirun's abort ends the stopped rank)
    log = stop_rank_mid_request(2, signal.SIGSTOP, "--pp-timeout", "2")
    assert "no result from rank 1 for 2 s (--pp-timeout)" in log, log[-3000:]


def test_bad_pp_timeout_refused():
    cmd = mpirun_cmd(2) + [str(MPI_EXE), "run", "-m", str(model_path("smollm2-135m")), "--pp-timeout", "soon",
                           "-p", "hi", "-n", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "--pp-timeout 'soon' is not a number of seconds >= 0" in p.stderr


def test_plain_build_refuses_mpirun():
    exe = BUILD / "redline"
    cmd = mpirun_cmd(2) + [str(exe), "run", "-m", str(model_path("smollm2-135m")), "-p", "hi", "-n", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode != 0
    assert "this build has no MPI" in p.stderr
