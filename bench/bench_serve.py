"""Serving benchmark: vLLM's own load generator (`vllm bench serve`) against `vllm serve` on the tpu device,
and in the same run the same work through Hugging Face transformers' `generate` on the CPU.

    .venv/bin/python bench/bench_serve.py            # concurrency 1, 4, 16; prefix workload; kernel rows
    .venv/bin/python bench/bench_serve.py --full     # adds concurrency 64
    .venv/bin/python bench/bench_serve.py --kernel-only   # only the kernel rows (seconds)
    .venv/bin/python bench/bench_serve.py --tp       # only decode tokens/s on 1 chip vs 2 (tensor parallel)

Rows:
  - serving at each concurrency: request throughput, output tokens/s, TTFT and TPOT (mean, median, p99),
    against transformers generate on CPU one request at a time and batched (the concurrency's batch);
  - a prefix-sharing workload (90% of each prompt shared) with prefix caching on and off: TTFT;
  - vLLM's RMSNorm with a residual add, SiLU-and-mul and the sampler's top-k/top-p filtering at decode
    shapes: our kernels beside vLLM's native PyTorch versions on tpu (the path they replace) and on the CPU;
  - the paged-attention decode kernel's KV-cache read rate against this machine's copy bandwidth (a tpu
    tensor copy) and against PyTorch CPU's SDPA on the same keys and values already gathered; the same
    decode over an FP8 (e4m3) cache.
  - (--tp) decode tokens/s of vllm.LLM with tensor_parallel_size 1 and 2 (one worker process per chip),
    beside transformers generate on the CPU at the same batch, for the model below and a wider one.
The model is a small random Llama made on the spot (tests/vllm_models.py). Prints a table and writes
bench/results_serve.json. Timings on a shared 2-core machine are noisy: compare within one run.
"""
import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from vllm_models import make_model  # noqa: E402

