"""Shared pytest fixtures: repository paths, build directories, models."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("REDLINE_BUILD", ROOT / "build"))
SAN_BUILD = ROOT / "build-address-undefined"
MODELS = ROOT / "models"


def model_path(name):
    """Path of models/NAME.gguf; skips the test when it is absent, except the
    default model, whose absence is a failure (set-up fetches it)."""
    p = MODELS / f"{name}.gguf"
    if not p.exists():
        if name == "smollm2-135m":
            pytest.fail(f"default model missing: {p} (run scripts/fetch-model smollm2-135m)")
        pytest.skip(f"model {name} not fetched (scripts/fetch-model {name})")
    return p


ALL_MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def build():
    return BUILD


def llamacpp_assets_dir():
    """Directory of the test data llama.cpp ships (ggml-vocab-*.gguf with
    their .inp/.out test vectors, templates/*.jinja), extracted from the
    pinned llama-cpp-python sdist by scripts/fetch-llamacpp-assets (which
    downloads it with pip on first use; later calls only print the path)."""
    import subprocess

    script = ROOT / "scripts" / "fetch-llamacpp-assets"
    p = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.fail(f"{script} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
    d = pathlib.Path(p.stdout.strip().splitlines()[-1])
    assert d.is_dir() and (d / "templates").is_dir(), d
    return d


@pytest.fixture(scope="session")
def llamacpp_assets():
    return llamacpp_assets_dir()
