"""Kernel benchmarks for the bf16 work (issue 16), run by bench/run.py after its core set:
16-bit GEMM and batched GEMM, fused SDPA forward and backward, softmax in fp32/bf16, sums over
the outer dims (bias gradients, issue 12). Each is
measured beside PyTorch CPU in the same run (run.py interleaves the two).

`python bench/bench_kernels.py` also prints the machine's bf16 peak and the GEMM rows as a
share of it, then each GEMM row alternated with the clock measurement in pairs (peak_shares: on a
shared VM the clock under 512-bit load moves from minute to minute, so only a row and a clock
measured together compare). The peak is instruction throughput x clock x cores:
  - AMX (TDPBF16PS: a 16x32 by 32x16 bf16 tile product into 16x16 fp32, 16384 flop per
    instruction, one every 16 cycles per core on Sapphire Rapids = 1024 flop/cycle), the path
    the runtime takes where cpuid reports amx_bf16;
  - AVX-512 BF16 (vdpbf16ps on 512-bit vectors: 16 lanes x 2 products x 2 flops = 64 flop per
    instruction): two per cycle on Intel server cores and AMD Zen 5 (cpu family 26), one on
    Zen 4 (256-bit datapaths);
  - AVX-512 without BF16 (Intel Skylake-SP to Ice Lake): bf16 is widened to fp32 while packing
    and computed by 512-bit fp32 FMAs, 2 FMA pipes x 16 lanes x 2 flops = 64 flop/cycle;
  - otherwise AVX2 FMA: bf16 is widened to fp32 while packing and computed by fp32 FMAs,
    2 FMA pipes x 8 lanes x 2 flops = 32 flop/cycle;
  clock: measured while the path's own vector instruction runs, with every CPU busy at once
  (one with --one-thread): each runs a chain of dependent integer adds (one a cycle on every x86
  core) with two of those instructions beside each add, on independent registers, for 0.2 s, in a
  small C program built with cc here; the slowest CPU's rate is taken, best of 3 rounds. Intel
  cores lower their clock for 512-bit work: the Ice Lake Xeon of 2026-12-07 counted 3.2-3.4 GHz
  with adds alone and 1.5-2.7 GHz under 512-bit FMAs on both cores (its FMA-only loop: 235-340
  GFLOP/s on 2 cores, not the 422-436 the integer clock implies). On a part that issued fewer of
  the instructions a cycle than counted above (one 512-bit FMA unit) the adds would wait for
  them, so the measured clock would fall in proportion and the peak stay the instruction's real
  rate (by construction; no such part was at hand to measure). The
  integer clock and /proc/cpuinfo's "cpu MHz" are printed beside it; in a VM cpuinfo is often the
  nominal clock (2596 MHz on a Zen 5 VM whose cores ran at about 4.5 GHz), and it is used only
  where no C compiler is found. AMX's own clock is not measured (vdpbf16ps stands in for it);
  cores: the CPUs this process may run on (the chip's compute threads use all of them).

`--cpu-time [rows]` prints the outer-sum rows (or the named ones) as best-of-25 process CPU time
per call instead, both sides one thread with `--one-thread`.

`--one-thread` runs both sides on one core (TORCH_TPU_NUM_THREADS=1, torch.set_num_threads(1)): on a
2-core machine that other work shares, the multi-threaded figures of both sides collapse at random
(a thread waits for a peer that is not scheduled), while one-thread figures stay comparable.
"""
import os
import pathlib
import sys

ONE_THREAD = __name__ == "__main__" and "--one-thread" in sys.argv
if ONE_THREAD:
    sys.argv.remove("--one-thread")
    os.environ["TORCH_TPU_NUM_THREADS"] = "1"  # before the device starts

import torch
import torch.nn.functional as F


def _cpuinfo():
    flags, mhz, vendor, family = set(), None, "", 0
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key == "flags" and not flags:
                flags = set(val.split())
            elif key == "cpu MHz" and mhz is None:
                mhz = float(val)
            elif key == "vendor_id" and not vendor:
                vendor = val.strip()
            elif key == "cpu family" and not family:
                family = int(val)
    except OSError:
        pass
    return flags, mhz, vendor, family


