"""`redline run` end to end on SmolLM2-135M: the one-line command drives
the engine, so it has the server's stop strings, structured output, KV
types and speculation.

Checks: greedy output is identical with and without n-gram speculation
(and speculation really drafted); --json-schema output parses and validates
with the jsonschema package; --grammar output is in the grammar's language;
-ctk/-ctv q8_0 runs and says so; a stop string cuts the reply exactly where
the unstopped reply has it; interactive mode answers every line and reuses
the earlier turns' KV (prefix cache); bad flags give one line on stderr,
nothing on stdout and a non-zero exit.
"""
import json
import re
import subprocess

import jsonschema
import pytest

from conftest import BUILD, ROOT, model_path

PROMPT = "List the days of the week, one per line."


def run(*args, stdin=None, timeout=300, check=True):
    exe = BUILD / "redline"
    if not exe.exists():
        pytest.fail(f"{exe} not built (make)")
    cmd = [str(exe), "run", "-m", str(model_path("smollm2-135m")), "-t", "2", *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check:
        assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr}"
    return p


def greedy(*args):
    return run("-p", PROMPT, "-n", "48", "--temp", "0", *args)


@pytest.fixture(scope="module")
def plain():
    return greedy().stdout


def test_greedy_reply(plain):
    assert "Monday" in plain and plain.endswith("\n")


def test_spec_ngram_identical(plain):
    p = greedy("--spec", "ngram")
    assert p.stdout == plain
    m = re.search(r"speculation: (\d+) of (\d+) drafted tokens accepted", p.stderr)
    assert m and int(m.group(2)) > 0, p.stderr


def test_cache_type_q8_0():
    p = greedy("-ctk", "q8_0", "-ctv", "q8_0")
    assert "KV q8_0/q8_0" in p.stderr
    assert len(p.stdout.strip()) > 10


def test_json_schema(tmp_path):
    schema = {"type": "object",
              "properties": {"day": {"type": "string"}, "number": {"type": "integer"}},
              "required": ["day", "number"]}
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(schema))
    for seed in ("1", "2"):
        p = run("-p", "Describe a day of the week as JSON.", "-n", "96", "--seed", seed,
                "--json-schema", str(f))
        doc = json.loads(p.stdout)
        jsonschema.validate(doc, schema)


def test_grammar(tmp_path):
    f = tmp_path / "yn.gbnf"
    f.write_text('root ::= ("yes" | "no") "."\n')
    p = run("-p", "Is the sky blue?", "-n", "16", "--seed", "3", "--grammar", str(f))
    assert p.stdout.strip() in ("yes.", "no.")


def test_stop_string(plain):
    stop = "Wednesday"
    assert stop in plain
    p = greedy("--stop", stop)
    assert stop not in p.stdout
    assert p.stdout == plain[:plain.index(stop)] + "\n"
    # llama.cpp's name for it, repeatable: the earliest match wins
    q = greedy("-r", "Friday", "-r", stop)
    assert q.stdout == p.stdout


def test_interactive_reuses_prefix():
    p = run("-n", "12", "--temp", "0", stdin="Hello!\nWhat is 2+2?\n")
    replies = [l for l in p.stdout.split("\n") if l.strip()]
    assert len(replies) >= 2, p.stdout
    m = re.search(r"prompt (\d+) tokens \((\d+) cached\)", p.stderr)
    assert m and int(m.group(2)) > 0, p.stderr  # the second turn found the first in the cache


@pytest.mark.parametrize("args,word", [
    (["--temp", "hot"], "--temp"), (["--bogus"], "--bogus"), (["-n"], "-n"),
    (["--spec", "fast"], "--spec"), (["--spec", "draft"], "-md"), (["--kv-mem", "lots"], "--kv-mem"),
    (["-p", "a", "-f", "b"], "-f"), (["--json-schema", "/nonexistent.json", "-p", "x"], "--json-schema"),
    (["-ctk", "q9", "-p", "x"], "q9"),
])
def test_bad_flags(args, word):
    p = run(*args, check=False, timeout=60)
    assert p.returncode != 0
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], p.stderr


def test_bad_schema_is_named(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"type": "bogus"}')
    p = run("--json-schema", str(f), "-p", "x", check=False, timeout=60)
    assert p.returncode != 0 and p.stdout == ""
    assert "--json-schema" in p.stderr and "bogus" in p.stderr
