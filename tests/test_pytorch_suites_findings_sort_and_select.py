"""Defects found by running PyTorch's test_sort_and_select.py on tpu (tests/pytorch_suites.py), each
kept as a test against PyTorch CPU so CI guards it without PyTorch's files."""
import pytest
import torch

NAN = float("nan")


def _same(a, b):
    """Equal values, dtype and shape, NaN where CPU has NaN."""
    b = b.cpu()
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.is_floating_point():
        assert torch.equal(torch.isnan(a), torch.isnan(b))
        a, b = a.nan_to_num(0), b.nan_to_num(0)
    assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_unique_dim_nan_in_cpu_order(dtype, tpu, eager_mode):
    # test_unique_dim's NaN case: CPU's comparator leaves NaN unordered, so the order of the unique
    # slices is whatever CPU's std::sort makes of it ([nan, 0, nan, nan, 1] here, not NaN last)
    x = torch.tensor([NAN, 0, 0, NAN, NAN, 1], dtype=dtype)
    want = torch.unique(x, dim=0, return_inverse=True, return_counts=True)
    got = torch.unique(x.to(tpu), dim=0, return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        _same(w, g)


@pytest.mark.parametrize("rows", [5, 16, 17, 40, 300, 2500])
def test_unique_dim_nan_matches_cpu_sort_steps(rows, tpu, eager_mode):
    # sizes on each side of std::sort's insertion-sort threshold (16) and deep enough for its
    # quicksort partitions: slices with NaN land where CPU's introsort puts them
    g = torch.Generator().manual_seed(rows)
    for cols, p_nan in ((1, 0.3), (2, 0.1), (3, 0.6)):
        x = torch.randint(0, 3, (rows, cols), generator=g).double()
        x[torch.rand(rows, cols, generator=g) < p_nan] = NAN
        for t in (x, x.float()):
            want = torch.unique(t, dim=0, return_inverse=True, return_counts=True)
            got = torch.unique(t.to(tpu), dim=0, return_inverse=True, return_counts=True)
            for gg, w in zip(got, want):
                _same(w, gg)
        # along dim 1 too (the slices are columns)
        want = torch.unique(x.t(), dim=1, return_inverse=True, return_counts=True)
        got = torch.unique(x.t().to(tpu), dim=1, return_inverse=True, return_counts=True)
        for gg, w in zip(got, want):
            _same(w, gg)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int8, torch.bool, torch.float32])
def test_unique_dim_without_nan(dtype, tpu, eager_mode):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-2, 3, (60, 4, 3), generator=g)
    x = (x > 0) if dtype == torch.bool else (x.abs() if dtype == torch.uint8 else x).to(dtype)
    for dim in range(3):
        want = torch.unique(x, dim=dim, return_inverse=True, return_counts=True)
        got = torch.unique(x.to(tpu), dim=dim, return_inverse=True, return_counts=True)
        for gg, w in zip(got, want):
            _same(w, gg)


def test_unique_dim_order_op(tpu):
    # the op behind unique_dim: a permutation of the rows, CPU's sort order; bad input raises
    x = torch.tensor([[2, 1], [0, 5], [2, 0], [0, 5]])
    perm = torch.ops.tpu._unique_dim_order(x.to(tpu)).cpu()
    assert perm.tolist() == [1, 3, 2, 0]
    assert torch.ops.tpu._unique_dim_order(torch.empty(0, 3, device=tpu)).shape == (0,)
    with pytest.raises(RuntimeError, match="2-D"):
        torch.ops.tpu._unique_dim_order(torch.zeros(3, device=tpu))
    with pytest.raises(RuntimeError, match="complex"):
        torch.ops.tpu._unique_dim_order(torch.zeros(3, 2, dtype=torch.complex64, device=tpu))


