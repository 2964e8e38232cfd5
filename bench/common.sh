# Shared settings of the bench/ scripts (sourced, not run).
# The peer llama.cpp comes from the llama-cpp-python sdist on PyPI, pinned by
# version and sha256; everything fetched or built lives in bench/.cache/
# (git-ignored).
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
CACHE="$BENCH_DIR/.cache"
LCPP_PY_VERSION="0.3.16"
LCPP_PY_SHA256="34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6"
LCPP_SRC="$CACHE/llama-cpp-python-$LCPP_PY_VERSION/vendor/llama.cpp"
# LCPP_BUILD=DIR: another build of the same sources to compare against (with
# --skip-build), e.g. an AVX2-only one beside redline's AVX2 table on an
# AVX-512 machine
LCPP_BUILD="${LCPP_BUILD:-$CACHE/llama.cpp-build-$LCPP_PY_VERSION}"
LCPP_BIN="$LCPP_BUILD/bin"
REDLINE="${REDLINE:-$ROOT/build/redline}"

die() { echo "error: $*" >&2; exit 1; }
