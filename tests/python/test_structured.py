"""Structured output: JSON Schema -> grammar -> constrained generation over the
REAL SmolLM2 vocabulary (49,152 tokens), checked by an independent oracle.

build/tools/grammar_tool loads the tokenizer from models/smollm2-135m.gguf,
compiles the schema, and walks the grammar choosing tokens among the allowed
ones: uniformly at random ("uniform": every kind of token the mask lets
through, incl. odd Unicode pieces inside strings) or with a fixed
word-favouring pseudo-logit ("pref": more model-like text), then, after a
budget, takes the shortest way to a complete document.  Every output must
parse with Python's json module and validate with the PyPI `jsonschema`
package (Draft 2020-12, with format checks).  Hostile schemas and grammars
must be refused with a clear error.  Speed is measured by
`grammar_tool --bench`, never here."""
import json
import re
import subprocess

import jsonschema
import pytest

from conftest import BUILD, model_path

TOOL = BUILD / "tools" / "grammar_tool"

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
}

SCHEMAS = {
    "person": PERSON,
    "all_optional": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"},
                                                      "c": {"type": "number"}}},
    "nested": {"type": "object", "properties": {
        "user": PERSON,
        "address": {"type": "object", "properties": {"street": {"type": "string"},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["zip"]}},
        "required": ["user", "address"]},
    "int_array": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5},
    "object_array": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "label": {"type": "string"}}, "required": ["id"]}, "maxItems": 4},
    "array_of_arrays": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
                        "maxItems": 3},
    "enum_strings": {"enum": ["red", "green", "blue"]},
    "enum_mixed": {"enum": [1, 2.5, "two", None, True, {"k": [1]}]},
    "const": {"const": {"version": 3, "tag": "x\"y"}},
    "number": {"type": "number"},
    "int_range": {"type": "integer", "minimum": -50, "maximum": 1234},
    "int_exclusive": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
    "int_negative": {"type": "integer", "maximum": -7},
    "number_nonneg": {"type": "number", "minimum": 0},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "string_len": {"type": "string", "minLength": 2, "maxLength": 8},
    "pattern_anchored": {"type": "string", "pattern": "^[a-z]{3}-[0-9]{2,4}(\\.[A-Z])?$"},
    "pattern_unanchored": {"type": "string", "pattern": "ab+c"},
    "pattern_classes": {"type": "string", "pattern": "^\\d+\\s\\w*[^a-z\"]?$"},
    "formats": {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                                 "t": {"type": "string", "format": "date-time"},
                                                 "u": {"type": "string", "format": "uuid"}},
                "required": ["d", "t", "u"]},
    "any_of": {"anyOf": [{"type": "string"}, {"type": "integer"},
                         {"type": "array", "items": {"type": "boolean"}}]},
    "one_of": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    "type_list": {"type": ["string", "null", "integer"]},
    "defs_ref": {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                  "required": ["x", "y"]}},
                 "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
                 "required": ["a"]},
    "recursive_tree": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"},
    "no_additional": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    "map_of_ints": {"type": "object", "additionalProperties": {"type": "integer"}},
    "free_object": {"type": "object"},
    "anything": {},
    "deep": {"type": "object", "properties": {"l1": {"type": "object", "properties": {"l2": {
        "type": "object", "properties": {"l3": {"type": "object", "properties": {"l4": {
            "type": "array", "items": {"type": "object", "properties": {"l5": {"type": "string"}},
                                       "required": ["l5"]}}}, "required": ["l4"]}},
        "required": ["l3"]}}, "required": ["l2"]}}, "required": ["l1"]},
    "escapes_enum": {"enum": ["a\"b", "back\\slash", "new\nline", "tab\there", "\u00e9\u4e2d\U0001F600",
                              "ctl\u0001"]},
    "odd_keys": {"type": "object", "properties": {"k\"ey": {"type": "integer"}, "\u00fcber": {"type": "string"},
                                                  "sp ace": {"type": "boolean"}}, "required": ["k\"ey", "\u00fcber"]},
    "required_unlisted": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "z"]},
    "all_of_single": {"allOf": [{"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}]},
    "many_props": {"type": "object",
                   "properties": {f"p{i}": {"type": ["integer", "string"][i % 2]} for i in range(20)},
                   "required": [f"p{i}" for i in range(0, 20, 3)]},
    "any_array": {"type": "array", "maxItems": 4},
    "annotations": {"title": "T", "description": "d", "examples": [1],
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object", "properties": {"n": {"type": "integer", "description": "x", "default": 3}}},
}

HOSTILE = {
    "unsupported_keyword": ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}},
                            "multipleOf"),
    "too_deep": ("DEEP", "deeper than"),
    "huge_max_items": ({"type": "array", "maxItems": 100000}, "maxItems"),
    "remote_ref": ({"$ref": "https://example.com/s.json"}, "local references"),
    "dangling_ref": ({"$ref": "#/$defs/nope"}, "does not resolve"),
    "self_ref": ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "matches no string"),
    "backreference": ({"type": "string", "pattern": "(a)\\1"}, "pattern"),
    "lookahead": ({"type": "string", "pattern": "(?=a)b"}, "lookaround"),
    "empty_enum": ({"enum": []}, "enum"),
    "schema_false": (False, "matches nothing"),
    "bad_type": ({"type": "strnig"}, "unknown type"),
    "number_bounds": ({"type": "number", "maximum": 5}, "bounds"),
    "empty_range": ({"type": "integer", "minimum": 5, "maximum": 1}, "empty integer range"),
    "huge_schema": ({"type": "object", "properties": {f"p{i}": {} for i in range(5000)}}, "1024 properties"),
    "many_nodes": ({"anyOf": [{"anyOf": [{"type": "integer"}] * 200}] * 200}, "subschemas"),
    "tuple_items": ({"type": "array", "items": [{"type": "integer"}]}, "tuple"),
    "min_gt_max": ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength"),
}

