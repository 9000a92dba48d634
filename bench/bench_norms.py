"""Row-kernel benchmarks for issue 16: softmax, log_softmax, layer_norm, rms_norm and
cross-entropy, forward and forward+backward, fp32 and bf16, each beside PyTorch CPU in the
same run (run.py interleaves the two; ratio > 1: ours faster). Times are per call (ms), the
median of run.py's runs, each run REPS calls so that a ~1 ms kernel is not all timer noise.

    python bench/bench_norms.py [--runs 5]        # these rows only
"""
import os
import pathlib
import sys

import torch
import torch.nn.functional as F

ROWS, COLS = 4096, 1024       # softmax / norms: 4M elements
CE_ROWS, CE_CLASSES = 1024, 8192  # cross-entropy: a vocabulary-sized row
REPS = 5


def _setup(make, dtype, backward, shape=(ROWS, COLS)):
    def setup(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=g).to(device=device, dtype=dtype).requires_grad_(backward)
        go = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        f, extra = make(device, dtype, shape, g)

        def fn():
            for _ in range(REPS):
                y = f(x)
                if backward:
                    x.grad = None
                    if y.dim() == 0:
                        y.backward()
                    else:
                        y.backward(go)
            return y
        return fn, lambda s: s / REPS * 1e3
    return setup


def _softmax(device, dtype, shape, g):
    return (lambda x: torch.softmax(x, dim=-1)), None


def _log_softmax(device, dtype, shape, g):
    return (lambda x: torch.log_softmax(x, dim=-1)), None


def _layer_norm(device, dtype, shape, g):
    w = torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype)
    b = torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype)
    return (lambda x: F.layer_norm(x, (shape[-1],), w, b)), None


def _rms_norm(device, dtype, shape, g):
    w = torch.randn(shape[-1], generator=g).to(device=device, dtype=dtype)
    return (lambda x: F.rms_norm(x, (shape[-1],), w, 1e-6)), None


def _cross_entropy(device, dtype, shape, g):
    t = torch.randint(0, shape[-1], (shape[0],), generator=g).to(device)
    return (lambda x: F.cross_entropy(x, t)), None


BENCHES = {}
for _name, _make, _shape in (("softmax", _softmax, (ROWS, COLS)), ("log_softmax", _log_softmax, (ROWS, COLS)),
                             ("layer_norm", _layer_norm, (ROWS, COLS)), ("rms_norm", _rms_norm, (ROWS, COLS)),
                             ("cross_entropy", _cross_entropy, (CE_ROWS, CE_CLASSES))):
    for _dt, _dn in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for _bwd in (False, True):
            _key = f"{_name}_{_dn}_{'fwdbwd' if _bwd else 'fwd'}"
            BENCHES[_key] = (_setup(_make, _dt, _bwd, _shape), "ms", False,
                             f"{_name} {_dn} {_shape[0]}x{_shape[1]} over the last dim, "
                             f"{'forward + backward' if _bwd else 'forward'}")


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import run
    argv = sys.argv[1:] or ["--runs", "5"]
    out = str(pathlib.Path(run.__file__).parent / "results_norms.json")
    if "--only" not in argv:
        argv += ["--only", ",".join(BENCHES)]
    rc = run.main(argv + ["--out", out])
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    sys.exit(rc)
