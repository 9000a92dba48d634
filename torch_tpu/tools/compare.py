"""Layer-by-layer accuracy check: runs a model on tpu and on the CPU from the same weights and inputs,
with a forward hook on every module, and reports each module's output error and each parameter's
gradient error; the first module over the dtype's tolerance is where to look.

    python -m torch_tpu.tools.compare MODEL [--dtype bfloat16] [--json] [--no-backward]

MODEL is one of:
  - a Python callable, "package.module:name" (or "path/to/file.py:name"): it returns a model, or a
    (model, inputs) pair; inputs is a tensor, a tuple of tensors or a dict of keyword tensors. Without
    inputs the module's `example_inputs()` is called if it has one;
  - a Hugging Face model directory (config.json, with weights if present) or a config.json file:
    the model is built with transformers' Auto classes (offline) and fed random token ids
    (--batch, --seq).
Exit status: 0 when everything is within tolerance, 1 when a module or gradient is not, 2 on bad input.
From Python: torch_tpu.tools.compare.compare(model, inputs) returns the same report as a dict.
"""
import argparse
import copy
import importlib
import importlib.util
import json
import math
import os
import sys

import torch

# Relative error allowed per dtype (max |tpu - cpu| / max |cpu|): float32 results differ by summation
# order only; bf16/fp16 round every op's output, so errors grow layer by layer.
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _tensors(x):
    """The floating tensors of an output (tensors, tuples, lists, dicts, HF ModelOutputs), in order."""
    if isinstance(x, torch.Tensor):
        return [x] if x.is_floating_point() or x.is_complex() else []
    if isinstance(x, dict) or hasattr(x, "to_tuple"):
        x = list(x.values()) if isinstance(x, dict) else list(x.to_tuple())
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(_tensors(v))
        return out
    return []


def _to(x, device, dtype=None):
    if isinstance(x, torch.Tensor):
        if dtype is not None and x.is_floating_point():
            return x.to(device=device, dtype=dtype)
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to(v, device, dtype) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device, dtype) for v in x)
    return x


def _error(a, b):
    """(max abs error, relative error) of a against the reference b (both on the CPU)."""
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return math.inf, math.inf
    if a.numel() == 0:
        return 0.0, 0.0
    both_nan = torch.isnan(a) & torch.isnan(b)
    diff = (a - b).abs().masked_fill(both_nan, 0)
    if torch.isnan(diff).any():
        return math.inf, math.inf
    finite = torch.isfinite(b)
    max_abs = diff[finite].max().item() if finite.any() else 0.0
    if (~finite).any() and not torch.equal(a[~finite], b[~finite]):
        return math.inf, math.inf
    scale = b[finite].abs().max().item() if finite.any() else 0.0
    return max_abs, max_abs / scale if scale > 0 else max_abs


def _record(model):
    """Forward hooks on every module: outputs in completion order (children before parents)."""
    records, handles, calls = [], [], {}

    def hook(name):
        def fn(module, args, output):
            n = calls.get(name, 0)
            calls[name] = n + 1
            key = name if n == 0 else f"{name}#{n}"
            records.append((key, [t.detach().to("cpu") for t in _tensors(output)]))
        return fn

    for name, m in model.named_modules():
        handles.append(m.register_forward_hook(hook(name or "(model)")))
    return records, handles


def _run(model, inputs, backward):
    records, handles = _record(model)
    try:
        if isinstance(inputs, dict):
            out = model(**inputs)
        elif isinstance(inputs, (tuple, list)):
            out = model(*inputs)
        else:
            out = model(inputs)
    finally:
        for h in handles:
            h.remove()
    grads = {}
    if backward:
        ts = [t for t in _tensors(out) if t.requires_grad]
        if ts:
            # A loss every output element takes part in, with weights that differ per element.
            loss = sum((t.float() * torch.linspace(-1, 1, t.numel(), device=t.device).view(t.shape)).sum()
                       for t in ts)
            loss.backward()
            grads = {n: p.grad.detach().to("cpu") for n, p in model.named_parameters() if p.grad is not None}
    return records, grads


def compare(model, inputs, *, device="tpu", dtype=None, tolerance=None, backward=True):
    """Runs `model` (on the CPU; it is copied to `device`) on `inputs` both ways and returns
    {"modules": [...], "gradients": [...], "first_bad_module", "first_bad_gradient", "tolerance"}.
    Each module row: name, shape, dtype, max_abs, rel, ok. dtype: cast the model and floating inputs
    first (bfloat16: the tolerance becomes bf16's)."""
    model = model.to("cpu")
    if dtype is not None:
        model = model.to(dtype)
    dt = dtype or next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    tol = tolerance if tolerance is not None else TOLERANCE.get(dt, 1e-4)
    model_dev = copy.deepcopy(model).to(device)
    model.train(model.training)
    ref_rec, ref_grads = _run(model, _to(inputs, "cpu", dtype), backward)
    dev_rec, dev_grads = _run(model_dev, _to(inputs, device, dtype), backward)
    rows, first_bad = [], None
    dev_by_key = dict(dev_rec)
    for key, ref_ts in ref_rec:
        dev_ts = dev_by_key.get(key)
        if dev_ts is None or len(dev_ts) != len(ref_ts):
            row = {"name": key, "shape": None, "dtype": None, "max_abs": math.inf, "rel": math.inf, "ok": False,
                   "note": "outputs differ in number or the module did not run on the device"}
        elif not ref_ts:
            continue
        else:
            errs = [_error(d, r) for d, r in zip(dev_ts, ref_ts)]
            max_abs = max(e[0] for e in errs)
            rel = max(e[1] for e in errs)
            row = {"name": key, "shape": list(ref_ts[0].shape), "dtype": str(ref_ts[0].dtype).replace("torch.", ""),
                   "max_abs": max_abs, "rel": rel, "ok": rel <= tol}
        rows.append(row)
        if not row["ok"] and first_bad is None:
            first_bad = key
    grad_rows, first_bad_grad = [], None
    for name, g in ref_grads.items():
        d = dev_grads.get(name)
        max_abs, rel = _error(d, g) if d is not None else (math.inf, math.inf)
        ok = rel <= tol
        grad_rows.append({"name": name, "shape": list(g.shape), "max_abs": max_abs, "rel": rel, "ok": ok})
        if not ok and first_bad_grad is None:
            first_bad_grad = name
    return {"tolerance": tol, "dtype": str(dt).replace("torch.", ""), "modules": rows, "gradients": grad_rows,
            "first_bad_module": first_bad, "first_bad_gradient": first_bad_grad}


