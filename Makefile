# torch_tpu build: the C runtime (libtpurt), its C unit tests (also under
# ASan+UBSan), and the thin C++ layer built against the installed torch.
PY ?= .venv/bin/python
CC ?= gcc
CXX ?= g++
BUILD ?= build

# -march=native: the runtime is built on the machine that runs it (README).
# Where that machine has AVX-512, loops gcc vectorizes by itself (the elementwise family's
# expressions, the generated kernels) use 16-float vectors: gcc's default for such CPUs is 8, and the
# transcendental ops (exp, tanh, erf, sigmoid, silu, gelu) ran 1.25-1.4x faster with 16 (README,
# "Performance"). Hand-written kernels pick their own width with intrinsics either way.
VEC512 := $(shell $(CC) -march=native -dM -E - </dev/null 2>/dev/null | grep -q __AVX512F__ && echo -mprefer-vector-width=512)
OPT ?= -O3 -march=native $(VEC512) -fno-math-errno -fno-trapping-math
WARN = -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -fPIC -pthread -fvisibility=hidden $(WARN) -Iruntime/include -Iruntime
LIBS = -lopenblas -lm -pthread -ldl

RT_SRCS := $(shell find runtime -name '*.c' -not -path 'runtime/tests/*' | sort)
RT_OBJS := $(RT_SRCS:%.c=$(BUILD)/obj/%.o)
ASAN_OBJS := $(RT_SRCS:%.c=$(BUILD)/asan/%.o)
TEST_SRCS := $(wildcard runtime/tests/test_*.c)
TESTS := $(TEST_SRCS:runtime/tests/%.c=$(BUILD)/tests/%)
ASAN_TESTS := $(TEST_SRCS:runtime/tests/%.c=$(BUILD)/asan-tests/%)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: all runtime ext examples test-c test-c-asan runtime-asan clean
.SECONDARY:
all: runtime ext examples

runtime: torch_tpu/lib/libtpurt.so

# The flags the objects were built with: rewritten only when they change, so a change of flags (or of
# the machine's vector width above) rebuilds every object instead of mixing two builds.
FLAGS_STAMP = $(BUILD)/cflags.txt
.PHONY: force
$(FLAGS_STAMP): force
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS_BASE) $(OPT)' | cmp -s - $@ || echo '$(CC) $(CFLAGS_BASE) $(OPT)' > $@

$(BUILD)/obj/%.o: %.c $(shell find runtime -name '*.h') $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) -c $< -o $@

$(BUILD)/asan/%.o: %.c $(shell find runtime -name '*.h')
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O1 -g -march=native $(SANFLAGS) -c $< -o $@

# Generated kernels (runtime/compiler/) are built at run time by this compiler with the runtime's own
# flags, against this tree's headers, so they compute what the library's loops compute. The stamp (a
# checksum of every runtime header, and the compiler's version) goes into each generated source, so a
# kernel cached by another build of the runtime is never loaded by this one. Only the JIT build uses them.
JIT_STAMP = $(shell cat $(sort $(shell find runtime -name '*.h')) | cksum | cut -d' ' -f1)-$(shell $(CC) -dumpfullversion)
JIT_DEFS = -DTPURT_JIT_CC='"$(CC)"' -DTPURT_JIT_CFLAGS='"-std=c11 -D_GNU_SOURCE $(OPT)"' \
           -DTPURT_JIT_SRC='"$(CURDIR)/runtime"' -DTPURT_JIT_STAMP='"$(JIT_STAMP)"'
$(BUILD)/obj/runtime/compiler/jit.o $(BUILD)/asan/runtime/compiler/jit.o: CFLAGS_BASE += $(JIT_DEFS)

$(BUILD)/libtpurt.so: $(RT_OBJS)
	$(CC) -shared -o $@ $(RT_OBJS) $(LIBS)

torch_tpu/lib/libtpurt.so: $(BUILD)/libtpurt.so
	@mkdir -p torch_tpu/lib
	cp $< $@.tmp && mv -f $@.tmp $@  # rename: running processes keep the old file

