"""Outputs are always written, and errors are never turned into silent data: edge-case sizes (0-d,
empty, k=0, a dim of size 1) give CPU's values even when the output's memory last held another
tensor's; TORCH_TPU_ALLOC_FILL makes an unwritten output visible; copy_ and dtype-restricted kernels
reject what CPU rejects."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stale(device, dtype, n=64):
    """Leaves a freed device buffer holding 8.0 (exp2(3)): what an unwritten output would show."""
    y = torch.exp2(torch.full((n,), 3, dtype=dtype, device=device))
    del y


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.int64])
def test_topk_of_a_0d_tensor(dtype, eager_mode, device):
    x_cpu = torch.tensor(3, dtype=dtype)
    for k in (0, 1):
        want = torch.topk(x_cpu, k)
        x = torch.tensor(3, dtype=dtype, device=device)
        _stale(device, dtype if dtype.is_floating_point else torch.float32, 1)
        got = torch.topk(x, k)
        assert got.values.cpu().item() == want.values.item() == 3, (k, got.values.cpu())
        assert got.indices.cpu().item() == want.indices.item() == 0
    # k=0 on a dimension: nothing to write, an empty result
    got = torch.topk(torch.arange(4, device=device), 0)
    assert got.values.shape == (0,) and got.indices.shape == (0,)


def test_select_family_on_edge_sizes(eager_mode, device):
    cases = [
        lambda x: torch.sort(x).values, lambda x: torch.sort(x).indices,
        lambda x: torch.kthvalue(x, 1).values, lambda x: torch.kthvalue(x, 1).indices,
        lambda x: torch.topk(x, 1).values, lambda x: torch.median(x), lambda x: torch.mode(x).values,
        lambda x: torch.cummax(x, 0).values, lambda x: torch.cumsum(x, 0), lambda x: torch.argmax(x),
    ]
    for shape in [(), (1,), (1, 1), (3, 1)]:
        xc = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) * 3
        for f in cases:
            _stale(device, torch.float32)
            got = f(xc.to(device)).cpu()
            assert torch.equal(got, f(xc)), (shape, got, f(xc))


def _run(code, **env):
    e = dict(os.environ, **env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_alloc_fill_shows_the_pattern_in_fresh_memory():
    code = """
        import torch
        x = torch.full((1000,), 7, dtype=torch.uint8, device="tpu")
        del x
        y = torch.empty(1000, dtype=torch.uint8, device="tpu")  # reuses x's block
        print(sorted(set(y.cpu().tolist())))
    """
    assert _run(code, TORCH_TPU_ALLOC_FILL="165").strip() == "[165]"
    # off by default: the reused block still holds what the freed tensor left
    assert _run(code, TORCH_TPU_ALLOC_FILL="").strip() == "[7]"
    # a malformed value is refused with a warning naming it, and nothing is filled
    e = dict(os.environ, TORCH_TPU_ALLOC_FILL="0x1ff")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "[7]" and "TORCH_TPU_ALLOC_FILL=0x1ff" in p.stderr


def test_alloc_fill_keeps_queued_reads_of_a_freed_block():
    """The fill waits for work queued before the block's free: a kernel still reading the freed
    tensor must see its values, not the pattern."""
    code = """
        import torch, torch_tpu
        for mode in ("strict", "defer_and_fuse"):
            torch_tpu.set_eager_mode(mode)
            a = torch.arange(100000, device="tpu")
            b = (a * 2).sum()
            del a
            c = torch.empty(100000, dtype=torch.int64, device="tpu")
            print(b.item())
    """
    assert _run(code, TORCH_TPU_ALLOC_FILL="255").split() == [str(99999 * 100000)] * 2


@pytest.mark.parametrize("op", ["abs", "median", "kthvalue", "nanmedian"])
def test_bool_kernels_refused_as_on_cpu(op, device):
    f = {"abs": torch.abs, "median": torch.median, "nanmedian": torch.nanmedian,
         "kthvalue": lambda x: torch.kthvalue(x, 1)}[op]
    with pytest.raises(NotImplementedError):
        f(torch.tensor([True, False]))
    with pytest.raises(NotImplementedError):
        f(torch.tensor([True, False], device=device))


COPY_ERRORS = [
    ("broadcast", lambda d: torch.zeros(4, device=d).copy_(torch.ones(5, device=d))),
    ("empty-dst", lambda d: torch.zeros(0, device=d).copy_(torch.ones(5, 2, 0, device=d))),
    ("expanded-dst", lambda d: torch.zeros(3, device=d).expand(2, 3).copy_(torch.ones(2, 3, device=d))),
    ("partial-overlap", lambda d: (lambda x: x[1:].copy_(x[:-1]))(torch.arange(5.0, device=d))),
    ("expanded-from-host", lambda d: torch.zeros(3, device=d).expand(2, 3).copy_(torch.ones(2, 3))),
]


@pytest.mark.parametrize("name,f", COPY_ERRORS, ids=[c[0] for c in COPY_ERRORS])
def test_copy_rejects_what_cpu_rejects(name, f, eager_mode, device):
    with pytest.raises(RuntimeError) as cpu:
        f("cpu")
    with pytest.raises(RuntimeError) as tpu:
        f(device)  # at the call, as on CPU: nothing is queued
    assert str(tpu.value).split(":")[0] == str(cpu.value).split(":")[0]


def test_copy_still_broadcasts_and_copies_onto_itself(device):
    x = torch.arange(6.0, device=device).view(2, 3)
    x.copy_(torch.tensor([1.0, 2.0, 3.0], device=device))
    assert x.cpu().tolist() == [[1, 2, 3], [1, 2, 3]]
    x.copy_(x)
    assert x.cpu().tolist() == [[1, 2, 3], [1, 2, 3]]


def test_index_of_an_empty_result_reads_no_index(eager_mode, device):
    """CPU gathers nothing, so it checks no index: x[idx] of a (3, 0, 1) tensor with idx [2, 3] is an
    empty (2, 0, 1) tensor, not an error at the next sync."""
    idx = [2, 3]
    want = torch.full((3, 0, 1), -2.5)[torch.tensor(idx)]
    got = torch.full((3, 0, 1), -2.5, device=device)[torch.tensor(idx, device=device)]
    torch.tpu.synchronize()
    assert got.shape == want.shape == (2, 0, 1)
    with pytest.raises(IndexError):  # a non-empty result still checks
        torch.full((3, 1), -2.5, device=device)[torch.tensor(idx, device=device)].cpu()