# ---- loading MODEL ----

def _load_callable(spec):
    mod_name, _, attr = spec.partition(":")
    if mod_name.endswith(".py") or os.path.sep in mod_name:
        s = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(mod_name))[0], mod_name)
        if s is None:
            raise ValueError(f"cannot load {mod_name}")
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(mod_name)
    obj = getattr(mod, attr or "model")
    made = obj() if callable(obj) and not isinstance(obj, torch.nn.Module) else obj
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        return made
    if not isinstance(made, torch.nn.Module):
        raise ValueError(f"{spec} gave a {type(made).__name__}, not a torch.nn.Module or (module, inputs)")
    if hasattr(mod, "example_inputs"):
        return made, mod.example_inputs()
    if hasattr(made, "example_inputs"):
        return made, made.example_inputs()
    raise ValueError(f"{spec}: no inputs (return (model, inputs) or define example_inputs())")


def _load_hf(path, batch, seq):
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg_path = path if path.endswith(".json") else os.path.join(path, "config.json")
    config = transformers.AutoConfig.from_pretrained(os.path.dirname(cfg_path) or ".")
    archs = getattr(config, "architectures", None) or []
    has_weights = os.path.isdir(path) and any(f.endswith((".safetensors", ".bin")) for f in os.listdir(path))
    cls = transformers.AutoModelForCausalLM if any("CausalLM" in a for a in archs) else transformers.AutoModel
    model = cls.from_pretrained(path) if has_weights else cls.from_config(config)
    model.eval()
    vocab = getattr(config, "vocab_size", 1000)
    g = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=g)}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = inputs["input_ids"][:, : max(1, seq // 2)]
    return model, inputs


def _finite(x):
    """JSON has no infinity: an error that could not be measured is null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _fmt(v):
    return "inf" if v == math.inf else f"{v:.3e}"


def _print(report, file=None):
    file = file or sys.stdout
    tol = report["tolerance"]
    print(f"layer-by-layer: tpu vs CPU, {report['dtype']}, tolerance rel <= {tol:g} "
          f"(max |tpu - cpu| / max |cpu|)", file=file)
    print(f"{'module':<48} {'shape':<20} {'max abs':>10} {'rel':>10}", file=file)
    for r in report["modules"]:
        mark = "" if r["ok"] else "  <-- over tolerance"
        shape = "x".join(map(str, r["shape"])) if r["shape"] is not None else "?"
        print(f"{r['name'][:48]:<48} {shape[:20]:<20} {_fmt(r['max_abs']):>10} {_fmt(r['rel']):>10}{mark}", file=file)
    if report["gradients"]:
        print(f"\n{'parameter gradient':<48} {'shape':<20} {'max abs':>10} {'rel':>10}", file=file)
        for r in report["gradients"]:
            mark = "" if r["ok"] else "  <-- over tolerance"
            shape = "x".join(map(str, r["shape"]))
            print(f"{r['name'][:48]:<48} {shape[:20]:<20} {_fmt(r['max_abs']):>10} {_fmt(r['rel']):>10}{mark}",
                  file=file)
    fb, fg = report["first_bad_module"], report["first_bad_gradient"]
    print("", file=file)
    print(f"first module over tolerance: {fb}" if fb else "every module within tolerance", file=file)
    if report["gradients"]:
        print(f"first gradient over tolerance: {fg}" if fg else "every gradient within tolerance", file=file)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torch_tpu.tools.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="package.module:callable, file.py:callable, a Hugging Face model directory "
                                 "or its config.json")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "float64"], default=None,
                   help="cast the model and floating inputs first (default: as built)")
    p.add_argument("--tolerance", type=float, default=None, help="relative tolerance (default: per dtype)")
    p.add_argument("--no-backward", action="store_true", help="forward only (no gradient comparison)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--batch", type=int, default=2, help="Hugging Face models: batch of random token ids")
    p.add_argument("--seq", type=int, default=16, help="Hugging Face models: sequence length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="tpu")
    args = p.parse_args(argv)
    import torch_tpu  # noqa: F401  (the device)

    torch.manual_seed(args.seed)
    try:
        if os.path.isdir(args.model) or args.model.endswith(".json"):
            model, inputs = _load_hf(args.model, args.batch, args.seq)
        else:
            model, inputs = _load_callable(args.model)
    except (ImportError, AttributeError, ValueError, OSError) as e:
        print(f"compare: cannot load {args.model}: {e}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype) if args.dtype else None
    report = compare(model, inputs, device=args.device, dtype=dtype, tolerance=args.tolerance,
                     backward=not args.no_backward)
    if args.json:
        print(json.dumps(_finite(report)))
    else:
        _print(report)
    return 0 if report["first_bad_module"] is None and report["first_bad_gradient"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