# C programs on the runtime's public API only, linked against the shared library (README: export).
examples: $(BUILD)/examples/run_export
$(BUILD)/examples/%: examples/%.c torch_tpu/lib/libtpurt.so $(wildcard runtime/include/tpurt/*.h)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -Iruntime/include $< -o $@ -Ltorch_tpu/lib -ltpurt \
	  -Wl,-rpath,'$$ORIGIN/../../torch_tpu/lib'

$(BUILD)/tests/%: runtime/tests/%.c $(RT_OBJS) runtime/tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fvisibility=default $(OPT) $< $(RT_OBJS) -o $@ $(LIBS)

# C benchmarks of single kernels, linked like the tests (bench/paged_decode.c).
$(BUILD)/bench/%: bench/%.c $(RT_OBJS) runtime/tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Iruntime/tests -fvisibility=default $(OPT) $< $(RT_OBJS) -o $@ $(LIBS)

# Where the build has AVX-512, test_vmath is built a second time without it, so the 8-lane vector
# math (what an AVX2-only machine runs) is checked against the scalar bits here too.
ifneq ($(VEC512),)
TESTS += $(BUILD)/tests/test_vmath_avx2
$(BUILD)/tests/test_vmath_avx2: runtime/tests/test_vmath.c $(RT_OBJS) runtime/tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fvisibility=default $(OPT) -mno-avx512f $< $(RT_OBJS) -o $@ $(LIBS)
endif

$(BUILD)/asan-tests/%: runtime/tests/%.c $(ASAN_OBJS) runtime/tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -fvisibility=default -O1 -g -march=native $(SANFLAGS) $< $(ASAN_OBJS) -o $@ $(LIBS)

test-c: $(TESTS)
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done

test-c-asan: $(ASAN_TESTS)
	@set -e; for t in $(ASAN_TESTS); do echo "== $$t (asan+ubsan)"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $$t; done

# The runtime library under ASan+UBSan, for Python programs (the fuzzer: scripts/fuzz.sh --asan). The
# C++ layer finds libtpurt.so through its RUNPATH, which LD_LIBRARY_PATH=$(BUILD)/asan-lib overrides;
# python itself is not instrumented, so libasan/libubsan are preloaded (scripts/fuzz.sh does both).
runtime-asan: $(BUILD)/asan-lib/libtpurt.so
$(BUILD)/asan-lib/libtpurt.so: $(ASAN_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(SANFLAGS) -o $@ $(ASAN_OBJS) $(LIBS)

# ---- the C++ layer (torch_tpu/_C.so) against the installed torch ----
CXX_SRCS := $(wildcard torch_tpu/csrc/*.cpp)
CXX_OBJS := $(CXX_SRCS:%.cpp=$(BUILD)/obj/%.o)
$(BUILD)/torch_flags.mk: $(PY)
	@mkdir -p $(BUILD)
	$(PY) scripts/torch_flags.py > $@
-include $(BUILD)/torch_flags.mk

$(BUILD)/obj/torch_tpu/csrc/%.o: torch_tpu/csrc/%.cpp $(wildcard torch_tpu/csrc/*.h) runtime/include/tpurt/*.h $(BUILD)/torch_flags.mk
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -fPIC $(TORCH_CXXFLAGS) -Iruntime/include -Itorch_tpu/csrc -c $< -o $@

# The profiler's Kineto plugin (profiler.cpp) includes Kineto's headers as torch ships them; their
# fmt calls are compiled in (FMT_HEADER_ONLY), since libtorch does not export fmt.
TORCH_INC_DIR := $(firstword $(filter %/torch/include,$(TORCH_CXXFLAGS)))
# torchvision's ops: their shared header sits in csrc/vision/, outside the *.h every C++ object depends on.
$(filter $(BUILD)/obj/torch_tpu/csrc/vision%,$(CXX_OBJS)): torch_tpu/csrc/vision/vision.h
$(BUILD)/obj/torch_tpu/csrc/profiler.o: TORCH_CXXFLAGS += -isystem $(TORCH_INC_DIR)/kineto -DFMT_HEADER_ONLY

ext: torch_tpu/_C$(PY_EXT_SUFFIX)
torch_tpu/_C$(PY_EXT_SUFFIX): $(CXX_OBJS) torch_tpu/lib/libtpurt.so
	$(CXX) -shared -o $@.tmp $(CXX_OBJS) -Ltorch_tpu/lib -ltpurt $(TORCH_LDFLAGS) -Wl,-rpath,'$$ORIGIN/lib' && mv $@.tmp $@

clean:
	rm -rf $(BUILD) torch_tpu/lib torch_tpu/_C*.so
