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
# LCPP_ISA: which instruction sets the peer is built for (bench/peer-llamacpp
# builds each into its own directory):
#   native  GGML_NATIVE: everything this CPU has (the default; on a CPU with
#           AMX, llama.cpp's AMX tiles for its q4_0/q4_1/q8_0 matrices, which
#           in these pinned sources give wrong results for q4_1: upstream
#           ggml-org/llama.cpp#16315, measured in docs/PERFORMANCE.md)
#   noamx   AVX2/FMA/F16C/BMI2 + AVX-512 F/BW/VL/VNNI/VBMI/BF16 + AVX-VNNI,
#           no AMX: the fair peer on an AMX Xeon (needs AVX-512 to run)
#   avx2    AVX2/FMA/F16C only: the peer a Zen 3 user runs, beside redline's
#           AVX2 table (RL_KERNELS=avx2)
LCPP_ISA="${LCPP_ISA:-native}"
case "$LCPP_ISA" in
native) LCPP_ISA_FLAGS=(-DGGML_NATIVE=ON); LCPP_SUFFIX="" ;;
noamx) LCPP_ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON
        -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
        -DGGML_AMX_BF16=OFF); LCPP_SUFFIX=-noamx ;;
avx2) LCPP_ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX512=OFF); LCPP_SUFFIX=-avx2 ;;
*) echo "error: LCPP_ISA=$LCPP_ISA: expected native, noamx or avx2" >&2; exit 2 ;;
esac
# LCPP_BUILD=DIR: another build of the same sources to compare against (with
# --skip-build)
LCPP_BUILD="${LCPP_BUILD:-$CACHE/llama.cpp-build-$LCPP_PY_VERSION$LCPP_SUFFIX}"
LCPP_BIN="$LCPP_BUILD/bin"
REDLINE="${REDLINE:-$ROOT/build/redline}"

die() { echo "error: $*" >&2; exit 1; }
