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


_LLAMACPP_ASSETS = []  # [path] or [skip reason]: scripts/fetch-llamacpp-assets runs once per session


def llamacpp_assets_dir():
    """Directory of the test data llama.cpp ships (ggml-vocab-*.gguf with
    their .inp/.out test vectors, templates/*.jinja), extracted from the
    pinned llama-cpp-python sdist by scripts/fetch-llamacpp-assets (which
    downloads it with pip on first use; later calls only print the path).
    When the script cannot provide them (no network, no pip, bad hash) the
    test is skipped with the script's reason, or fails when
    REDLINE_REQUIRE_LLAMACPP_ASSETS=1 (a CI that must run these tests)."""
    import subprocess

    if not _LLAMACPP_ASSETS:
        script = ROOT / "scripts" / "fetch-llamacpp-assets"
        try:
            p = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
            ok = p.returncode == 0
            why = f"exit {p.returncode}: {p.stderr.strip()[-1000:]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, why = False, str(e)
        if ok:
            d = pathlib.Path(p.stdout.strip().splitlines()[-1])
            ok = d.is_dir() and (d / "templates").is_dir()
            why = f"{d} has no templates/"
        _LLAMACPP_ASSETS.append(d if ok else f"llama.cpp test assets unavailable ({script.name} {why})")
    v = _LLAMACPP_ASSETS[0]
    if isinstance(v, str):
        if os.environ.get("REDLINE_REQUIRE_LLAMACPP_ASSETS") == "1":
            pytest.fail(v)
        pytest.skip(v)
    return v


@pytest.fixture(scope="session")
def llamacpp_assets():
    return llamacpp_assets_dir()
