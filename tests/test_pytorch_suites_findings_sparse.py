"""Sparse COO tensors on tpu (issue 17: test_autograd.py's sparse tests, test_type_promotion.py's
test_sparse_*, test_linalg.py's lobpcg on sparse input, test_torch.py's test_memory_format_empty_like,
test_tensor_creation_ops.py's test_tensor_ctor_device_inference). Every result is compared with the same
op on CPU sparse tensors: the dense form, and the coalesced indices and values."""
import warnings

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")


def _coo(device, dtype=torch.float64):
    # duplicates (0, 2) and (1, 0): uncoalesced
    i = torch.tensor([[0, 1, 1, 0, 2], [2, 0, 0, 2, 1]])
    v = torch.tensor([1.0, 2.0, -3.0, 4.0, 7.0]).to(dtype)
    return torch.sparse_coo_tensor(i, v, (3, 3)).to(device)


def _same_sparse(got, expected, exact_structure=True):
    assert got.layout == torch.sparse_coo and got.device.type == "tpu"
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.sparse_dim() == expected.sparse_dim() and got.dense_dim() == expected.dense_dim()
    torch.testing.assert_close(got.to_dense(), expected.to_dense(), equal_nan=True)
    if exact_structure:
        # (of uncoalesced operands CPU's add keeps a merge of them and its mul some explicit zeros; only
        # the dense form is defined there)
        gc, ec = got.coalesce(), expected.coalesce()
        assert torch.equal(gc.indices(), ec.indices())
        torch.testing.assert_close(gc.values(), ec.values(), equal_nan=True)
        assert got.is_coalesced() == expected.is_coalesced()
        if expected.is_coalesced():
            assert torch.equal(got._indices(), expected._indices())


def test_construct_read_coalesce_to_dense(tpu, eager_mode):
    for dtype in (torch.float32, torch.float64, torch.complex128, torch.int64, torch.int8):
        c = _coo("cpu", dtype)
        t = _coo(tpu, dtype)
        assert not t.is_coalesced() and t._nnz() == 5 and t.sparse_dim() == 2 and t.dense_dim() == 0
        assert torch.equal(t._indices().cpu(), c._indices()) and torch.equal(t._values().cpu(), c._values())
        assert torch.equal(t.to_dense().cpu(), c.to_dense())
        tc, cc = t.coalesce(), c.coalesce()
        assert tc.is_coalesced() and tc._nnz() == cc._nnz() == 3
        assert torch.equal(tc.indices().cpu(), cc.indices()) and torch.equal(tc.values().cpu(), cc.values())
    # built on the device from device indices/values, the device inferred from them
    i = torch.tensor([[0, 1, 1], [2, 0, 1], [2, 1, 0]], device=tpu)
    v = torch.tensor([1, 2, 3], device=tpu)
    s = torch.sparse_coo_tensor(i, v, (3, 3, 3), dtype=torch.float64)
    assert s.device.type == "tpu" and s.dtype == torch.float64
    _same_sparse(s, torch.sparse_coo_tensor(i.cpu(), v.cpu(), (3, 3, 3), dtype=torch.float64))
    # hybrid (a dense dim), no sparse dims, empty
    ih = torch.tensor([[0, 2, 0]])
    vh = torch.arange(6.0).reshape(3, 2)
    _same_sparse(torch.sparse_coo_tensor(ih, vh, (3, 2)).to(tpu).coalesce(),
                 torch.sparse_coo_tensor(ih, vh, (3, 2)).coalesce())
    z = torch.sparse_coo_tensor(torch.zeros(0, 3, dtype=torch.long), torch.tensor([1.0, 2.0, 3.0]), ())
    assert torch.equal(z.to(tpu).to_dense().cpu(), z.to_dense())
    e = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (4, 5))
    assert torch.equal(e.to(tpu).coalesce().to_dense().cpu(), torch.zeros(4, 5))
    # values()/indices() of an uncoalesced tensor refuse, as CPU
    with pytest.raises(RuntimeError, match="uncoalesced"):
        t.values()


