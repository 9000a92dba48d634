"""Serving on the tpu device: `vllm serve` (real vLLM, through torch_tpu's platform plugin) started on a
small Llama-architecture model directory, queried with the official `openai` client: a completion and a
streamed chat answer. The model is made on the spot with random weights (tests/vllm_models.py), so
its text is not meaningful; pass a Hugging Face model directory to serve that instead. Nothing is
downloaded (the Hugging Face hub is kept offline). --tensor-parallel-size 2 serves the model on two vTPU
chips, one worker process each.

    .venv/bin/python examples/serve_openai.py [MODEL_DIR] [--tensor-parallel-size N]
"""
import argparse
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="a Hugging Face model directory (default: a tiny random Llama)")
    ap.add_argument("--tensor-parallel-size", type=int, default=1, help="chips to shard the model over")
    a = ap.parse_args()
    if a.model:
        model = a.model
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        import torch
        from vllm_models import make_model
        model = str(make_model(pathlib.Path(tempfile.mkdtemp(prefix="tiny_llama_")), "llama", torch.float32))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = pathlib.Path(tempfile.mkdtemp(prefix="serve_log_")) / "vllm_serve.log"
    cmd = [str(pathlib.Path(sys.executable).with_name("vllm")), "serve", model, "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", "demo", "--max-model-len", "512",
           "--kv-cache-memory-bytes", str(64 << 20), "--tensor-parallel-size", str(a.tensor_parallel_size)]
    print("$", " ".join(cmd), f"  (log: {log})", flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, TORCH_TPU_HBM_BYTES="2G", VLLM_NO_USAGE_STATS="1",
                                     HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"vllm serve exited with {proc.returncode}; see {log}")
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(1)
        print(f"server up in {time.time() - t0:.0f} s on http://127.0.0.1:{port} (device: tpu, "
              f"{a.tensor_parallel_size} chip{'s' if a.tensor_parallel_size > 1 else ''})")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        r = client.completions.create(model="demo", prompt="The standard library", max_tokens=24, temperature=0)
        print("completion:", repr(r.choices[0].text), f"({r.usage.completion_tokens} tokens)")
        print("chat (streamed): ", end="", flush=True)
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "What does the json module do?"}],
            max_tokens=24, temperature=0.8, seed=0, stream=True)
        for chunk in stream:
            if chunk.choices:
                print(chunk.choices[0].delta.content or "", end="", flush=True)
        print()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