HOSTILE_GRAMMARS = {
    "left_recursion": ('root ::= root "a" | "b"', "left recursion"),
    "undefined": ("root ::= thing", "undefined rule 'thing'"),
    "huge_repeat": ('root ::= "a"{100000}', "repetition"),
    "empty_language": ('root ::= "x" root', "matches no string"),
    "no_root": ('start ::= "a"', "no 'root'"),
    "deep_parens": ("root ::= " + "(" * 300 + '"a"' + ")" * 300, "nested"),
}


def tool(args, input_path):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} missing (make test-bins)")
    model = model_path("smollm2-135m")
    return subprocess.run([str(TOOL), str(model)] + [a if a != "@" else str(input_path) for a in args],
                          capture_output=True, text=True, timeout=300)


def validator_for(schema):
    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def generate(tmp_path, schema, seeds, mode, extra=()):
    p = tmp_path / "schema.json"
    p.write_text(json.dumps(schema))
    r = tool(["--schema", "@", "--seeds", ",".join(map(str, seeds)), "--mode", mode, *extra], p)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(lines) == len(seeds), r.stdout + r.stderr
    return lines


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_outputs_validate(name, tmp_path):
    schema = SCHEMAS[name]
    v = validator_for(schema)
    runs = [("uniform", [1, 2, 3, 4, 5], ()), ("pref", [11, 12, 13], ()), ("uniform", [21, 22], ("--jump",))]
    for mode, seeds, extra in runs:
        for out in generate(tmp_path, schema, seeds, mode, extra):
            assert out["done"], f"{name} seed {out['seed']} did not finish: {out['text']!r}"
            try:
                doc = json.loads(out["text"])
            except json.JSONDecodeError as e:
                pytest.fail(f"{name} {mode} seed {out['seed']}: not JSON ({e}): {out['text']!r}")
            errors = list(v.iter_errors(doc))
            assert not errors, f"{name} {mode} seed {out['seed']}: {errors[0].message}: {out['text']!r}"
            # an ordinary schema stays far inside the per-call step budget
            # (RL_GRAMMAR_OP_STEPS = 500000; the largest here was 11366)
            assert out["max_op_steps"] < 50000, f"{name} {mode} seed {out['seed']}: {out['max_op_steps']} steps"