def test_dense_to_sparse(tpu, eager_mode):
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    _same_sparse(x.to(tpu).to_sparse(), x.to_sparse())
    _same_sparse(x.to(tpu).to_sparse(1), x.to_sparse(1))
    _same_sparse(torch.tensor(3.0, device=tpu).to_sparse(), torch.tensor(3.0).to_sparse())
    _same_sparse(torch.zeros(4, device=tpu).to_sparse(), torch.zeros(4).to_sparse())
    # compressed layouts stay refused, naming the layout
    with pytest.raises(NotImplementedError, match="sparse_csr"):
        x.to(tpu).to_sparse(layout=torch.sparse_csr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.tensor([1.0, 2.0]),
                                      (2, 2)).to(tpu)
    with pytest.raises(NotImplementedError, match="compressed layouts"):
        csr.to_dense()


@pytest.mark.parametrize("coalesced", [True, False])
def test_add_sub_mul_div_promote_as_cpu(tpu, coalesced):
    torch.manual_seed(0)

    def pair(dtype, seed):
        g = torch.Generator().manual_seed(seed)
        d = (torch.randint(-3, 4, (4, 5), generator=g) * torch.randint(0, 2, (4, 5), generator=g)).to(dtype)
        s = d.to_sparse()
        if not coalesced:
            s = torch.sparse_coo_tensor(torch.cat([s._indices()] * 2, 1), torch.cat([s._values()] * 2), s.shape)
        return s

    for d1, d2 in ((torch.int8, torch.float32), (torch.float64, torch.int32), (torch.uint8, torch.int16),
                   (torch.float32, torch.float32), (torch.bfloat16, torch.float16)):
        c1, c2 = pair(d1, 1), pair(d2, 2)
        t1, t2 = c1.to(tpu), c2.to(tpu)
        _same_sparse(t1 + t2, c1 + c2, exact_structure=coalesced)
        _same_sparse(t1 - t2 * 2, c1 - c2 * 2, exact_structure=coalesced)
        _same_sparse(torch.sub(t1, t2, alpha=3), torch.sub(c1, c2, alpha=3), exact_structure=coalesced)
        _same_sparse(t1 * t2, c1 * c2, exact_structure=coalesced)
        # dense with sparse
        dd = c2.to_dense()
        assert torch.equal((dd.to(tpu) + t1).cpu(), dd + c1)
        _same_sparse(dd.to(tpu) * t1, dd * c1)
        _same_sparse(t1 * dd.to(tpu), c1 * dd)
        assert torch.equal(dd.to(tpu).mul_(t2).cpu(), dd.clone().mul_(c2))
        # by a scalar
        _same_sparse(t1 * 3, c1 * 3)
        if d1.is_floating_point:
            _same_sparse(t1 / 2.5, c1 / 2.5)
        _same_sparse(torch.div(t1, 2), torch.div(c1, 2))
        # in place, where the common dtype casts to self's
        if torch.can_cast(torch.promote_types(d1, d2), d1):
            a, b = t1.clone(), c1.clone()
            a.add_(t2)
            b.add_(c2)
            _same_sparse(a, b, exact_structure=coalesced)
        else:
            with pytest.raises(RuntimeError):
                t1.clone().add_(t2)
    # the refusals CPU makes
    s, d = _coo(tpu), torch.ones(3, 3, dtype=torch.float64, device=tpu)
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        s + d
    with pytest.raises(RuntimeError, match="scalar or zero-dim dense tensor"):
        s / s
    with pytest.raises(RuntimeError):
        d / s
    with pytest.raises(RuntimeError, match="sizes"):
        s + _coo(tpu).sparse_resize_((3, 4), 2, 0)