VLLM = pathlib.Path(sys.executable).with_name("vllm")
MODEL = dict(hidden=256, layers=4, heads=8, kv_heads=4, max_len=1024, vocab_size=512)
# The prefix-sharing workload: 90% of each 960-token prompt is one shared prefix, after one warm-up
# request (a shared system prompt is hot in a running server; without it the first wave of concurrent
# requests all miss, a quarter of 16). At 240 tokens this model's prefill cost little beside vLLM's
# per-step host work, so caching it saved little (1.3-1.9x).
PREFIX_LEN, PREFIX_INPUT = 864, 96


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(path, log, *extra):
    port = _free_port()
    env = dict(os.environ, TORCH_TPU_HBM_BYTES="4G", VLLM_NO_USAGE_STATS="1")
    proc = subprocess.Popen([str(VLLM), "serve", str(path), "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "bench", "--dtype", "float32", "--max-model-len", "1024",
                             "--max-num-seqs", "64", "--kv-cache-memory-bytes", str(256 << 20), *extra],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 900
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited ({proc.returncode}); see {log}")
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                return proc, url
        except OSError:
            time.sleep(1)
    proc.kill()
    raise RuntimeError(f"vllm serve did not start; see {log}")


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def bench_serve(url, path, workdir, concurrency, num_prompts, input_len, output_len, prefix_len=0, tag="",
                warmups=0):
    name = f"c{concurrency}{tag}.json"
    cmd = [str(VLLM), "bench", "serve", "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", "bench", "--tokenizer", str(path), "--dataset-name", "random",
           "--random-input-len", str(input_len), "--random-output-len", str(output_len),
           "--random-prefix-len", str(prefix_len), "--num-prompts", str(num_prompts),
           "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", "0", "--num-warmups", str(warmups),
           "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
           "--save-result", "--result-dir", str(workdir), "--result-filename", name]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    r = json.loads((pathlib.Path(workdir) / name).read_text())
    return {k: r.get(k) for k in ("completed", "request_throughput", "output_throughput", "mean_ttft_ms",
                                  "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
                                  "p99_tpot_ms", "duration")}


def hf_generate_cpu(path, batch, input_len, output_len, rounds):
    """Output tokens/s of transformers generate on the CPU, `batch` prompts of input_len random tokens."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    rates = []
    with torch.no_grad():
        for _ in range(rounds):
            ids = torch.randint(3, vocab, (batch, input_len), generator=g)
            t = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=output_len,
                           min_new_tokens=output_len, do_sample=False, pad_token_id=2)
            rates.append(batch * output_len / (time.perf_counter() - t))
    return statistics.median(rates)


TP_MODELS = {"width 256": MODEL, "width 1024": dict(MODEL, hidden=1024, heads=16, kv_heads=8)}


def tp_decode(path, tp, batch, input_len, output_len, rounds):
    """Decode tokens/s of vllm.LLM at tensor_parallel_size tp, in a process of its own: `batch` random
    prompts of input_len tokens, output_len tokens each (greedy, ignore_eos); the median over rounds after
    one warm-up round. Prefill is short beside the decode steps, and counted in the time."""
    code = f"""
import json, os, statistics, time, torch, vllm
def main():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    llm = vllm.LLM(model={str(path)!r}, dtype="float32", max_model_len=1024, max_num_seqs={batch},
                   kv_cache_memory_bytes={256 << 20}, tensor_parallel_size={tp}, seed=0)
    g = torch.Generator().manual_seed(0)
    sp = vllm.SamplingParams(temperature=0.0, max_tokens={output_len}, ignore_eos=True)
    rates = []
    for i in range({rounds} + 1):
        prompts = [{{"prompt_token_ids": torch.randint(3, 500, ({input_len},), generator=g).tolist()}}
                   for _ in range({batch})]
        t = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        dt = time.perf_counter() - t
        assert sum(len(o.outputs[0].token_ids) for o in outs) == {batch * output_len}
        if i:
            rates.append({batch * output_len} / dt)
    print("RESULT", json.dumps(statistics.median(rates)))
if __name__ == "__main__":
    main()
"""
    env = dict(os.environ, TORCH_TPU_HBM_BYTES="4G", VLLM_NO_USAGE_STATS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"tensor_parallel_size={tp} run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def bench_tp(work, batches=(1, 16), input_len=16, output_len=64, rounds=3):
    rows = []
    for name, dims in TP_MODELS.items():
        path = make_model(work / name.replace(" ", "_"), "llama", torch.float32, **dims)
        for b in batches:
            row = {"model": name, "batch": b, "load_before": os.getloadavg()[0]}
            for tp in (1, 2):
                row[f"tp{tp}"] = tp_decode(path, tp, b, input_len, output_len, rounds)
            row["hf_cpu"] = hf_generate_cpu(path, b, input_len, output_len, 2)
            row["load_after"] = os.getloadavg()[0]
            rows.append(row)
            print_tp([row])
    return rows


def print_tp(rows):
    for r in rows:
        print(f"decode tok/s, {r['model']}, batch {r['batch']:>2}: 1 chip {r['tp1']:8.1f} | 2 chips (TP=2) "
              f"{r['tp2']:8.1f} ({r['tp2'] / r['tp1']:.2f}x) | transformers CPU {r['hf_cpu']:8.1f} (1 chip "
              f"{r['tp1'] / r['hf_cpu']:.2f}x, TP=2 {r['tp2'] / r['hf_cpu']:.2f}x) | load {r['load_before']:.1f} -> "
              f"{r['load_after']:.1f}", flush=True)


def bench_decode_kernel(runs=15):
    """KV bytes/s of one decode step of paged attention (16 sequences x 1024 tokens, 8 query / 4 kv
    heads of 64), the device's copy bandwidth, and PyTorch CPU's SDPA on the same K/V, gathered."""
    from torch_tpu.vllm import ops
    S, ctx, hq, hkv, d, bs = 16, 1024, 8, 4, 64, 16
    nb = S * ctx // bs
    g = torch.Generator().manual_seed(0)
    kv = torch.randn(nb, hkv, bs, 2 * d, generator=g)
    q = torch.randn(S, hq, d, generator=g)
    table = torch.randperm(nb, generator=g).view(S, ctx // bs).to(torch.int32)
    qsl = torch.arange(S + 1, dtype=torch.int32)
    sl = torch.full((S,), ctx, dtype=torch.int32)
    dev = [t.to("tpu") for t in (q, kv, qsl, sl, table)]
    out = torch.empty(q.shape, device="tpu")

    def timed(fn, sync):
        fn(), sync()
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    tsync = torch.tpu.synchronize
    t_pa = timed(lambda: ops.paged_attention(out, dev[0], dev[1].transpose(1, 2), dev[2], dev[3], dev[4], d ** -0.5),
                 tsync)
    kv_bytes = S * ctx * hkv * 2 * d * 4
    # the same decode over an FP8 (e4m3) cache: a quarter of the bytes, widened by table lookup
    kv8 = ops.fp8_quantize_reference(kv, "fp8").to("tpu")
    t_pa8 = timed(lambda: ops.paged_attention(out, dev[0], kv8.transpose(1, 2), dev[2], dev[3], dev[4], d ** -0.5,
                                              kv_cache_dtype="fp8"), tsync)
    big = torch.empty(64 << 20, device="tpu")
    t_copy = timed(lambda: big.clone(), tsync)
    copy_bw = 2 * big.numel() * 4 / t_copy
    # PyTorch CPU: the same decode as SDPA over K/V already gathered into [S, hkv, ctx, d]
    rows = kv[table.long()]                               # [S, ctx/bs, hkv, bs, 2d]
    rows = rows.permute(0, 2, 1, 3, 4).reshape(S, hkv, ctx, 2 * d)
    k, v = rows[..., :d].contiguous(), rows[..., d:].contiguous()
    qc = q.view(S, hq, 1, d)
    t_cpu = timed(lambda: torch.nn.functional.scaled_dot_product_attention(qc, k, v, enable_gqa=True), lambda: None)
    return {"paged_decode_ms": t_pa * 1e3, "kv_read_gbs": kv_bytes / t_pa / 1e9, "copy_gbs": copy_bw / 1e9,
            "share_of_copy": kv_bytes / t_pa / copy_bw, "cpu_sdpa_gathered_ms": t_cpu * 1e3,
            "paged_decode_fp8_ms": t_pa8 * 1e3}


def bench_layer_kernels(runs=7, iters=20):
    """Per call (us) of vLLM's RMSNorm with a residual add, SiLU-and-mul and the sampler's top-k/top-p
    filtering at decode shapes (16 tokens): our kernels (torch_tpu::fused_add_rms_norm, silu_and_mul,
    top_k_top_p) beside vLLM's native PyTorch versions on tpu (the path they replace: the same
    formulas as generic ops) and on the CPU."""
    import torch.nn.functional as F
    from torch_tpu.vllm import ops  # noqa: F401  (defines the torch_tpu:: ops)

    def native_rms(x, res, w, eps=1e-6):
        x = x.float() + res.float()
        res = x.to(w.dtype)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return (x.to(w.dtype) * w).to(w.dtype), res

    def native_silu(x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def per_call(fn, sync):
        fn(), sync()
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            ts.append((time.perf_counter() - t) / iters)
        return statistics.median(ts) * 1e6

    rows = []
    tsync = torch.tpu.synchronize
    for dtype, hidden, inter in ((torch.float32, 256, 512), (torch.float32, 4096, 11008), (torch.bfloat16, 4096, 11008)):
        g = torch.Generator().manual_seed(0)
        x, res, w = (torch.randn(*s, generator=g).to(dtype) for s in ((16, hidden), (16, hidden), (hidden,)))
        gu = torch.randn(16, 2 * inter, generator=g).to(dtype)
        xd, rd, wd, gud = (t.to("tpu") for t in (x, res, w, gu))
        out = torch.empty(16, inter, dtype=dtype, device="tpu")
        name = f"{str(dtype).replace('torch.', '')} 16 x {hidden}"
        rows.append({"op": f"fused_add_rms_norm {name}",
                     "ours_us": per_call(lambda: torch.ops.torch_tpu.fused_add_rms_norm(xd, rd, wd, 1e-6), tsync),
                     "native_tpu_us": per_call(lambda: native_rms(xd, rd, wd), tsync),
                     "native_cpu_us": per_call(lambda: native_rms(x, res, w), lambda: None)})
        name = f"{str(dtype).replace('torch.', '')} 16 x 2*{inter}"
        rows.append({"op": f"silu_and_mul {name}",
                     "ours_us": per_call(lambda: torch.ops.torch_tpu.silu_and_mul(out, gud), tsync),
                     "native_tpu_us": per_call(lambda: native_silu(gud), tsync),
                     "native_cpu_us": per_call(lambda: native_silu(gu), lambda: None)})
    # the sampler's top-k (50) and top-p (0.9) filtering: vLLM's sort-based PyTorch version is the native one
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
    for vocab in (32000, 152064):
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(16, vocab, generator=g) * 3
        k, p = torch.full((16,), 50), torch.full((16,), 0.9)
        ld, kd, pd = logits.to("tpu"), k.to("tpu"), p.to("tpu")
        rows.append({"op": f"top_k_top_p float32 16 x {vocab}",
                     "ours_us": per_call(lambda: torch.ops.torch_tpu.top_k_top_p(ld.clone(), kd, pd), tsync),
                     "native_tpu_us": per_call(lambda: apply_top_k_top_p_pytorch(ld.clone(), kd, pd), tsync),
                     "native_cpu_us": per_call(lambda: apply_top_k_top_p_pytorch(logits.clone(), k, p), lambda: None)})
    rows += bench_sampler_kernels(per_call)
    return rows


def bench_sampler_kernels(per_call):
    """The sampler's penalties (64 prompt and 32 output tokens a row), min-p and the draw (argmax of
    probs / exponential noise, the noise included; on full rows and on rows left by top-k 50) for 16 rows: ours (sample.c, through the functions
    the platform puts in vLLM's place) beside vLLM's PyTorch versions on tpu and on the CPU. Each call
    includes a copy of the logits on every side (the ops write in place)."""
    import types
    from vllm.v1.sample.logits_processor import builtin
    from vllm.v1.sample.ops import penalties, topk_topp_sampler
    from torch_tpu.vllm import ops
    vllm_pen = ops.VLLM_ORIGINALS.get("apply_all_penalties", penalties.apply_all_penalties)
    vllm_minp = ops.VLLM_ORIGINALS.get("MinPLogitsProcessor.apply", builtin.MinPLogitsProcessor.apply)
    vllm_draw = ops.VLLM_ORIGINALS.get("random_sample", topk_topp_sampler.random_sample)
    tsync, none = torch.tpu.synchronize, (lambda: None)
    rows = []
    for vocab in (32000, 152064):
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(16, vocab, generator=g) * 3
        prompt = torch.randint(0, vocab, (16, 64), generator=g)
        outs = torch.randint(0, vocab, (16, 32), generator=g).tolist()
        pen = [torch.full((16,), v) for v in (0.5, 0.3, 1.2)]
        ld, pd, pend = logits.to("tpu"), prompt.to("tpu"), [t.to("tpu") for t in pen]
        rows.append({"op": f"penalties float32 16 x {vocab}",
                     "ours_us": per_call(lambda: ops.apply_all_penalties(ld.clone(), pd, *pend, outs), tsync),
                     "native_tpu_us": per_call(lambda: vllm_pen(ld.clone(), pd, *pend, outs), tsync),
                     "native_cpu_us": per_call(lambda: vllm_pen(logits.clone(), prompt, *pen, outs), none)})
        mp = torch.full((16, 1), 0.05)
        mine, theirs_d, theirs = (types.SimpleNamespace(min_p_count=16, min_p=t) for t in (mp.to("tpu"), mp.to("tpu"), mp))
        rows.append({"op": f"min_p float32 16 x {vocab}",
                     "ours_us": per_call(lambda: ops.min_p_apply(mine, ld.clone()), tsync),
                     "native_tpu_us": per_call(lambda: vllm_minp(theirs_d, ld.clone()), tsync),
                     "native_cpu_us": per_call(lambda: vllm_minp(theirs, logits.clone()), none)})
        probs = logits.softmax(dim=-1)
        prd = probs.to("tpu")
        rows.append({"op": f"draw float32 16 x {vocab}",
                     "ours_us": per_call(lambda: ops.random_sample(prd.clone(), {}), tsync),
                     "native_tpu_us": per_call(lambda: vllm_draw(prd.clone(), {}), tsync),
                     "native_cpu_us": per_call(lambda: vllm_draw(probs.clone(), {}), none)})
        # after top-k 50, as a sampled request with top_k reaches the draw: the rest is zero
        top = logits.topk(50, dim=-1)
        probs50 = torch.zeros_like(logits).scatter_(1, top.indices, top.values.softmax(dim=-1))
        prd50 = probs50.to("tpu")
        rows.append({"op": f"draw top-k 50 float32 16 x {vocab}",
                     "ours_us": per_call(lambda: ops.random_sample(prd50.clone(), {}), tsync),
                     "native_tpu_us": per_call(lambda: vllm_draw(prd50.clone(), {}), tsync),
                     "native_cpu_us": per_call(lambda: vllm_draw(probs50.clone(), {}), none)})
    return rows


def print_layers(rows):
    print(f"{'layer kernel (decode, 16 tokens)':>42} | {'ours us':>8} | {'native tpu us':>13} | {'native CPU us':>13} | "
          f"{'vs native tpu':>13} | {'vs CPU':>6}")
    for r in rows:
        print(f"{r['op']:>42} | {r['ours_us']:8.1f} | {r['native_tpu_us']:13.1f} | {r['native_cpu_us']:13.1f} | "
              f"{r['native_tpu_us'] / r['ours_us']:13.2f} | {r['native_cpu_us'] / r['ours_us']:6.2f}")


def print_kernel(k):
    print(f"paged-attention decode (16 x 1024 tokens): {k['paged_decode_ms']:.2f} ms, KV read {k['kv_read_gbs']:.1f} GB/s "
          f"= {100 * k['share_of_copy']:.0f}% of the device's copy bandwidth ({k['copy_gbs']:.1f} GB/s); "
          f"PyTorch CPU SDPA on the gathered K/V: {k['cpu_sdpa_gathered_ms']:.2f} ms "
          f"(ratio {k['cpu_sdpa_gathered_ms'] / k['paged_decode_ms']:.2f}); with an FP8 cache "
          f"{k['paged_decode_fp8_ms']:.2f} ms (ratio to CPU SDPA in float32 "
          f"{k['cpu_sdpa_gathered_ms'] / k['paged_decode_fp8_ms']:.2f})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="also concurrency 64")
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--out", default=str(HERE / "results_serve.json"))
    p.add_argument("--kernel-only", action="store_true", help="only the paged-attention decode kernel figures")
    p.add_argument("--tp", action="store_true", help="only decode tokens/s at tensor_parallel_size 1 and 2")
    a = p.parse_args(argv)
    if a.tp:
        rows = bench_tp(pathlib.Path(tempfile.mkdtemp(prefix="bench_tp_")))
        print("\nsummary:")
        print_tp(rows)
        return rows
    if a.kernel_only:
        load = os.getloadavg()
        k = bench_decode_kernel()
        layers = bench_layer_kernels()
        print(f"load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
        print_kernel(k)
        print_layers(layers)
        return k, layers
    concs = [1, 4, 16] + ([64] if a.full else [])
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench_serve_"))
    path = make_model(work / "model", "llama", torch.float32, **MODEL)
    doc = {"load_before": os.getloadavg(), "model": MODEL, "input_len": a.input_len, "output_len": a.output_len}

    doc["kernel"] = bench_decode_kernel()
    doc["layers"] = bench_layer_kernels()
    proc, url = start_server(path, work / "serve.log")
    try:
        doc["serve"] = {c: bench_serve(url, path, work, c, max(8, 2 * c), a.input_len, a.output_len) for c in concs}
        # prefix-sharing: 90% of each prompt is one shared prefix (prefix caching on in this server)
        doc["prefix_on"] = bench_serve(url, path, work, 4, 16, PREFIX_INPUT, 8, prefix_len=PREFIX_LEN, tag="prefix_on",
                                       warmups=1)
    finally:
        stop_server(proc)
    proc, url = start_server(path, work / "serve_nocache.log", "--no-enable-prefix-caching")
    try:
        doc["prefix_off"] = bench_serve(url, path, work, 4, 16, PREFIX_INPUT, 8, prefix_len=PREFIX_LEN, tag="prefix_off",
                                        warmups=1)
    finally:
        stop_server(proc)
    doc["hf_cpu"] = {1: hf_generate_cpu(path, 1, a.input_len, a.output_len, 3)}
    for c in concs[1:]:
        doc["hf_cpu"][c] = hf_generate_cpu(path, c, a.input_len, a.output_len, 2)
    doc["load_after"] = os.getloadavg()

    print(f"\nvllm serve on tpu vs transformers generate on CPU (model {MODEL}, input {a.input_len}, "
          f"output {a.output_len}; load {doc['load_before'][0]:.1f} -> {doc['load_after'][0]:.1f})")
    print(f"{'concurrency':>11} | {'req/s':>6} | {'tok/s tpu':>9} | {'tok/s CPU b1':>12} | {'tok/s CPU batched':>17}"
          f" | {'ratio vs batched':>16} | {'TTFT mean/med/p99 ms':>22} | {'TPOT mean/med/p99 ms':>22}")
    for c in concs:
        s, hb = doc["serve"][c], doc["hf_cpu"].get(c, doc["hf_cpu"][1])
        print(f"{c:>11} | {s['request_throughput']:6.2f} | {s['output_throughput']:9.1f} | {doc['hf_cpu'][1]:12.1f} | "
              f"{hb:17.1f} | {s['output_throughput'] / hb:16.2f} | "
              f"{s['mean_ttft_ms']:6.0f}/{s['median_ttft_ms']:6.0f}/{s['p99_ttft_ms']:6.0f} | "
              f"{s['mean_tpot_ms']:6.1f}/{s['median_tpot_ms']:6.1f}/{s['p99_tpot_ms']:6.1f}")
    s1, s16 = doc["serve"][1], doc["serve"].get(16)
    if s16:
        print(f"output tokens/s at concurrency 16 over concurrency 1: {s16['output_throughput'] / s1['output_throughput']:.2f}x")
    on, off = doc["prefix_on"], doc["prefix_off"]
    print(f"prefix-sharing workload ({PREFIX_LEN} of {PREFIX_LEN + PREFIX_INPUT} prompt tokens shared, concurrency 4): mean TTFT "
          f"{on['mean_ttft_ms']:.0f} ms with prefix caching, {off['mean_ttft_ms']:.0f} ms without "
          f"({off['mean_ttft_ms'] / on['mean_ttft_ms']:.2f}x)")
    print_kernel(doc["kernel"])
    print_layers(doc["layers"])
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
