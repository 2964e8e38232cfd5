"""Runs every C unit-test binary (cmocka) in the release and the
ASan+UBSan builds; each binary asserts its own results."""
import subprocess

import pytest

from conftest import BUILD, ROOT, SAN_BUILD

TESTS = sorted(p.stem for p in (ROOT / "tests" / "unit").glob("test_*.c"))


@pytest.mark.parametrize("build_dir", [BUILD, SAN_BUILD], ids=["release", "asan-ubsan"])
@pytest.mark.parametrize("name", TESTS)
def test_unit(name, build_dir):
    exe = build_dir / "tests" / name
    assert exe.exists(), f"{exe} not built (make test-bins)"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=900, cwd=str(ROOT),
                       env={"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1",
                            "PATH": "/usr/bin:/bin",
                            # the sanitizer build runs the model-driven tests on fewer prompts
                            "REDLINE_QUICK": "1" if build_dir == SAN_BUILD else "0"})
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