def test_sparse_mask_and_projection(tpu):
    d = torch.arange(9.0).reshape(3, 3)
    c = _coo("cpu")
    _same_sparse(d.to(tpu).sparse_mask(c.to(tpu)), d.sparse_mask(c))
    _same_sparse(d.to(tpu).sparse_mask(c.coalesce().to(tpu)), d.sparse_mask(c.coalesce()))
    sp = torch.tensor([[0.0, 0.0, 5.0], [6.0, 0.0, 0.0], [0.0, 0.0, 1.0]]).to_sparse()
    _same_sparse(sp.to(tpu).sparse_mask(c.coalesce().to(tpu)), sp.sparse_mask(c.coalesce()))
    m = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2, 1], [2, 0, 2, 0]]), torch.ones(4), (3, 3),
                                dtype=torch.float64)
    for a in (c, c.coalesce()):
        for b in (m, m.coalesce()):
            for acc in (False, True):
                got = a.to(tpu)._sparse_mask_projection(b.to(tpu), accumulate_matches=acc).cpu()
                exp = a._sparse_mask_projection(b, accumulate_matches=acc)
                assert torch.equal(got._indices(), exp._indices()) and torch.equal(got._values(), exp._values())


def test_sum_mm_addmm(tpu, eager_mode):
    c = _coo("cpu")
    torch.testing.assert_close(_coo(tpu).sum().cpu(), c.sum())
    x = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(torch.sparse.mm(c.to(tpu), x.to(tpu)).cpu(), torch.sparse.mm(c, x))
    torch.testing.assert_close(torch.mm(c.to(tpu), x.to(tpu)).cpu(), torch.mm(c, x))
    b = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(torch.addmm(b.to(tpu), c.to(tpu), x.to(tpu), beta=0.5, alpha=-2).cpu(),
                               torch.addmm(b, c, x, beta=0.5, alpha=-2))
    # lobpcg on a sparse matrix (test_linalg.py test_lobpcg_basic/ortho): smallest eigenvalues of a
    # sparse SPD matrix, as on CPU
    from torch.testing._internal.common_utils import random_sparse_pd_matrix
    torch.manual_seed(1)
    A = random_sparse_pd_matrix(9, density=0.5, dtype=torch.float64)
    e_cpu, _ = torch.lobpcg(A, k=2, n=3, largest=False, niter=1000, tol=1e-8)
    torch.manual_seed(1)
    e_tpu, v_tpu = torch.lobpcg(A.to(tpu), k=2, n=3, largest=False, niter=1000, tol=1e-8)
    torch.testing.assert_close(e_tpu.cpu(), e_cpu)
    torch.testing.assert_close(e_tpu.cpu(), torch.tensor([1.0, 2.0], dtype=torch.float64) / 9)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_sparse_gradients_accumulate(tpu, dtype):
    # test_autograd.py test_sparse_backward: sparse and dense gradients of one input accumulate
    class Fixed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, g):
            ctx.save_for_backward(g)
            return x

        @staticmethod
        def backward(ctx, g):
            return ctx.saved_tensors[0], None

    size = (6, 3, 2)
    g = torch.Generator().manual_seed(3)
    s1 = torch.sparse_coo_tensor(torch.tensor([[0, 3, 4], [0, 2, 2]]), torch.randn(3, 2, generator=g).to(dtype), size)
    s2 = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3, 4], [0, 1, 2, 2]]), torch.randn(4, 2, generator=g).to(dtype),
                                 size)
    dg = torch.randn(size, generator=g).to(dtype)
    for order in ((s1, dg, s2), (dg, s1, s2), (s1, s2)):
        results = []
        for dev in ("cpu", tpu):
            x = torch.zeros(size, dtype=dtype, device=dev, requires_grad=True)
            sum(Fixed.apply(x, t.to(dev)) for t in order).sum().abs().backward()
            results.append(x.grad)
        got, exp = results[1].cpu(), results[0]
        assert got.layout == exp.layout
        torch.testing.assert_close(got.to_dense(), exp.to_dense())


