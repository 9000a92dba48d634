"""Where the host instructions of one Hugging Face `generate()` decode token go (issue 16), on the
device and on PyTorch CPU: bench/bench_decode.py's hf_generate_gpt2 (or _llama) model, greedy.

    python bench/callgrind_generate.py [--model gpt2|llama] [--device tpu] [--top 40] [--grep REGEX]

Runs the model under callgrind twice, in two processes: each warms generate() up (every
per-signature cache filled), then counts one generate() call with collection switched on only
around it (callgrind's client requests, as in bench/callgrind_add.py), one of LONG new tokens and
one of SHORT. Their difference over LONG - SHORT is one decode token, without the prompt's forward
and generate()'s set-up. Threads are counted separately (--separate-threads; a client request's
dump would hold only the calling thread) and summed; with TORCH_TPU_NUM_THREADS=1 (the default
here, as bench/run.py --one-thread) and these small kernels run inline on an idle queue, nearly
all of it is the host thread. Functions are listed by inclusive instructions per token (the same
difference), so `at::_ops::<op>::call` rows give each aten op's cost on either side; --grep keeps
only the functions whose name matches; --dump re-reads an earlier run's folder. On a CPU with
AVX-512 the runtime counted is an x86-64-v3 build (valgrind runs no AVX-512), and OpenBLAS picks
its Haswell kernels there.
"""
import argparse
import ctypes
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
LONG, SHORT = 24, 8


def _inner(a):
    import torch
    sys.path.insert(0, str(HERE))
    import run
    import bench_decode
    run.load_device(a.device)
    d = pathlib.Path(tempfile.mkdtemp())
    # collection on only for the window; each thread's counts are written when the process ends
    (d / "marks.c").write_text("#include <valgrind/callgrind.h>\n"
                               "void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }\n"
                               "void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(d / "marks.so"), str(d / "marks.c")], check=True)
    marks = ctypes.CDLL(str(d / "marks.so"))
    torch.set_num_threads(1)
    model = bench_decode._hf_model(a.model).eval().to(a.device)
    ids = torch.randint(2, 256, (1, bench_decode.PROMPT), generator=torch.Generator().manual_seed(1)).to(a.device)
    mask = torch.ones_like(ids)

    def gen(n):
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=0)
        run.sync(a.device)
        return out

    for _ in range(2):  # every per-signature cache is warm
        gen(LONG)
    marks.cg_start()
    gen(a.tokens)
    marks.cg_stop()
    return 0


def _functions(dump):
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True).stdout
    total, funcs = None, {}
    for line in ann.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].replace(",", "").isdigit():
            continue
        ir = int(parts[0].replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = ir
            continue
        name = " ".join(q for q in parts[1:] if not re.fullmatch(r"\(\s*[\d.]+%\)|\(|[\d.]+%\)", q))
        name = re.sub(r"^(\?\?\?|[^ ]*/[^/: ]+):", "", name)  # the file the function is in
        name = re.sub(r" \[[^\]]*\]$", "", name)
        funcs[name] = funcs.get(name, 0) + ir
    return total, funcs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu")
    p.add_argument("--model", default="gpt2", choices=("gpt2", "llama"))
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--grep", default=None)
    p.add_argument("--dump", default=None, help="read the dumps in this folder (an earlier run's) instead of running")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tokens", type=int, default=LONG, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.inner:
        return _inner(a)
    sys.path.insert(0, str(HERE))
    import callgrind_add
    base = pathlib.Path(a.dump) if a.dump else pathlib.Path(tempfile.mkdtemp())
    if not a.dump:
        env = dict(os.environ)
        if callgrind_add._has_avx512():
            env["LD_LIBRARY_PATH"] = callgrind_add._valgrind_runtime() + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        env.setdefault("TORCH_TPU_NUM_THREADS", "1")
        for k, tokens in (("long", LONG), ("short", SHORT)):
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                   f"--callgrind-out-file={base / k}.%p", sys.executable, __file__, "--inner",
                   "--device", a.device, "--model", a.model, "--tokens", str(tokens)]
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, env=env)
    per, threads = {}, {}
    for k in ("long", "short"):
        tot, funcs = 0, {}
        for f in sorted(base.glob(k + ".*")):  # one file per thread: <k>.<pid>-<thread>
            t, fs = _functions(f)
            if not t:
                continue
            tot += t
            th = int(f.name.rsplit("-", 1)[1])
            threads[th] = threads.get(th, 0) + t * (1 if k == "long" else -1)
            for n, v in fs.items():
                funcs[n] = funcs.get(n, 0) + v
        per[k] = (tot, funcs)
    n = LONG - SHORT
    total = (per["long"][0] - per["short"][0]) / n
    print(f"device {a.device}, {a.model}: {total:,.0f} instructions per decode token "
          f"(generate() of {LONG} tokens less one of {SHORT}; dumps {base})")
    for th in sorted(threads):
        if threads[th] / n >= 1000:
            print(f"  thread {th}: {threads[th] / n:,.0f} per token" + (" (the host thread)" if th == 1 else ""))
    diff = {k: (v - per["short"][1].get(k, 0)) / n for k, v in per["long"][1].items()}
    rows = sorted(diff.items(), key=lambda kv: -kv[1])
    if a.grep:
        rows = [r for r in rows if re.search(a.grep, r[0])]
    for name, v in rows[:a.top]:
        print(f"  {v:>12,.0f}/token  {name[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
