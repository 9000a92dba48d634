"""Where the host time of one small op goes (issue 16): instructions per `z = z + y` on 4x4 fp32,
counted by callgrind over N ops after a warm-up, on the device and on PyTorch CPU.

    python bench/callgrind_add.py [--ops 200] [--device tpu] [--top 25] [--inplace]

--inplace counts `x.add_(y, alpha=1e-3)` instead (bench/run.py's dispatch_inplace row).

Runs itself under `valgrind --tool=callgrind --instr-atstart=no`; collection is switched on only
around the timed loop (callgrind's client requests, through a small helper built with the system
compiler into a temporary directory), so importing torch is not counted. Prints Ir per op (all
threads: the chip's worker is counted too) and the functions with the most inclusive Ir. On a CPU
with AVX-512 it counts an x86-64-v3 build of the runtime (build/valgrind; valgrind runs no AVX-512).
"""
import argparse
import ctypes
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
MARKS_C = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("ops"); }
"""


def _inner(a):
    import torch
    sys.path.insert(0, str(HERE))
    import run
    run.load_device(a.device)
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "marks.c").write_text(MARKS_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(d / "marks.so"), str(d / "marks.c")], check=True)
    marks = ctypes.CDLL(str(d / "marks.so"))
    x, y = torch.randn(4, 4, device=a.device), torch.randn(4, 4, device=a.device)
    z = x
    for _ in range(300):  # every per-signature cache is warm
        z = z + y
    run.sync(a.device)
    z = x
    if a.inplace:
        for _ in range(300):
            x.add_(y, alpha=1e-3)
        run.sync(a.device)
        marks.cg_start()
        for _ in range(a.ops):
            x.add_(y, alpha=1e-3)
        run.sync(a.device)
        marks.cg_stop()
        return 0
    marks.cg_start()
    for _ in range(a.ops):
        z = z + y
    run.sync(a.device)
    marks.cg_stop()
    return 0


def _has_avx512():
    try:
        return "avx512f" in pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _valgrind_runtime():
    """Valgrind runs no AVX-512 code, and the runtime is built with -march=native: on such a CPU,
    count a build of the same sources for x86-64-v3 (AVX2, FMA), which the C++ layer loads from
    LD_LIBRARY_PATH ahead of its RUNPATH (as the ASan build is loaded). CPU-dispatched code (ours
    by cpuid, PyTorch's) sees the CPU valgrind reports and takes its AVX2 paths."""
    root = HERE.parent
    build = "build/valgrind"
    opt = "-O3 -march=x86-64-v3 -fno-math-errno -fno-trapping-math"
    subprocess.run(["make", "-s", "-C", str(root), "-j2", f"BUILD={build}", f"OPT={opt}", f"{build}/libtpurt.so"],
                   check=True)
    return str(root / build)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu")
    p.add_argument("--ops", type=int, default=200)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--inplace", action="store_true")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.inner:
        return _inner(a)
    env = dict(os.environ)
    if _has_avx512():
        env["LD_LIBRARY_PATH"] = _valgrind_runtime() + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    out = pathlib.Path(tempfile.mkdtemp()) / "cg.out"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
           sys.executable, __file__, "--inner", "--device", a.device, "--ops", str(a.ops)] + (["--inplace"] if a.inplace else [])
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, env=env)
    dumps = sorted(out.parent.glob(out.name + "*"))
    dump = max(dumps, key=lambda f: f.stat().st_size)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True).stdout
    total = None
    for line in ann.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
    what = "x.add_(y, alpha=1e-3)" if a.inplace else "z = z + y"
    print(f"device {a.device}: {total / a.ops:,.0f} instructions per {what} ({a.ops} ops; dump {dump})")
    shown = 0
    for line in ann.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].replace(",", "").isdigit() and "PROGRAM TOTALS" not in line:
            ir = int(parts[0].replace(",", ""))
            print(f"  {ir / a.ops:>10,.0f}/op  {' '.join(parts[1:])[:150]}")
            shown += 1
            if shown >= a.top:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
