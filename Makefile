# redline build.  `make` = optimized release build at build/redline.
#   make SAN=address,undefined   -> sanitizer build in build-address-undefined/
#   make SAN=thread              -> ThreadSanitizer build in build-thread/
#   make DEBUG=1                 -> -O0 -g, debug asserts on, in build-debug/
#   make test-bins               -> unit-test binaries under $(BUILD)/tests/, tools under
#                                   $(BUILD)/tools/, bench/ablation, examples, header check
#   make examples                -> examples/*.c under $(BUILD)/examples/ (-Iinclude only)
#   make check-header            -> include/redline.h compiles alone (-Iinclude, C11, -Werror)
#   make fuzz                    -> libFuzzer targets (clang) under build-fuzz/
#   make MPI=1                   -> with the MPI pipeline (src/dist/dist.c, worker.c; Open
#                                   MPI's mpicc gives the flags) in build-mpi/; without it
#                                   src/dist/nompi.c refuses to run under mpirun
# Sources are found by wildcard: a new .c file under src/<module>/ is built
# with no Makefile change.  Files under src/kernels/x86/ get AVX2/FMA/F16C
# flags, src/kernels/x86/vnni*.c also AVX512F/BW/VL/VNNI and amx*.c those, AVX512-VBMI
# and AMX-TILE/INT8 (no other file may: AVX2-only CPUs must never reach
# those instructions); everything else
# is baseline x86-64 so the binary runs anywhere and picks kernels at
# start-up (src/kernels/dispatch.c).
CC      ?= cc
comma   := ,
ifeq ($(MPI),1)
BUILD   ?= build-mpi$(if $(SAN),-$(subst $(comma),-,$(SAN)))
endif
ifneq ($(SAN),)
BUILD   ?= build-$(subst $(comma),-,$(SAN))
SANFLAGS = -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(DEBUG),1)
BUILD   ?= build-debug
else
BUILD   ?= build
endif
ifeq ($(DEBUG),1)
OPT     = -O0 -g3
else ifneq ($(SAN),)
OPT     = -O1 -g
else
OPT     = -O2 -g -DNDEBUG
endif

CFLAGS_COMMON = -std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
	-D_GNU_SOURCE -Iinclude -Isrc -MMD -MP -pthread $(OPT) $(SANFLAGS) $(EXTRA_CFLAGS)
SIMDFLAGS = -mavx2 -mfma -mf16c
VNNIFLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512vnni
AMXFLAGS  = -mavx512vbmi -mamx-tile -mamx-int8
LIBS    = -lm -lpthread -lpcre2-8 -ljansson -lmicrohttpd -lnettle
TESTLIBS = -lcmocka