@pytest.mark.parametrize("op", ["index_fill", "index_select", "index_add", "index_copy"])
def test_index_ops_take_a_cpu_index(op, tpu, eager_mode):
    # test_stable_sort_against_numpy passes a 1-D CPU index tensor to index_fill on the device (it
    # skips that part only for cuda). tpu copies a CPU `index` of the index_* ops to the device, as
    # advanced indexing's x[cpu_index] does; other CPU tensors of more than 0 dims stay refused.
    x = torch.arange(12.0).reshape(3, 4)
    src = torch.full((2, 4), -1.0)
    for idx in (torch.tensor([0, 2]), torch.tensor([2, 0]), torch.tensor([], dtype=torch.long), torch.tensor(1)):
        source = src[: idx.numel()] if idx.dim() else src[:1]
        args = {"index_fill": (1.0,), "index_select": (), "index_add": (source,), "index_copy": (source,)}[op]
        want = getattr(x, op)(0, idx, *args)
        got = getattr(x.to(tpu), op)(0, idx, *(a.to(tpu) if isinstance(a, torch.Tensor) else a for a in args))
        assert got.device.type == "tpu"
        assert torch.equal(got.cpu(), want)
    # written in place through the moved index as well
    y = x.to(tpu)
    y.index_fill_(1, torch.tensor([3, 1]), 7.0)
    assert torch.equal(y.cpu(), x.index_fill(1, torch.tensor([3, 1]), 7.0))
    with pytest.raises(RuntimeError, match="same device"):
        x.to(tpu).index_add(0, torch.tensor([0, 2]), src)  # the source is no index: refused
    with pytest.raises(IndexError):  # a bad position in a CPU index surfaces as CPU's type
        x.to(tpu).index_fill(0, torch.tensor([5]), 1.0).cpu()


@pytest.mark.parametrize(
    "call",
    [
        lambda x, d: x.index_fill(1, torch.tensor([[1]], device=d), 1.0),
        lambda x, d: x.index_fill(1, torch.tensor([1], device=d), torch.ones(2, device=d)),
        lambda x, d: x.index_fill(2, torch.tensor([1], device=d), 1.0),
        lambda x, d: x.index_fill(1, torch.tensor([1], dtype=torch.int32, device=d), 1.0),
        lambda x, d: x.index_fill_(1, torch.tensor([1.0], device=d), 1.0),
        lambda x, d: x.index_fill(1, torch.tensor([1], device=d), 1j),
        lambda x, d: x.index_select(1, torch.tensor([1.0], device=d)),
        lambda x, d: x.index_select(1, torch.tensor([[1]], device=d)),
    ],
)
def test_index_fill_select_checks_at_the_call(call, tpu, eager_mode):
    # CPU's index_fill_ / index_select checks (index dtype and rank, value rank, complex value, dim):
    # tpu took an int32 index_fill index CPU refuses and refused a float index only when the kernel ran
    x = torch.randn(4, 5)
    with pytest.raises(Exception) as want:
        call(x, "cpu")
    with pytest.raises(Exception) as got:
        call(x.to(tpu), tpu)  # raised here, before any sync
    assert type(got.value) is type(want.value)
    assert str(want.value) in str(got.value)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unique_dim_wide_unsigned(dtype, tpu, eager_mode):
    # CPU's unique_dim takes uint16/32/64 (uint64 ordered unsigned, above 2^63 too); tpu refused them
    # (index_select has no wide-unsigned kernel; the slices now move by advanced indexing)
    x = torch.tensor([[1, 2], [1, 2], [-5, 1], [2**14, 0], [-1, 3], [0, 1]])
    x = x.view(torch.uint64).to(dtype) if dtype != torch.uint64 else x.view(torch.uint64)
    for dim in (0, 1):
        want = torch.unique(x, dim=dim, return_inverse=True, return_counts=True)
        got = torch.unique(x.to(tpu), dim=dim, return_inverse=True, return_counts=True)
        for g, w in zip(got, want):
            assert torch.equal(g.cpu(), w)
        assert got[0].stride() == want[0].stride()


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_unique_dim_complex_refused_as_cpu(dtype, tpu, eager_mode):
    x = torch.ones(2, 2, dtype=dtype)
    with pytest.raises(NotImplementedError) as cpu_err:
        torch.unique(x, dim=0)
    with pytest.raises(NotImplementedError) as tpu_err:
        torch.unique(x.to(tpu), dim=0)
    assert str(tpu_err.value) == str(cpu_err.value)
