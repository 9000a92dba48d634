"""Hugging Face generate() with a compiled forward, as transformers' docs tell users to compile decoding:
`model.forward = torch.compile(model.forward, backend="tpu")`, with the static KV cache
(`cache_implementation="static"`: fixed-size cache tensors updated in place, so the decode step is one
graph for every position) and with the default dynamic cache (`dynamic=True`: the cache grows every
token). Greedy tokens must equal CPU's eager generate(); every graph runs as a device program, and a
second generate() compiles nothing new.
Each needed a fix: the static cache's per-layer length is a CPU 0-dim int64 tensor the graph copies to
the device; with dynamic=True Dynamo makes a module's float attributes (eps, dropout p) CPU 0-dim
inputs read by .item(), and the graph holds a CPU scalar_tensor(2.0); and the decode graph's
`torch.cat(..., dim=-2)` reached the kernel as dim 2 at sizes not seen before (tests/test_compile_inputs.py
has each alone)."""
import pytest
import torch

from torch_tpu import _compile

pytestmark = pytest.mark.tpu

transformers = pytest.importorskip("transformers")
import test_hf_models as H  # noqa: E402  (needs transformers)
from test_compile_models import fresh  # noqa: E402,F401  (autouse: Dynamo and the counters reset, CPU on one thread)


def _models(name):
    torch.manual_seed(0)
    make = {"gpt2": H._gpt2, "llama": H._llama}[name]
    cpu = make().eval()
    dev = make().eval()
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("tpu")


@pytest.mark.parametrize("name,cache", [("gpt2", "static"), ("llama", "static"), ("gpt2", "dynamic"),
                                        pytest.param("llama", "dynamic", marks=pytest.mark.full)])
def test_generate_with_compiled_forward_matches_cpu(name, cache):
    cpu, dev = _models(name)
    prompt = torch.randint(2, H.VOCAB, (2, 7), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=12, do_sample=False)
    if cache == "static":
        kw["cache_implementation"] = "static"
    want = cpu.generate(prompt, **kw)
    dev.forward = torch.compile(dev.forward, backend="tpu", dynamic=True if cache == "dynamic" else None)
    got = dev.generate(prompt.to("tpu"), **kw).cpu()
    assert torch.equal(got, want), (got, want)
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0, s
    # one capture per graph: the decode step's growing cache (dynamic) is a binding of its program
    assert s["captures"] <= s["graphs"], s
    graphs = s["graphs"]
    # the same prompt again, and a prompt of another length: decode steps reuse what was compiled
    again = dev.generate(prompt.to("tpu"), **kw).cpu()
    assert torch.equal(again, want)
    assert _compile.compile_stats()["graphs"] == graphs, _compile.compile_stats()
    other = torch.randint(2, H.VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(dev.generate(other.to("tpu"), **kw).cpu(), cpu.generate(other, **kw))
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0, s