def test_json_object_mode(tmp_path):
    """response_format {"type": "json_object"}: any JSON object."""
    for out in generate(tmp_path, {"type": "json_object"}, [1, 2, 3, 4], "uniform"):
        assert isinstance(json.loads(out["text"]), dict)


def test_jump_forward_is_used(tmp_path):
    """Long fixed keys force bytes: the tool takes forced tokens and the result still parses."""
    schema = {"type": "object", "properties": {"a_very_long_property_name": {"type": "integer"},
                                               "another_fixed_key": {"type": "boolean"}},
              "required": ["a_very_long_property_name", "another_fixed_key"], "additionalProperties": False}
    outs = generate(tmp_path, schema, [1, 2], "pref", ("--jump",))
    for out in outs:
        jsonschema.validate(json.loads(out["text"]), schema)
    assert sum(o["forced"] for o in outs) > 0


def test_outputs_vary_with_seed(tmp_path):
    outs = generate(tmp_path, SCHEMAS["person"], [1, 2, 3, 4], "uniform")
    assert len({o["text"] for o in outs}) > 1


def _deep_schema():
    s = {"type": "integer"}
    for _ in range(40):
        s = {"type": "array", "items": s}
    return s


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_schema_rejected(name, tmp_path):
    schema, needle = HOSTILE[name]
    if schema == "DEEP":
        schema = _deep_schema()
    p = tmp_path / "schema.json"
    p.write_text(json.dumps(schema))
    r = tool(["--schema", "@", "--check"], p)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert "error" in res, f"{name} accepted: {res}"
    assert needle in res["error"], res["error"]


def test_invalid_json_schema_text(tmp_path):
    p = tmp_path / "schema.json"
    p.write_text('{"type": "object", ')
    res = json.loads(tool(["--schema", "@", "--check"], p).stdout)
    assert "invalid JSON" in res["error"]


@pytest.mark.parametrize("name", sorted(HOSTILE_GRAMMARS))
def test_hostile_grammar_rejected(name, tmp_path):
    text, needle = HOSTILE_GRAMMARS[name]
    p = tmp_path / "g.gbnf"
    p.write_text(text)
    res = json.loads(tool(["--gbnf", "@", "--check"], p).stdout)
    assert "error" in res and needle in res["error"], res


def test_gbnf_generation(tmp_path):
    """A hand-written grammar over the real vocabulary."""
    p = tmp_path / "g.gbnf"
    p.write_text('root ::= "answer: " ("yes" | "no") (", because " [a-z ]{1,30})? "."\n')
    r = tool(["--gbnf", "@", "--seeds", "1,2,3,4,5,6"], p)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        out = json.loads(line)
        assert out["done"]
        assert re.fullmatch(r"answer: (yes|no)(, because [a-z ]{1,30})?\.", out["text"]), out["text"]


def test_ambiguous_grammars_are_bounded(tmp_path):
    """Paths meeting on one parse stack are expanded once: 24 optional
    items (2^24 paths) generate normally.  A grammar ambiguous for real
    (25 first bytes, each then 300 x 300 ways to read "q") fails its first
    mask with the step-budget error instead of stalling."""
    p = tmp_path / "g.gbnf"
    p.write_text("root ::=" + " a" * 24 + ' "z"\na ::= b | c\nb ::= "x"?\nc ::= "y"?\n')
    r = tool(["--gbnf", "@", "--seeds", "1,2,3"], p)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        out = json.loads(line)
        assert out["done"] and re.fullmatch(r"[xy]{0,24}z", out["text"]), out
        assert out["max_op_steps"] < 5000, out
    rules = ["root ::= [a-y] b", "b ::= " + " | ".join(f"y{i}" for i in range(300))]
    rules += [f"y{i} ::= " + " | ".join(['"q"'] * 300) for i in range(300)]
    p.write_text("\n".join(rules) + "\n")
    r = tool(["--gbnf", "@", "--seeds", "1"], p)
    assert r.returncode == 1 and "too ambiguous" in r.stderr, r.stdout + r.stderr
