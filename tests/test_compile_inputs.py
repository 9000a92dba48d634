"""torch.compile(backend="tpu") graphs whose inputs or constants live on the CPU: a model's own CPU 0-dim
tensors, floats Dynamo turns into CPU 0-dim inputs, and constant factories. Each runs as a device
program (no eager run) and equals eager CPU."""
import math

import pytest
import torch

from torch_tpu import _compile
from test_compile import fresh  # noqa: F401  (autouse: Dynamo and the counters reset)

pytestmark = pytest.mark.tpu


def _no_eager():
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0, s
    return s


class _Cache(torch.nn.Module):
    """As transformers' static cache layer: its filled length is a CPU 0-dim int64 tensor."""

    def __init__(self):
        super().__init__()
        self.length = torch.tensor(0)

    def forward(self, x):
        return x * 2 + self.length.to(x.device)


def test_model_cpu_0dim_tensor_read_by_the_graph_is_a_program_input():
    m = _Cache()
    run = torch.compile(m, backend="tpu")
    x = torch.randn(4, 8)
    for n in (3, 5, 5, 9):
        m.length.fill_(n)  # changed between calls, outside the graph
        torch.testing.assert_close(run(x.to("tpu")).cpu(), x * 2 + n)
    s = _no_eager()
    assert s["captures"] == 1 and s["launches"] == 4, s  # a new value is new data, not a new capture


class _Eps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-5
        self.scale = 0.5
        self.w = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        x = torch.nn.functional.layer_norm(x, (16,), self.w, None, self.eps)
        return x * math.sqrt(self.scale) + x.pow(2.0)


def test_float_attributes_under_dynamic_true_run_as_programs():
    """dynamic=True makes a module's float attributes CPU float64 graph inputs (GPT-2's under generate()):
    programs that take sizes at launch, and a changed value gives the new result."""
    torch.manual_seed(0)
    m = _Eps()
    d = _Eps()
    d.load_state_dict(m.state_dict())
    d = d.to("tpu")
    run = torch.compile(d, backend="tpu", dynamic=True)
    for rows in (3, 5, 8, 11):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(run(x.to("tpu")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    s = _no_eager()
    assert s["captures"] == 1 and s["bindings"] >= 2, s  # sizes at launch
    m.scale = d.scale = 3.0
    m.eps = d.eps = 0.25
    for rows in (6, 13):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(run(x.to("tpu")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    _no_eager()


def test_constant_factory_in_the_graph_is_folded():
    def f(x):
        return torch.pow(x, torch.scalar_tensor(2.0, dtype=torch.float64)) + torch.full((), 3.0)

    run = torch.compile(f, backend="tpu")
    x = torch.randn(5, 7)
    torch.testing.assert_close(run(x.to("tpu")).cpu(), f(x))
    assert _no_eager()["captures"] == 1


def test_cpu_0dim_input_the_graph_mutates_still_runs_eagerly():
    """A CPU tensor the graph writes (an optimizer's CPU step count) stays the user's: eager, right."""
    count = torch.tensor(0.0)

    def f(x):
        count.add_(1)
        return x * count

    run = torch.compile(f, backend="tpu")
    x = torch.randn(3)
    for i in range(1, 4):
        torch.testing.assert_close(run(x.to("tpu")).cpu(), x * i)
    assert count.item() == 3