_CLOCK_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
/* argv[1]: "int" (dependent adds alone) or the vector instruction the GEMM path issues, two of them
   beside each add on independent accumulators: "fma512" (vfmadd231ps zmm), "fma256" (ymm),
   "dpbf16" (vdpbf16ps zmm). A core runs one add a cycle, so the adds count cycles at the clock
   the core holds while its vector unit is busy with that instruction (Intel cores lower it for
   512-bit work); where the core cannot issue two of them a cycle, the adds wait for them and the
   "clock" reads lower in proportion, so flop/cycle x this clock stays the instruction's real rate.
   argv[2]: threads (0: one per CPU this process may use); argv[3]: rounds (default 3). */
static int mode;
#define ADD "add $1, %0\n\t"
#define V(op, r, d) op " %%" r "15, %%" r "14, %%" r d "\n\t"
#define V12(op, r) V(op, r, "0") V(op, r, "1") V(op, r, "2") V(op, r, "3") V(op, r, "4") V(op, r, "5") \
                   V(op, r, "6") V(op, r, "7") V(op, r, "8") V(op, r, "9") V(op, r, "10") V(op, r, "11")
#define BLOCK(op, r) __asm__ volatile(ADD ADD ADD ADD ADD ADD V12(op, r) : "+r"(x) :: "xmm0", "xmm1", "xmm2", \
                                      "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
