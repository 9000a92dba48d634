"""How many of the ATen ops that only have backend kernels (no Composite*
kernel, so on tpu they reach our boxed fallback) the device covers: by a C
kernel in the runtime's op table, by a registered PyTorch decomposition, by
a dedicated C++ kernel of torch_tpu/csrc, or as a view (the fallback computes
views from metadata). Lists the missing ones.

    python scripts/op_coverage.py [--all] [--json out.json]

The op list is computed live from the dispatcher (the same query that made
need_ops.txt): aten ops with a CPU kernel and no CompositeImplicitAutograd /
CompositeExplicitAutograd(NonFunctional) kernel.
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # a checkout, not installed
import torch  # noqa: E402

COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
             "CompositeExplicitAutogradNonFunctional")


def backend_only_ops():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return sorted(n for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("aten::") and has(n, "CPU")
                  and not any(has(n, k) for k in COMPOSITE))


def op_overload(qualified):
    """"aten::add.Tensor" -> torch.ops.aten.add.Tensor (None if it cannot be resolved)."""
    name, _, overload = qualified.split("::", 1)[1].partition(".")
    try:
        return getattr(getattr(torch.ops.aten, name), overload or "default")
    except (AttributeError, RuntimeError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--all", action="store_true", help="list every op with how it is covered")
    p.add_argument("--json", help="also write the classification to this file")
    a = p.parse_args(argv)
    try:
        import torch_tpu
        from torch_tpu import _C, decompositions
        torch_tpu._register()
    except Exception as e:  # noqa: BLE001 - the reason is the answer
        print(f"torch_tpu cannot be loaded ({type(e).__name__}: {e}); build it with `make`", file=sys.stderr)
        return 2
    decomposed = set(decompositions.registered_ops())
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    how = {}
    for q in backend_only_ops():
        op = op_overload(q)
        names = decompositions.kernel_lookup_names(op) if op is not None else []
        kernel = next((n for n in names if _C._has_kernel(n)), None)
        if kernel:
            how[q] = f"kernel {kernel}"
        elif q in decomposed:
            how[q] = "decomposition"
        elif has(q, "PrivateUse1"):
            how[q] = "c++ kernel"
        elif op is not None and op._schema.returns and all(
                r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns):
            how[q] = "view"  # the boxed fallback computes views from metadata alone
        else:
            how[q] = "missing"
    total = len(how)
    counts = {}
    for v in how.values():
        k = v.split()[0] if v.startswith("kernel") else v
        counts[k] = counts.get(k, 0) + 1
    missing = sorted(q for q, v in how.items() if v == "missing")
    if a.all:
        for q, v in sorted(how.items()):
            print(f"{q:<60} {v}")
        print()
    print(f"backend-only aten ops: {total}")
    for k in ("kernel", "decomposition", "c++ kernel", "view", "missing"):
        n = counts.get(k, 0)
        print(f"  {k:<14} {n:>4}  ({100.0 * n / max(total, 1):.1f}%)")
    print(f"covered: {total - len(missing)}/{total}")
    if missing:
        print(f"\nmissing ({len(missing)}):")
        for q in missing:
            print(f"  {q}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"total": total, "counts": counts, "ops": how}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