LIB_SRC  := $(filter-out src/cli/% src/server/%,$(wildcard src/*/*.c src/*/*/*.c))
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell mpicc --showme:compile)
LIBS     += $(shell mpicc --showme:link)
LIB_SRC  := $(filter-out src/dist/nompi.c,$(LIB_SRC))
else
LIB_SRC  := $(filter-out src/dist/dist.c src/dist/worker.c,$(LIB_SRC))
endif
SRV_SRC  := $(wildcard src/server/*.c)
CLI_SRC  := $(wildcard src/cli/*.c)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTUTIL_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/unit/*.c))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tools/%)
ABL_SRC  := $(wildcard bench/ablation/*.c)
EX_SRC   := $(wildcard examples/*.c)
EX_BIN   := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
SRV_OBJ  := $(SRV_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTUTIL_OBJ := $(TESTUTIL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ABL_OBJ  := $(ABL_SRC:%.c=$(BUILD)/obj/%.o)
LIBRL    := $(BUILD)/librl.a
# the CLI's shared helpers (args, report, version, ...) for tests and bench programs
LIBCLI   := $(BUILD)/libcli.a
CLI_LIB_OBJ := $(filter-out $(BUILD)/obj/src/cli/main.o,$(CLI_OBJ))
# examples see the public header only: no -Isrc
EX_CFLAGS = -std=c11 -Wall -Wextra -Werror -Iinclude -pthread $(OPT) $(SANFLAGS)

GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

.PHONY: all test-bins examples check-header fuzz clean format format-check
all: $(BUILD)/redline

# (the more specific pattern wins for vnni*.c and amx*.c)
$(BUILD)/obj/src/kernels/x86/amx%.o: src/kernels/x86/amx%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SIMDFLAGS) $(VNNIFLAGS) $(AMXFLAGS) -c $< -o $@

$(BUILD)/obj/src/kernels/x86/vnni%.o: src/kernels/x86/vnni%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SIMDFLAGS) $(VNNIFLAGS) -c $< -o $@

$(BUILD)/obj/src/kernels/x86/%.o: src/kernels/x86/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SIMDFLAGS) -c $< -o $@

$(BUILD)/obj/src/cli/version.o: EXTRA_DEFS = -DRL_GIT_COMMIT=\"$(GIT_COMMIT)\"

$(BUILD)/obj/src/dist/%.o: EXTRA_DEFS = $(MPI_CFLAGS)
ifeq ($(MPI),1)
$(BUILD)/obj/src/cli/main.o: EXTRA_DEFS = -DRL_HAVE_MPI
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_DEFS) -c $< -o $@

$(LIBRL): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBCLI): $(CLI_LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/redline: $(CLI_OBJ) $(SRV_OBJ) $(LIBRL)
	$(CC) $(CFLAGS_COMMON) -o $@ $(CLI_OBJ) $(SRV_OBJ) $(LIBRL) $(LIBS)

test-bins: $(TEST_BIN) $(TOOL_BIN) $(BUILD)/redline $(BUILD)/bench/ablation examples check-header

# The technique table (bench/ablation/): its own program over librl.
$(BUILD)/bench/ablation: $(ABL_OBJ) $(LIBCLI) $(LIBRL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $(ABL_OBJ) $(LIBCLI) $(LIBRL) $(LIBS)

examples: $(EX_BIN)

$(BUILD)/examples/%: examples/%.c $(LIBRL) include/redline.h include/redline-types.h
	@mkdir -p $(dir $@)
	$(CC) $(EX_CFLAGS) -o $@ $< $(LIBRL) $(LIBS)

check-header:
	$(CC) -std=c11 -Wall -Wextra -Werror -Wpedantic -Iinclude -fsyntax-only -x c include/redline.h

# Small helper programs used by the Python tests (oracle comparisons).
$(BUILD)/tools/%: tests/tools/%.c $(LIBRL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $< $(LIBRL) $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(TESTUTIL_OBJ) $(SRV_OBJ) $(LIBCLI) $(LIBRL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Itests/unit -o $@ $< $(TESTUTIL_OBJ) $(SRV_OBJ) $(LIBCLI) $(LIBRL) $(LIBS) $(TESTLIBS)

# libFuzzer targets: clang, ASan+UBSan, one binary per tests/fuzz/fuzz_*.c.
FUZZ_CC ?= clang
FUZZ_BUILD = build-fuzz
fuzz:
	$(MAKE) BUILD=$(FUZZ_BUILD)/lib CC=$(FUZZ_CC) SAN=address,undefined \
		EXTRA_CFLAGS="-fsanitize=fuzzer-no-link" $(FUZZ_BUILD)/lib/librl.a
	@mkdir -p $(FUZZ_BUILD)
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo "  FUZZ $$n"; \
	  $(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -O1 -g -fsanitize=fuzzer,address,undefined \
	    -o $(FUZZ_BUILD)/$$n $$f $(FUZZ_BUILD)/lib/librl.a $(LIBS) || exit 1; done

# Generated files keep their generator's layout: src/tokenizer/wpm_tables.c (tests/tools/gen_wpm_tables.py)
# and src/server/webpage.c (tests/python/test_webpage.py --write, which checks it is current).
FORMAT_FILES = $$(git ls-files 'src/*.c' 'src/*.h' 'include/*.h' 'tests/*.c' 'tests/*.h' 'examples/*.c' 'bench/*.c' 'bench/*.h' | grep -v -e '_tables\.c$$' -e '^src/server/webpage\.c$$')

format:
	clang-format -i $(FORMAT_FILES)

# Fails (naming the file and line) when a committed C file differs from .clang-format's layout.
format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build build-* 

# make test [SAN=address,undefined]: builds the unit binaries of that build
# and runs each in turn from the repository root; stops at the first that
# fails, naming it.  The sanitizer build runs the model-driven tests on
# fewer prompts (REDLINE_QUICK=1, as tests/python/test_unit_binaries.py).
.PHONY: test
test: test-bins
	@for t in $(TEST_BIN); do echo "  TEST $$t"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  REDLINE_QUICK=$${REDLINE_QUICK:-$(if $(SAN),1,0)} ./$$t || { echo "FAILED: $$t" >&2; exit 1; }; done
	@echo "all $(words $(TEST_BIN)) unit-test binaries in $(BUILD)/tests passed"

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