def test_sparse_ctor_values_grad_and_sparse_mask_grad(tpu):
    # test_sparse_ctor_getter_backward (float64): gradients reach the values through the constructor,
    # an add of sparse tensors, coalesce and values()
    i = torch.tensor([[0, 1, 1, 0], [2, 0, 0, 2]])
    other = _coo("cpu")

    def fn(v, dev):
        x = torch.sparse_coo_tensor(i.to(dev), v, (3, 3), dtype=torch.float64, device=dev)
        y = (x + other.to(dev)).coalesce()
        z = torch.sparse_coo_tensor(y.indices(), y.values() * 2, y.size())
        return z.coalesce().values()

    grads = []
    for dev in ("cpu", tpu):
        v = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, device=dev, requires_grad=True)
        out = fn(v, dev)
        out.backward(torch.arange(1.0, out.numel() + 1, dtype=torch.float64, device=dev))
        grads.append(v.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
    v = torch.randn(4, dtype=torch.float64, device=tpu, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fn(t, tpu), (v,), check_batched_grad=False)
    # test_sparse_mask_autograd
    t = torch.randn(3, device=tpu, requires_grad=True)
    mask = torch.tensor([1.0, 0.0, 1.0], device=tpu).to_sparse()
    t.sparse_mask(mask).to_dense().sum().backward()
    assert torch.equal(t.grad.cpu(), torch.tensor([1.0, 0.0, 1.0]))


def test_refusals_name_the_op(tpu):
    s = _coo(tpu)
    # empty_like of a sparse tensor with a memory format refuses, as CPU (test_memory_format_empty_like)
    with pytest.raises(RuntimeError, match="memory format option is only supported by strided tensors"):
        torch.empty_like(s, memory_format=torch.preserve_format)
    # an op with no sparse kernel on tpu names itself (no silent CPU round trip)
    with pytest.raises(NotImplementedError, match="aten::_sparse_softmax: this op has no kernel for sparse"):
        torch.sparse.softmax(s, 1)
    # sparse + sparse of different sizes
    with pytest.raises(RuntimeError, match="expected sizes of 'self' and 'other' to match"):
        s + torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.float64),
                                    (3, 4)).to(tpu)
    # addmm with a sparse mat2
    with pytest.raises(NotImplementedError, match="addmm on the tpu device supports a sparse COO mat1"):
        torch.addmm(torch.zeros(3, 3, dtype=torch.float64, device=tpu), torch.eye(3, dtype=torch.float64,
                    device=tpu), s)


def test_elementwise_ops_on_values(tpu):
    c = _coo("cpu")
    t = c.to(tpu)
    for name in ("abs", "sin", "tanh", "sqrt", "neg", "sign", "expm1", "floor", "nan_to_num", "relu"):
        _same_sparse(getattr(t, name)(), getattr(c, name)())
    for name in ("isnan", "isinf", "signbit"):
        _same_sparse(getattr(torch, name)(t), getattr(torch, name)(c))
    with pytest.raises(RuntimeError, match="abs_ requires coalesced input"):  # as CPU
        t.clone().abs_()
    a, b = t.coalesce(), c.coalesce()
    a.abs_()
    b.abs_()
    _same_sparse(a, b)


def test_shape_ops_and_index_select(tpu):
    c = _coo("cpu")
    t = c.to(tpu)
    h = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.arange(6.0).reshape(2, 3), (3, 3))
    _same_sparse(t.t(), c.t())
    _same_sparse(torch.cat([t, t], 1), torch.cat([c, c], 1))
    _same_sparse(t.unsqueeze(1), c.unsqueeze(1))
    _same_sparse(t.permute(1, 0), c.permute(1, 0))
    _same_sparse(t.narrow_copy(0, 1, 2), c.narrow_copy(0, 1, 2))
    _same_sparse(t.sum(1), c.sum(1))
    _same_sparse(torch.sparse.sum(t, 0), torch.sparse.sum(c, 0))
    _same_sparse(t.coalesce().pow(2), c.coalesce().pow(2))
    assert t.any().item() == c.any().item()
    v = torch.arange(3.0, dtype=torch.float64)
    torch.testing.assert_close(torch.mv(t, v.to(tpu)).cpu(), torch.mv(c, v))
    for x in (c, c.coalesce(), h, h.coalesce()):
        for dim in (0, 1):
            for idx in ([0, 2], [2, 0, 0], [1], []):
                i = torch.tensor(idx, dtype=torch.long)
                _same_sparse(x.to(tpu).index_select(dim, i.to(tpu)), x.index_select(dim, i), exact_structure=False)
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 3"):
        t.index_select(0, torch.tensor([-1, 0], device=tpu))
