"""Elementwise math ops (issue 16): unary, binary (atan2, xlogy, fmod, pow, ...) and three-operand (clamp with
two bounds, addcmul, addcdiv, lerp), on tpu (Strict) beside PyTorch CPU, in the same run.

Each row is one op on one dtype and size: the best of `--runs` rounds, each round the mean of
`--loop` calls (tpu calls end with torch.tpu.synchronize()); tpu and CPU rounds alternate so a
change in the machine's load hits both. The ratio is CPU time / tpu time (above 1: tpu faster).

  python bench/bench_unary.py                       # every op, fp32 and bf16, 2^22 and 2^17
  python bench/bench_unary.py --ops sin,cos --sizes 20 --dtypes fp32
  python bench/bench_unary.py --one-thread          # both sides on one core

Inputs cover each op's interesting range (sin/cos over a few periods, atan over +-8, erfc where it
is neither 0 nor 2, ...), drawn once on the CPU and copied to the device.
"""
import argparse
import os
import sys
import time

ONE_THREAD = "--one-thread" in sys.argv
if ONE_THREAD:
    os.environ["TORCH_TPU_NUM_THREADS"] = "1"  # before the device starts

import torch

# op name -> (callable, input maker from a standard normal tensor)
OPS = {
    "exp": (torch.exp, lambda r: r * 4),
    "exp2": (torch.exp2, lambda r: r * 6),
    "log": (torch.log, lambda r: r.abs() * 10 + 1e-3),
    "log2": (torch.log2, lambda r: r.abs() * 10 + 1e-3),
    "log10": (torch.log10, lambda r: r.abs() * 10 + 1e-3),
    "tanh": (torch.tanh, lambda r: r * 3),
    "sigmoid": (torch.sigmoid, lambda r: r * 4),
    "sin": (torch.sin, lambda r: r * 10),
    "cos": (torch.cos, lambda r: r * 10),
    "tan": (torch.tan, lambda r: r * 2),
    "atan": (torch.atan, lambda r: r * 8),
    "asin": (torch.asin, lambda r: r.clamp(-3, 3) / 3),
    "acos": (torch.acos, lambda r: r.clamp(-3, 3) / 3),
    "sinh": (torch.sinh, lambda r: r * 4),
    "asinh": (torch.asinh, lambda r: r * 10), "acosh": (torch.acosh, lambda r: r.abs() * 10 + 1),
    "atanh": (torch.atanh, lambda r: r.clamp(-3, 3) / 3.1), "log1p": (torch.log1p, lambda r: r.abs() * 3),
    "expm1": (torch.expm1, lambda r: r * 3),
    "lgamma": (torch.lgamma, lambda r: r * 5), "digamma": (torch.digamma, lambda r: r.abs() * 5 + 0.1),
    "erfinv": (torch.erfinv, lambda r: r.clamp(-3, 3) / 3.1), "i0": (torch.i0, lambda r: r * 5),
    "cosh": (torch.cosh, lambda r: r * 4),
    "erf": (torch.erf, lambda r: r * 2),
    "gelu": (torch.nn.functional.gelu, lambda r: r * 3),
    "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), lambda r: r * 3),
    "gelu_backward": (lambda x: torch.ops.aten.gelu_backward(x, x), lambda r: r * 3),  # grad = x
    "silu": (torch.nn.functional.silu, lambda r: r * 3),
    "erfc": (torch.erfc, lambda r: r * 3),
    "atan2": (lambda x: torch.atan2(x[0], x[1]), None),
    "sinc": (torch.sinc, lambda r: r * 4),
    "entr": (torch.special.entr, lambda r: r.abs() * 3),
    "mish": (torch.nn.functional.mish, lambda r: r * 3),
    "softplus": (torch.nn.functional.softplus, lambda r: r * 3),
    "logsigmoid": (torch.nn.functional.logsigmoid, lambda r: r * 3),
    "relu": (torch.relu, lambda r: r),
    "neg": (torch.neg, lambda r: r),
    "pow2.5": (lambda x: torch.pow(x, 2.5), lambda r: r.abs() * 3),
    "i1": (torch.special.i1, lambda r: r * 5),
    "i1e": (torch.special.i1e, lambda r: r * 5),
    "bessel_j0": (torch.special.bessel_j0, lambda r: r * 5), "bessel_j1": (torch.special.bessel_j1, lambda r: r * 5),
    "bessel_y0": (torch.special.bessel_y0, lambda r: r.abs() * 5 + 1e-3),
    "bessel_y1": (torch.special.bessel_y1, lambda r: r.abs() * 5 + 1e-3),
    "bessel_k0": (torch.special.modified_bessel_k0, lambda r: r.abs() * 5 + 1e-3),
    "bessel_k1e": (torch.special.scaled_modified_bessel_k1, lambda r: r.abs() * 5 + 1e-3),
    # binary: inputs from BINARY below
    "xlogy": (lambda x: torch.xlogy(x[0], x[1]), None),
    "logaddexp": (lambda x: torch.logaddexp(x[0], x[1]), None),
    "maximum": (lambda x: torch.maximum(x[0], x[1]), None),
    "fmod": (lambda x: torch.fmod(x[0], x[1]), None),
    "remainder": (lambda x: torch.remainder(x[0], x[1]), None),
    "floor_divide": (lambda x: torch.floor_divide(x[0], x[1]), None),
    "pow": (lambda x: torch.pow(x[0], x[1]), None),
    "softplus_backward": (lambda x: torch.ops.aten.softplus_backward(x[0], x[1], 1.0, 20.0), None),
    "sigmoid_backward": (lambda x: torch.ops.aten.sigmoid_backward(x[0], x[1]), None),
    "nextafter": (lambda x: torch.nextafter(x[0], x[1]), None),
    "clamp": (lambda x: torch.clamp(x, -1.0, 1.0), lambda r: r * 2),
    "clamp_min": (lambda x: torch.clamp_min(x, 0.0), lambda r: r),
    # three operands: inputs from BINARY below too
    "clamp_t": (lambda x: torch.clamp(x[0], x[1], x[2]), None),
    "addcmul": (lambda x: torch.addcmul(x[0], x[1], x[2], value=0.5), None),
    "addcdiv": (lambda x: torch.addcdiv(x[0], x[1], x[2], value=0.5), None),
    "lerp": (lambda x: torch.lerp(x[0], x[1], 0.3), None),
    "lerp_t": (lambda x: torch.lerp(x[0], x[1], x[2]), None),
}
# ops of two or three tensors: one maker per operand, each from a normal draw of its own
BINARY = {
    "atan2": (lambda r: r, lambda r: r),
    "xlogy": (lambda r: r, lambda r: r.abs() * 3),
    "logaddexp": (lambda r: r * 3, lambda r: r * 3),
    "maximum": (lambda r: r, lambda r: r),
    "fmod": (lambda r: r * 100, lambda r: r.abs() * 3 + 0.1),
    "remainder": (lambda r: r * 100, lambda r: r * 3),
    "floor_divide": (lambda r: r * 100, lambda r: r * 3),
    "pow": (lambda r: r.abs() * 3, lambda r: r * 2),
    "softplus_backward": (lambda r: r, lambda r: r * 3),
    "sigmoid_backward": (lambda r: r, lambda r: r.sigmoid()),
    "nextafter": (lambda r: r, lambda r: r * 3),
    "clamp_t": (lambda r: r * 2, lambda r: -r.abs(), lambda r: r.abs()),
    "addcmul": (lambda r: r, lambda r: r, lambda r: r),
    "addcdiv": (lambda r: r, lambda r: r, lambda r: r.abs() + 0.5),
    "lerp": (lambda r: r, lambda r: r),
    "lerp_t": (lambda r: r, lambda r: r, lambda r: r.sigmoid()),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _input(name, n, dtype, device):
    g = torch.Generator().manual_seed(0)
    if name in BINARY:
        return tuple(f(torch.randn(n, generator=g)).to(dtype).to(device) for f in BINARY[name])
    return OPS[name][1](torch.randn(n, generator=g)).to(dtype).to(device)


def _time(fn, x, loop, sync):
    fn(x)
    sync()
    t0 = time.perf_counter()
    for _ in range(loop):
        fn(x)
    sync()
    return (time.perf_counter() - t0) / loop


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--sizes", default="22,17", help="log2 of the element counts")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loop", type=int, default=0, help="calls per round (0: about 20 ms of work)")
    ap.add_argument("--one-thread", action="store_true")
    ap.add_argument("--pause", type=float, default=0.1,
                    help="seconds idle before each tpu round: PyTorch CPU's OpenMP threads spin for a while "
                         "after its round, on the cores the chip's threads need")
    args = ap.parse_args()
    if ONE_THREAD:
        torch.set_num_threads(1)
    tsync = torch.tpu.synchronize
    print(f"load average {os.getloadavg()[0]:.2f}, torch threads {torch.get_num_threads()}")
    print(f"{'op':8} {'dtype':5} {'n':>8} {'tpu us':>10} {'cpu us':>10} {'cpu/tpu':>8}")
    for name in args.ops.split(","):
        fn = OPS[name][0]
        for dt in args.dtypes.split(","):
            for lg in (int(s) for s in args.sizes.split(",")):
                n = 1 << lg
                xt, xc = _input(name, n, DTYPES[dt], "tpu"), _input(name, n, DTYPES[dt], "cpu")
                try:
                    fn(xc[..., :1] if isinstance(xc, torch.Tensor) else [x[..., :1] for x in xc])
                except (NotImplementedError, RuntimeError) as e:  # e.g. the Bessel functions in bf16
                    print(f"{name:8} {dt:5} {'2^%d' % lg:>8} {'-':>10} {'-':>10} {'-':>8}  (PyTorch CPU: {e})"[:120])
                    continue
                loop = args.loop or max(3, min(2000, (20 << 20) // (n * 8)))
                bt = bc = float("inf")
                for _ in range(args.runs):
                    time.sleep(args.pause)
                    bt = min(bt, _time(fn, xt, loop, tsync))
                    bc = min(bc, _time(fn, xc, loop, lambda: None))
                print(f"{name:8} {dt:5} {'2^%d' % lg:>8} {bt * 1e6:10.1f} {bc * 1e6:10.1f} {bc / bt:8.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