static void* run(void* arg) {
  long x = 0, n = 0;
  double t0 = now(), t;
  __asm__ volatile("vpxor %%xmm14, %%xmm14, %%xmm14\n\tvpxor %%xmm15, %%xmm15, %%xmm15" ::: "xmm14", "xmm15");
  do { /* 6000 dependent adds: 6000 cycles */
    for (int i = 0; i < 1000; ++i) {
      if (mode == 1) BLOCK("vfmadd231ps", "zmm")
      else if (mode == 2) BLOCK("vfmadd231ps", "ymm")
      else if (mode == 3) BLOCK("vdpbf16ps", "zmm")
      else __asm__ volatile(ADD ADD ADD ADD ADD ADD : "+r"(x));
    }
    n += 6000;
  } while ((t = now()) - t0 < 0.2);
  *(double*)arg = n / (t - t0) / 1e6;
  return (void*)x;
}
int main(int argc, char** argv) {
  const char* m = argc > 1 ? argv[1] : "int";
  mode = !strcmp(m, "fma512") ? 1 : !strcmp(m, "fma256") ? 2 : !strcmp(m, "dpbf16") ? 3 : 0;
  int want = argc > 2 ? atoi(argv[2]) : 0, rounds = argc > 3 ? atoi(argv[3]) : 3;
  cpu_set_t set;
  sched_getaffinity(0, sizeof(set), &set);
  pthread_t th[256];
  double mhz[256], best = 0;
  for (int round = 0; round < rounds; ++round) { /* the best: a round where the host ran something else reads low */
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 256 && (want <= 0 || n < want); ++c)
      if (CPU_ISSET(c, &set)) pthread_create(&th[n], NULL, run, &mhz[n]), ++n;
    double lo = 1e30;
    for (int i = 0; i < n; ++i) { pthread_join(th[i], NULL); if (mhz[i] < lo) lo = mhz[i]; }
    if (lo > best) best = lo;
  }
  printf("%.0f\n", best);
  return 0;
}
"""


_CLOCK_EXE = []  # the clock program, built once per process


def measured_mhz(load="int", threads=0, rounds=3):
    """The clock (see the module docstring) with `threads` CPUs busy (0: all this process may use),
    each running `load` ("int", "fma512", "fma256", "dpbf16"), the best of `rounds` rounds of 0.2 s,
    or None without a C compiler."""
    import atexit
    import shutil
    import subprocess
    import tempfile
    if not _CLOCK_EXE:
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if not cc:
            return None
        d = tempfile.mkdtemp()
        atexit.register(shutil.rmtree, d, True)
        src, exe = os.path.join(d, "clock.c"), os.path.join(d, "clock")
        pathlib.Path(src).write_text(_CLOCK_C)
        try:
            subprocess.run([cc, "-O1", "-pthread", src, "-o", exe], check=True, capture_output=True)
        except (subprocess.CalledProcessError, OSError):
            return None
        _CLOCK_EXE.append(exe)
    try:
        return float(subprocess.run([_CLOCK_EXE[0], load, str(threads), str(rounds)], check=True,
                                    capture_output=True, text=True).stdout)
    except (subprocess.CalledProcessError, OSError, ValueError):
        return None


def _peak_kind():
    """(flop per cycle per core, the clock program's load, how) for this machine's bf16 GEMM path,
    or (None, None, why)."""
    flags, _, vendor, family = _cpuinfo()
    if "amx_bf16" in flags and "amx_tile" in flags:
        return 1024, "dpbf16", "AMX tdpbf16ps: 16384 flop / 16 cycles; clock under vdpbf16ps (AMX's own not measured)"
    if "avx512_bf16" in flags:
        # two per cycle on Intel and on AMD Zen 5 (family 26: four 512-bit FP pipes, two of them
        # FMA; the 12 x 32 kernel alone in L1 ran at 570 GFLOP/s on one core, about 127
        # flop/cycle at the 4.5 GHz that core measured), one on Zen 4
        per = 64 * (1 if vendor == "AuthenticAMD" and family < 26 else 2)
        return per, "dpbf16", f"vdpbf16ps zmm: 64 flop x {per // 64}/cycle"
    if "avx512f" in flags:
        return 64, "fma512", "AVX-512: 2 FMA x 16 fp32 lanes x 2 flop (bf16 widened while packing)"
    if "fma" in flags and "avx2" in flags:
        return 32, "fma256", "AVX2: 2 FMA x 8 fp32 lanes x 2 flop (bf16 widened while packing)"
    return None, None, "neither AVX-512 BF16 nor AVX2 FMA"


def bf16_peak_gflops(threads=0):
    """(GFLOP/s, how) for the bf16 GEMM peak of this machine with `threads` cores computing (0: every
    CPU this process may use), or (None, why)."""
    _, info_mhz, _, _ = _cpuinfo()
    cores = threads or len(os.sched_getaffinity(0))
    per, load, how = _peak_kind()
    if not per:
        return None, how
    mhz = measured_mhz(load, threads)
    if mhz:
        idle = measured_mhz("int", threads)
        clock = f"{mhz:.0f} MHz measured under {load} on {cores} cores (integer clock {idle or 0:.0f}, cpuinfo {info_mhz or 0:.0f})"
    else:
        mhz, clock = info_mhz, f"{info_mhz or 0:.0f} MHz (cpuinfo; no C compiler to measure under load)"
    if not mhz:
        return None, "no clock: no C compiler and no cpu MHz in /proc/cpuinfo"
    return per * mhz * 1e-3 * cores, f"{how} = {per} flop/cycle x {clock} x {cores} cores"


def peak_shares(names, pairs=7, threads=0):
    """Each named GEMM row (ours) as a share of the peak measured right after it, in `pairs` pairs:
    where other work on the host moves the clock under 512-bit load (a shared VM: 1.5-2.8 GHz from
    minute to minute), a row and a peak measured minutes apart do not compare. Each pair times the
    row (run.timed: median of 3 calls after one untimed) and then measures the clock (the best of
    three 0.2 s rounds). Prints the median share, its range, and the medians of both figures."""
    import statistics
    import run
    per, load, how = _peak_kind()
    cores = threads or len(os.sched_getaffinity(0))
    if not names:
        return
    if not per or measured_mhz(load, threads, 1) is None:
        print(f"peak share: not measured ({how if not per else 'no C compiler'})")
        return
    print(f"share of the peak, row and clock alternated ({pairs} pairs; {how}, clock under {load} on {cores} cores):")
    for name in names:
        fn, gflops = BENCHES[name][0]("tpu")
        rows = []
        for _ in range(pairs):
            g = gflops(run.timed(fn, "tpu", 3)[0])
            mhz = measured_mhz(load, threads, 3)
            if mhz:
                rows.append((g / (per * mhz * 1e-3 * cores), g, per * mhz * 1e-3 * cores))
        if not rows:
            print(f"  {name:<18} clock not measured")
            continue
        sh = sorted(r[0] for r in rows)
        print(f"  {name:<18} {100 * statistics.median(sh):5.1f}% of peak (pairs {100 * sh[0]:.1f}-{100 * sh[-1]:.1f}%;"
              f" {statistics.median(r[1] for r in rows):.1f} GFLOP/s, peak {statistics.median(r[2] for r in rows):.1f})")


def _mm(n, dtype):
    def setup(device):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        return (lambda: torch.mm(a, b)), lambda s: 2 * n ** 3 / s / 1e9
    return setup


def bench_bmm_attn(device):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(32, 256, 64, generator=g).to(device=device, dtype=torch.bfloat16)
    b = torch.randn(32, 64, 256, generator=g).to(device=device, dtype=torch.bfloat16)
    return (lambda: torch.bmm(a, b)), lambda s: 2 * 32 * 256 * 64 * 256 / s / 1e9


def _linear_few_rows(rows, width_in, width_out, dtype=torch.float32):
    """F.linear of a few tokens (a decode step's batch) through a layer's weight."""
    def setup(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, width_in, generator=g).to(device=device, dtype=dtype)
        w = torch.randn(width_out, width_in, generator=g).to(device=device, dtype=dtype)
        return (lambda: F.linear(x, w)), lambda s: 2 * rows * width_in * width_out / s / 1e9
    return setup


def _linear_streamed(rows, width_in, width_out, dtype):
    """F.linear of a few tokens through as many weights as fill 96 MiB, one after another, so each
    is read from memory (a serving decode step, whose layers do not fit the caches): GB/s of weight."""
    def setup(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, width_in, generator=g).to(device=device, dtype=dtype)
        each = width_in * width_out * dtype.itemsize
        ws = [torch.randn(width_out, width_in, generator=g).to(device=device, dtype=dtype)
              for _ in range(max(2, (96 << 20) // each))]

        def fn():
            for w in ws:
                F.linear(x, w)
        return fn, lambda s: len(ws) * each / s / 1e9
    return setup


def _mm_fp32(m, k, n, form):
    """fp32 products of a GPT-2 block (hidden 768, MLP 3072, 1024 tokens) and an MLP's input gradient
    g @ W with 64 rows: form "x@W^T" (F.linear), "dY@W" (W row-major, not transposed), "dY^T@X"."""
    def setup(device):
        g = torch.Generator().manual_seed(0)
        if form == "x@W^T":
            x = torch.randn(m, k, generator=g).to(device)
            w = torch.randn(n, k, generator=g).to(device)
            fn = lambda: F.linear(x, w)
        elif form == "dY@W":
            x = torch.randn(m, k, generator=g).to(device)
            w = torch.randn(k, n, generator=g).to(device)
            fn = lambda: x @ w
        else:
            dy = torch.randn(k, m, generator=g).to(device)
            x = torch.randn(k, n, generator=g).to(device)
            fn = lambda: dy.t() @ x
        return fn, lambda s: 2 * m * k * n / s / 1e9
    return setup


SDPA_SHAPE = (1, 8, 1024, 64)  # batch, heads, seq, head dim


def _sdpa(dtype, backward):
    def setup(device):
        g = torch.Generator().manual_seed(0)
        q, k, v = [torch.randn(*SDPA_SHAPE, generator=g).to(device=device, dtype=dtype).requires_grad_(backward)
                   for _ in range(3)]
        go = torch.randn(*SDPA_SHAPE, generator=g).to(device=device, dtype=dtype)

        def fn():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if backward:
                q.grad = k.grad = v.grad = None
                out.backward(go)
            return out
        return fn, lambda s: s * 1e3
    return setup


def _softmax(dtype):
    def setup(device):
        a = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
        es = a.element_size()
        return (lambda: torch.softmax(a, dim=-1)), lambda s: 2 * es * a.numel() / s / 1e9
    return setup


def _outer_sum(shape, dtype, dims=0, transposed=False):
    """Sum over the outer dims: the bias gradient g.sum(0) of a linear layer's output gradient g
    (transposed: g as the strided view autograd produces, features contiguous along dim 0), or
    sum over (0, 1) of (B, T, C). GB/s = the input's bytes."""
    def setup(device):
        g = torch.Generator().manual_seed(0)
        if transposed:
            a = torch.randn(shape[::-1], generator=g).to(device=device, dtype=dtype).t()
        else:
            a = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
        return (lambda: a.sum(dims)), lambda s: a.element_size() * a.numel() / s / 1e9
    return setup


BENCHES = {
    "matmul_bf16_2048": (_mm(2048, torch.bfloat16), "GFLOP/s", True, "mm 2048x2048x2048 bf16 (fp32 accumulation)"),
    "matmul_bf16_512": (_mm(512, torch.bfloat16), "GFLOP/s", True, "mm 512x512x512 bf16"),
    "bmm_bf16_attn": (bench_bmm_attn, "GFLOP/s", True, "bmm bf16 32 x (256x64 @ 64x256), attention scores"),
    "linear_fp32_8x768": (_linear_few_rows(8, 768, 768), "GFLOP/s", True,
                          "F.linear fp32, 8 tokens x (768 -> 768): a decode batch through a layer"),
    "linear_fp32_16x768x3072": (_linear_few_rows(16, 768, 3072), "GFLOP/s", True,
                                "F.linear fp32, 16 tokens x (768 -> 3072)"),
    "linear_bf16_1x768x3072": (_linear_few_rows(1, 768, 3072, torch.bfloat16), "GFLOP/s", True,
                               "F.linear bf16, 1 token x (768 -> 3072), the weight in cache"),
    "linear_bf16_16x768x3072": (_linear_few_rows(16, 768, 3072, torch.bfloat16), "GFLOP/s", True,
                                "F.linear bf16, 16 tokens x (768 -> 3072), the weight in cache"),
    "linear_bf16_1x4096_streamed": (_linear_streamed(1, 4096, 4096, torch.bfloat16), "GB/s", True,
                                    "F.linear bf16, 1 token x (4096 -> 4096), 96 MiB of weights in turn"),
    "linear_bf16_16x4096_streamed": (_linear_streamed(16, 4096, 4096, torch.bfloat16), "GB/s", True,
                                     "F.linear bf16, 16 tokens x (4096 -> 4096), 96 MiB of weights in turn"),
    "linear_fp32_8x4096_streamed": (_linear_streamed(8, 4096, 4096, torch.float32), "GB/s", True,
                                    "F.linear fp32, 8 tokens x (4096 -> 4096), 96 MiB of weights in turn"),
    "mm_fp32_64x2048x2048": (_mm_fp32(64, 2048, 2048, "dY@W"), "GFLOP/s", True,
                             "fp32 g @ W, 64 x 2048 @ 2048 x 2048, W row-major: an MLP's input gradient"),
    "linear_fp32_1024x768x3072": (_mm_fp32(1024, 768, 3072, "x@W^T"), "GFLOP/s", True,
                                  "F.linear fp32, 1024 tokens x (768 -> 3072): GPT-2 MLP up, forward"),
    "mm_fp32_dX_1024x3072x768": (_mm_fp32(1024, 3072, 768, "dY@W"), "GFLOP/s", True,
                                 "fp32 dY @ W, 1024 x 3072 @ 3072 x 768: GPT-2 MLP down's input gradient"),
    "mm_fp32_dW_3072x1024x768": (_mm_fp32(3072, 1024, 768, "dY^T@X"), "GFLOP/s", True,
                                 "fp32 dY^T @ X, (1024 x 3072)^T @ 1024 x 768: GPT-2 MLP up's weight gradient"),
    "sdpa_causal_fp32_fwd": (_sdpa(torch.float32, False), "ms", False,
                             "SDPA causal fp32, batch 1, 8 heads, seq 1024, head 64, forward"),
    "sdpa_causal_fp32_fwdbwd": (_sdpa(torch.float32, True), "ms", False, "the same, forward + backward"),
    "sdpa_causal_bf16_fwd": (_sdpa(torch.bfloat16, False), "ms", False, "SDPA causal bf16, same shape, forward"),
    "sdpa_causal_bf16_fwdbwd": (_sdpa(torch.bfloat16, True), "ms", False, "the same, forward + backward"),
    "softmax_fp32": (_softmax(torch.float32), "GB/s", True, "softmax rows of 4096x1024 fp32, bytes = 2*4*N"),
    "softmax_bf16": (_softmax(torch.bfloat16), "GB/s", True, "softmax rows of 4096x1024 bf16, bytes = 2*2*N"),
    "colsum_fp32_8192x768": (_outer_sum((8192, 768), torch.float32), "GB/s", True,
                             "g.sum(0), g (64*128, 768) fp32: a bias gradient; bytes = the input's"),
    "colsum_bf16_8192x768": (_outer_sum((8192, 768), torch.bfloat16), "GB/s", True, "the same in bf16"),
    "colsum_fp32_8192x3072": (_outer_sum((8192, 3072), torch.float32), "GB/s", True, "g.sum(0), g (8192, 3072) fp32"),
    "colsum_bf16_8192x3072": (_outer_sum((8192, 3072), torch.bfloat16), "GB/s", True, "the same in bf16"),
    "colsum_fp32_64x2048": (_outer_sum((64, 2048), torch.float32), "GB/s", True, "g.sum(0), g (64, 2048) fp32"),
    "colsum_fp32_8192x768_t": (_outer_sum((8192, 768), torch.float32, transposed=True), "GB/s", True,
                               "g.sum(0), g (8192, 768) fp32 stored transposed (the reduced dim contiguous)"),
    "colsum_bf16_8192x768_t": (_outer_sum((8192, 768), torch.bfloat16, transposed=True), "GB/s", True,
                               "the same in bf16"),
    "sum01_fp32_64x128x768": (_outer_sum((64, 128, 768), torch.float32, dims=(0, 1)), "GB/s", True,
                              "sum(dim=(0, 1)) of (B, T, C) = (64, 128, 768) fp32"),
    "sum01_bf16_64x128x768": (_outer_sum((64, 128, 768), torch.bfloat16, dims=(0, 1)), "GB/s", True,
                              "the same in bf16"),
}


def cpu_time_table(names, runs=25):
    """Best of `runs` in process CPU time (device: dispatch + its queue thread's work, up to
    torch.tpu.synchronize(); CPU: the call), ms per call, for rows whose figure is bytes or flops per
    second: on a loaded shared machine wall time mostly measures when each side's threads get
    scheduled. Run with --one-thread so that process CPU time is one thread's work on either side."""
    import time
    print(f"{'benchmark':<24} {'ours ms':>9} {'CPU ms':>9} {'ours/CPU':>9}  (process CPU time, best of {runs})")
    for name in names:
        setup = BENCHES[name][0]
        best = {}
        for dev in ("tpu", "cpu"):
            fn, _ = setup(dev)
            fn()
            b = float("inf")
            for _ in range(runs):
                t0 = time.process_time()
                fn()
                if dev != "cpu":
                    torch.tpu.synchronize()
                b = min(b, time.process_time() - t0)
            best[dev] = b * 1e3
        print(f"{name:<24} {best['tpu']:9.3f} {best['cpu']:9.3f} {best['tpu'] / best['cpu']:9.2f}")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    if "--cpu-time" in sys.argv:
        # python bench/bench_kernels.py --one-thread --cpu-time [row,row,...]: the rows in CPU time
        sys.argv.remove("--cpu-time")
        if ONE_THREAD:
            torch.set_num_threads(1)
        import torch_tpu  # noqa: F401
        rows = sys.argv[1].split(",") if len(sys.argv) > 1 else [n for n in BENCHES if n.startswith(("colsum", "sum01"))]
        cpu_time_table(rows)
        sys.exit(0)
    # Standalone: run these rows through run.py's loop, then the GEMM rows as a share of the peak.
    import json
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import run
    if ONE_THREAD:
        torch.set_num_threads(1)
    names = ",".join(BENCHES)
    argv = sys.argv[1:] or ["--runs", "5"]
    out = str(pathlib.Path(run.__file__).parent / "results_kernels.json")
    rc = run.main(argv + ["--only", names, "--out", out] if "--only" not in argv else argv + ["--out", out])
    peak, how = bf16_peak_gflops(1 if ONE_THREAD else 0)
    print(f"bf16 peak: {peak:.1f} GFLOP/s ({how})" if peak else f"bf16 peak unknown: {how}")
    gemm = []
    if peak:
        for r in json.loads(pathlib.Path(out).read_text())["results"]:
            if r["unit"] == "GFLOP/s" and "ours" in r and "bf16" in r["name"]:
                gemm.append(r["name"])
                print(f"  {r['name']:<18} {r['ours']:8.1f} GFLOP/s = {100 * r['ours'] / peak:5.1f}% of peak"
                      f" (PyTorch CPU {100 * r['cpu'] / peak:5.1f}%)")
    peak_shares([n for n in gemm if n.startswith(("matmul", "bmm"))], threads=1 if ONE_THREAD else 0)
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    sys.exit(rc)
