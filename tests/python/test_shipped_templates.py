"""The real chat templates llama.cpp ships (models/templates/ of the pinned
llama-cpp-python sdist: Llama 3.x, Qwen2.5/3, QwQ, DeepSeek-R1 distills,
Gemma 2, Phi-3.5, Mistral Nemo/Small/Devstral, Granite 3.3, Hermes tool use,
Command-R, Functionary, firefunction, gpt-oss, Kimi K2, ...) rendered by
redline (build/tools/render_template) and by jinja2 exactly as Hugging Face's
apply_chat_template renders them (transformers' render_jinja_template:
trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now,
HF's tojson), for conversations with a system prompt, user/assistant turns,
assistant tool calls, tool results and a `tools` list, with and without
add_generation_prompt.  Outputs must be byte-identical; when jinja2 raises
(the template's raise_exception, an undefined access) redline must fail too,
with a "chat template" error.  The BOS/EOS strings passed are the model's.
"""
import json
import os
import subprocess

import pytest

from conftest import BUILD, llamacpp_assets_dir
from test_template import A, S, U  # message builders

chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")

TOOL = os.environ.get("REDLINE_RENDER_TEMPLATE") or str(BUILD / "tools" / "render_template")

LLAMA3 = ("<|begin_of_text|>", "<|eot_id|>")
DEEPSEEK = ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>")
# template file (llama-cpp-python 0.3.16) -> the model's (bos_token, eos_token)
TEMPLATES = {
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("<s>", "</s>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
    "Qwen-QwQ-32B.jinja": ("", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": DEEPSEEK,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": DEEPSEEK,
    "fireworks-ai-llama-3-firefunction-v2.jinja": LLAMA3,
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("<|end_of_text|>", "<|end_of_text|>"),
    "llama-cpp-deepseek-r1.jinja": DEEPSEEK,
    "llama-cpp-rwkv-world.jinja": ("", "\n\n"),
    "meetkai-functionary-medium-v3.1.jinja": LLAMA3,
    "meetkai-functionary-medium-v3.2.jinja": LLAMA3,
    "meta-llama-Llama-3.1-8B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct.jinja": LLAMA3,
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
    "moonshotai-Kimi-K2.jinja": ("[BOS]", "[EOS]"),
    "openai-gpt-oss-120b.jinja": ("<|startoftext|>", "<|return|>"),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("<s>", "</s>"),
}

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "city name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]
CALL = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "abcDEF123", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather",
          "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}


CONVERSATIONS = [
    ("user", [U("Hello!")], None),
    ("system_user", [S("You are a terse assistant."), U("What is 2+2?")], None),
    ("multi_turn", [U("Hi"), A("Hello, how can I help?"), U("Tell me a joke.")], None),
    ("unicode", [S("Réponds en français."), U("héllo wörld 你好 🙂"), A("¡Hola! 日本語"), U("Ελληνικά?")], None),
    ("tools_offered", [S("Use the tools when useful."), U("What's the weather in Paris?")], TOOLS),
    ("tool_call", [U("What's the weather in Paris?"), CALL, RESULT], TOOLS),
    ("tool_round_trip", [S("Use the tools."), U("Weather in Paris?"), CALL, RESULT,
                         A("It is 21 °C and clear in Paris."), U("Thanks!")], TOOLS),
]


def render_hf(template, bos, eos, msgs, tools, agp):
    try:
        out, _ = chat_utils.render_jinja_template(
            conversations=[msgs], tools=tools, chat_template=template,
            add_generation_prompt=agp, bos_token=bos, eos_token=eos)
        return out[0], None
    except Exception as e:  # jinja2 TemplateError (raise_exception), UndefinedError, TypeError ...
        return None, f"{type(e).__name__}: {e}"


def render_redline(tfile, bos, eos, msgs, tools, agp):
    assert os.path.exists(TOOL), f"{TOOL} missing: run `make test-bins`"
    ctx = {"messages": msgs, "tools": tools, "add_generation_prompt": agp,
           "bos_token": bos, "eos_token": eos}
    p = subprocess.run([TOOL, "--template", str(tfile), "-"], input=json.dumps(ctx).encode(),
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        return None, p.stderr.decode("utf-8", "replace").strip()
    return p.stdout.decode("utf-8"), None


def test_template_list_complete(llamacpp_assets):
    have = sorted(p.name for p in (llamacpp_assets / "templates").glob("*.jinja"))
    assert have == sorted(TEMPLATES)


@pytest.mark.parametrize("agp", [False, True], ids=["nogen", "gen"])
@pytest.mark.parametrize("conv", CONVERSATIONS, ids=[c[0] for c in CONVERSATIONS])
@pytest.mark.parametrize("name", sorted(TEMPLATES), ids=lambda n: n[:-len(".jinja")])
def test_shipped_template(name, conv, agp):
    tfile = llamacpp_assets_dir() / "templates" / name
    template = tfile.read_text(encoding="utf-8")
    bos, eos = TEMPLATES[name]
    _, msgs, tools = conv
    want, want_err = render_hf(template, bos, eos, msgs, tools, agp)
    got, got_err = render_redline(tfile, bos, eos, msgs, tools, agp)
    if want_err is not None:
        assert got_err is not None, f"jinja2 failed ({want_err}) but redline rendered:\n{got!r}"
        assert "chat template" in got_err, got_err
        return
    assert got_err is None, f"redline failed: {got_err}\njinja2 rendered:\n{want!r}"
    assert got == want
