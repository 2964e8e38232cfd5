"""The public header stands alone, and a program that embeds the engine
through it alone works.

- include/redline.h compiles with -Iinclude only, as C11 with -Wall -Wextra
  -Wpedantic -Werror (no base/ or sample/ header behind it);
- examples/embed.c (built by `make examples` with -Iinclude only, linked
  against build/librl.a) runs on the default model: it streams a non-empty
  greedy completion to stdout, checks that the streaming detokenizer gives
  back the events' text, and exits 0.
"""
import shutil
import subprocess

import pytest

from conftest import BUILD, ROOT, model_path


@pytest.mark.parametrize("std", ["c11", "c17"])
def test_header_compiles_alone(tmp_path, std):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler"
    src = tmp_path / "only_header.c"
    src.write_text('#include "redline.h"\nint main(void) { rl_err e; (void)e; return RL_OK; }\n')
    r = subprocess.run([cc, f"-std={std}", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                        "-I", str(ROOT / "include"), "-fsyntax-only", str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_embed_example_runs():
    exe = BUILD / "examples" / "embed"
    if not exe.exists():
        pytest.fail(f"{exe} not built (make examples)")
    m = model_path("smollm2-135m")
    r = subprocess.run([str(exe), str(m), "Name three primary colors."], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 3, r.stdout
    assert "streaming detokenizer reproduces" in r.stderr, r.stderr
    assert "llama" in r.stderr  # the model facts came through rl_vocab_model_info
