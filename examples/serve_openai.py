"""Serving on the tpu device: `vllm serve` (real vLLM, through torch_tpu's platform plugin) started on a
Hugging Face model directory, queried with the official `openai` client: two completions and a streamed
chat answer. The default model is the small Llama that examples/train_tiny_llama.py trains on the vTPU
from the standard library's sources (build/tiny_llama; trained here first, a few minutes, if it is not
there yet): it continues "def " and "import " with Python-like text. Pass a model directory to serve that
instead. Nothing is downloaded (the Hugging Face hub is kept offline). --tensor-parallel-size 2 serves the
model on two vTPU chips, one worker process each.

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
    ap.add_argument("model", nargs="?", help="a Hugging Face model directory (default: build/tiny_llama, "
                    "examples/train_tiny_llama.py's model, trained first if missing)")
    ap.add_argument("--tensor-parallel-size", type=int, default=1, help="chips to shard the model over")
    a = ap.parse_args()
    if a.model:
        model = a.model
    else:
        model = str(ROOT / "build" / "tiny_llama")
        print(f"== examples/train_tiny_llama.py {model} --reuse", flush=True)
        subprocess.run([sys.executable, str(ROOT / "examples" / "train_tiny_llama.py"), model, "--reuse",
                        "--log-every", "100"], check=True)
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
        # greedy, with vLLM's repetition penalty (a small model's greedy text otherwise loops soon)
        for prompt in ("def ", "import "):
            r = client.completions.create(model="demo", prompt=prompt, max_tokens=48, temperature=0,
                                          extra_body={"repetition_penalty": 1.3})
            print(f"completion of {prompt!r} (greedy, repetition_penalty 1.3, {r.usage.completion_tokens} tokens):")
            print(prompt + r.choices[0].text)
        print("chat (streamed): ", end="", flush=True)
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Write a function that reads a file."}],
            max_tokens=48, temperature=0.7, seed=0, stream=True, extra_body={"repetition_penalty": 1.3})
        for chunk in stream:
            if chunk.choices:
                print(chunk.choices[0].delta.content or "", end="", flush=True)
        print()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
