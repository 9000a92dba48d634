"""Runs PyTorch's own device-generic test files on the tpu device and reports per file.

PyTorch's test files are not part of this repository: point the runner at a PyTorch source tree of
the installed release (2.13.0), e.g.

    PYTHONPATH=$PWD .venv/bin/python tests/pytorch_suites.py --pytorch-src ~/src/pytorch \\
        --mode strict test_type_promotion.py test_complex.py

For each file a child process imports it with only the tpu variant of its
`instantiate_device_type_tests` classes (PYTORCH_TESTING_DEVICE_ONLY_FOR), then runs the tests one
by one, writing each start and outcome to a log as it goes. The parent watches that log: a test
running longer than --timeout is killed with its child, a child that dies (a crash) fails the test
it was in, and a new child resumes after it, so one bad test costs only itself. After each test on
tpu the child synchronizes the device, so an error found asynchronously (Strict, DeferAndFuse)
counts against the test that queued it.

Unless --no-cpu, the same file also runs on CPU and the report compares: of the tests that pass on
CPU, how many pass on tpu (the figure the known-failures list and README's table speak of). The
report per file (build/pytorch_suites/<mode>/<file>.md and .json, and a summary.md over all files)
lists passed, failed, errors (including crashes and timeouts), skipped, expected failures and
unexpected successes, the known failures (tests/pytorch_suites_known_failures.txt) that now pass,
and the most common causes of failure grouped by exception type and the first line of its message.
"""
import argparse
import collections
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
KNOWN_FAILURES = pathlib.Path(__file__).resolve().parent / "pytorch_suites_known_failures.txt"
MODES = ("strict", "debug", "defer_and_fuse")
# The test name's device token: PyTorch's generated names end in _<device>[_<dtype>...], and the
# class name in the device type upper-cased.
_DEVICE_TOKENS = {"tpu": ("TPU", "_tpu"), "cpu": ("CPU", "_cpu")}

IMPORT_TIMEOUT_S = 120.0

OUTCOMES = ("passed", "failed", "error", "crash", "timeout", "skipped", "expected_failure",
            "unexpected_success")


# ---------------------------------------------------------------- child: runs tests of one file
def _child_main(args):
    device = args.device
    os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1" if device == "tpu" else device
    sys.argv = [args.file]
    import unittest

    import torch
    if device == "tpu":
        import torch_tpu  # noqa: F401  (autoload normally did this already)
    from torch.testing._internal import common_device_type as cdt
    from torch.testing._internal import common_utils
    if device == "tpu":
        # Until its setUpClass has run once, the base names its classes ...PRIVATEUSE1.
        cdt.PrivateUse1TestBase.setUpClass()
    common_utils.parse_cmd_line_args()
    # run_tests() sets this in several files' __main__ blocks; a runner importing them does too.
    common_utils.TestCase._default_dtype_check_enabled = True
    _accept_older_files(common_utils)

    test_dir = str(pathlib.Path(args.file).resolve().parent)
    sys.path.insert(0, test_dir)
    os.chdir(test_dir)
    import importlib.util
    name = pathlib.Path(args.file).stem
    spec = importlib.util.spec_from_file_location(name, args.file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    log = open(args.log, "a", buffering=1)

    def emit(rec):
        log.write(json.dumps(rec) + "\n")

    try:
        # Files older than 2.13 call `super(self.__class__, self).setUp()`, which recurses now that
        # 2.13's device classes put the generic class after the device base in the MRO; newer
        # files write `super().setUp()`, the same call without the recursion.
        src = pathlib.Path(args.file).read_text(encoding="utf-8")
        src = src.replace("super(self.__class__, self)", "super()")
        exec(compile(src, args.file, "exec"), mod.__dict__)
    except BaseException as e:  # an import failure fails the file, with its cause
        emit({"import_error": _cause(type(e), e)})
        return 3

    suffix = _DEVICE_TOKENS[device][0]
    tests = []
    for obj in list(vars(mod).values()):
        if (isinstance(obj, type) and issubclass(obj, cdt.DeviceTypeTestBase)
                and obj.__name__.endswith(suffix) and obj.__module__ == name):
            for t in unittest.TestLoader().loadTestsFromTestCase(obj):
                tests.append(t)
    done = set()
    if args.skip and os.path.exists(args.skip):
        done = set(pathlib.Path(args.skip).read_text().split())
    emit({"total": len(tests)})
    sync = (lambda: torch.tpu.synchronize()) if device == "tpu" else (lambda: None)

    for t in tests:
        tid = t.id().split(".", 1)[1]  # Class.test_name
        if tid in done or (args.only and args.only not in tid):
            continue
        emit({"start": tid})
        result = unittest.TestResult()
        t0 = time.time()
        t.run(result)
        outcome, cause, tb = "passed", None, None
        if result.errors:
            tb = result.errors[0][1]
            outcome, cause = "error", _cause_from_tb(tb)
        elif result.failures:
            tb = result.failures[0][1]
            outcome, cause = "failed", _cause_from_tb(tb)
        elif result.skipped:
            outcome, cause = "skipped", result.skipped[0][1].splitlines()[0][:200] if result.skipped[0][1] else ""
        elif result.expectedFailures:
            outcome = "expected_failure"
        elif result.unexpectedSuccesses:
            outcome = "unexpected_success"
        try:  # an error the device found after the test returned is that test's
            sync()
        except BaseException as e:
            if outcome in ("passed", "skipped", "expected_failure", "unexpected_success"):
                outcome, cause = "error", _cause(type(e), e)
        emit({"test": tid, "outcome": outcome, "cause": cause, "secs": round(time.time() - t0, 3),
              "traceback": tb[-4000:] if tb else None})
    emit({"finished": True})
    return 0


def _accept_older_files(common_utils):
    """Lets versions of the files a little older or newer than the installed torch import: they use
    `@skipIfTorchDynamo` bare, which 2.13 refuses at import. Bare, it means the default message;
    the runner never runs under Dynamo, so the decorator changes nothing else."""
    original = common_utils.skipIfTorchDynamo

    def skip_if_torch_dynamo(msg="test doesn't currently work with dynamo"):
        if callable(msg):
            return original()(msg)
        return original(msg)

    common_utils.skipIfTorchDynamo = skip_if_torch_dynamo
    # Files of other versions name the binary-ufunc OpInfos with their Python refs
    # `binary_ufuncs_and_refs`; in 2.13 `binary_ufuncs` is that list (ops and refs).
    from torch.testing._internal import common_methods_invocations as cmi
    if not hasattr(cmi, "binary_ufuncs_and_refs"):
        cmi.binary_ufuncs_and_refs = cmi.binary_ufuncs
    # Older files import `skipIfMps` (skips a test where MPS is the backend; 2.13 has skipMPS for
    # device classes) and `tf32_is_not_fp32` (whether a CUDA GPU computes fp32 matmuls in TF32).
    # Neither MPS nor CUDA is here, so the first skips nothing and the second is False.
    import torch
    import unittest
    if not hasattr(common_utils, "skipIfMps"):
        def skip_if_mps(fn):
            if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
                return unittest.skip("test doesn't currently work with MPS")(fn)
            return fn
        common_utils.skipIfMps = skip_if_mps
    from torch.testing._internal import common_cuda
    if not hasattr(common_cuda, "tf32_is_not_fp32"):
        common_cuda.tf32_is_not_fp32 = lambda: False
    # and 2.13 replaced common_mkldnn's `bf32_on_and_off(p)` (newer files import it) by
    # `reduced_f32_on_and_off(bf32_precision=p)`.
    from torch.testing._internal import common_mkldnn
    if not hasattr(common_mkldnn, "bf32_on_and_off"):
        def bf32_on_and_off(bf32_precision=1e-2):
            return common_mkldnn.reduced_f32_on_and_off(bf32_precision=bf32_precision)
        common_mkldnn.bf32_on_and_off = bf32_on_and_off


def _cause(etype, e):
    msg = str(e).strip().splitlines()
    return f"{etype.__name__}: {msg[0] if msg else ''}"[:300]


def _cause_from_tb(tb):
    """'ExcType: first line' from a formatted traceback. Of a chain, the last exception, except
    where it was raised *from* an earlier one (`raise ... from`): PyTorch's comparison wraps the
    real error as "RuntimeError: Comparing ...", so the earliest such cause is the one named."""
    parts = re.split(r"\n\s*\n(The above exception was the direct cause of the following exception:|"
                     r"During handling of the above exception, another exception occurred:)\s*\n\s*\n", tb)
    segments, links = parts[0::2], parts[1::2]
    i = len(segments) - 1
    while i > 0 and links[i - 1].startswith("The above exception was the direct cause"):
        i -= 1
    return _exception_line(segments[i])


def _exception_line(segment):
    lines = segment.rstrip().splitlines()
    for l in lines:
        if l and not l.startswith(" ") and not l.startswith("Traceback"):
            return _normalize(l)[:300]
    return _normalize(lines[-1])[:300] if lines else "?"


def _normalize(line):
    # Strip the module path of an exception type and addresses, so equal causes group together.
    line = re.sub(r"^[\w.]+\.(\w+(Error|Exception|Failure|Interrupt)):", r"\1:", line)
    return re.sub(r"0x[0-9a-f]+", "0x?", line)


# ---------------------------------------------------------------- parent: isolation and reports
def _run_file(path, device, mode, timeout, workdir, file_timeout, only=None):
    """Runs one file's tests on `device` in children; returns {test: (outcome, cause)}."""
    stem = path.stem
    log = workdir / f"{stem}.{device}.log"
    skip = workdir / f"{stem}.{device}.done"
    for p in (log, skip):
        if p.exists():
            p.unlink()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if device == "tpu":
        env["TORCH_TPU_EAGER_MODE"] = mode
    # OpenMP's default wait policy spins idle threads between parallel regions: on a loaded machine
    # (more runnable threads than cores) each CPU op then waits out other processes' time slices, and
    # the children's CPU ops ran 4x slower (test_unary_ufuncs.py -k _uint32 on CPU, load 16-19: 32 s
    # of tests, 8 s with PASSIVE). Passive waiting changes no result.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    results, import_error, total = {}, None, None
    started_file = time.time()
    pos = 0
    while True:
        skip.write_text("\n".join(results))
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", "--device", device,
               "--file", str(path), "--log", str(log), "--skip", str(skip)]
        if only:
            cmd += ["-k", only]
        errf = open(workdir / f"{stem}.{device}.stderr", "ab")
        child = subprocess.Popen(cmd, env=env, stdout=errf, stderr=errf, start_new_session=True)
        current, current_since, finished, killed = None, time.time(), False, None
        while True:
            rc = child.poll()
            with open(log) if log.exists() else open(os.devnull) as f:
                f.seek(pos)
                chunk = f.read()
            # Only whole lines: the child may be in the middle of one.
            if "\n" in chunk:
                chunk = chunk[: chunk.rindex("\n") + 1]
                pos += len(chunk.encode())
                for line in chunk.splitlines():
                    rec = json.loads(line)
                    if "start" in rec:
                        current, current_since = rec["start"], time.time()
                    elif "test" in rec:
                        results[rec["test"]] = (rec["outcome"], rec["cause"])
                        current = None
                    elif "total" in rec:
                        total = rec["total"]
                    elif "import_error" in rec:
                        import_error = rec["import_error"]
                    elif "finished" in rec:
                        finished = True
            if rc is not None:
                break
            now = time.time()
            over_test = current is not None and now - current_since > timeout
            # Importing a file (torch, torch_tpu and the file's OpInfo tables: seconds, tens of them on a
            # loaded machine) has the bound of one test, and at least IMPORT_TIMEOUT_S.
            over_import = current is None and total is None and now - current_since > max(timeout, IMPORT_TIMEOUT_S)
            over_file = file_timeout and now - started_file > file_timeout
            if over_test or over_import or over_file:
                killed = "timeout" if not over_file else "file_timeout"
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                break
            time.sleep(0.05)
        errf.close()
        if finished or import_error:
            break
        if killed == "file_timeout":
            break
        if current is None:  # died between tests, or while importing
            if total is None:
                import_error = import_error or f"child exited with {child.returncode} while importing"
                break
            # died after its last test: nothing left to blame it on
            break
        if killed:
            results[current] = ("timeout", f"Timeout: over {timeout}s")
        else:
            rc = child.returncode
            sig = -rc if rc is not None and rc < 0 else None
            what = f"signal {signal.Signals(sig).name}" if sig else f"exit code {rc}"
            results[current] = ("crash", f"Crash: process died with {what}")
    return {"results": results, "import_error": import_error, "total": total,
            "secs": round(time.time() - started_file, 1)}


def _merge_into_saved(saved, path, run, only):
    """The whole-file tpu run saved at `saved` with the tests of `run` (a -k subset) replaced by their
    new outcomes; (merged run, None), or (run, only) where no whole-file run of this file is saved."""
    if not saved.exists():
        print(f"--merge: no whole-file run saved at {saved}; reporting the subset alone", flush=True)
        return run, only
    prev = json.loads(saved.read_text())
    if prev.get("only") is not None or prev.get("file_size") != path.stat().st_size:
        print(f"--merge: {saved} is not a whole-file run of this file; reporting the subset alone", flush=True)
        return run, only
    old = prev["run"]
    results = dict(old["results"])
    results.update(run["results"])
    merged = {"results": results, "import_error": old["import_error"] or run["import_error"],
              "total": old["total"], "secs": old["secs"],
              "merged": old.get("merged", []) + [{"only": only, "tests": len(run["results"]), "secs": run["secs"]}]}
    return merged, None


def _normalize_name(tid, device):
    cls_tok, test_tok = _DEVICE_TOKENS[device]
    cls, test = tid.split(".", 1)
    if cls.endswith(cls_tok):
        cls = cls[: -len(cls_tok)]
    test = re.sub(re.escape(test_tok) + r"(?=_|$)", "_DEV", test, count=1)
    return f"{cls}.{test}"


def load_known_failures(path=KNOWN_FAILURES):
    """{(file, generic test name): reason} from lines `file::Class.test_DEV_dtype  reason`."""
    known = {}
    if not path.exists():
        return known
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, reason = line.partition(" ")
        f, _, test = key.partition("::")
        known[(f, test)] = reason.strip()
    return known


def _summarize(fname, mode, tpu, cpu, known):
    counts = collections.Counter(o for o, _ in tpu["results"].values())
    causes = collections.Counter(c for o, c in tpu["results"].values()
                                 if o in ("failed", "error", "crash", "timeout"))
    norm_tpu = {_normalize_name(t, "tpu"): v for t, v in tpu["results"].items()}
    row = {"file": fname, "mode": mode, "total": tpu["total"], "import_error": tpu["import_error"],
           "secs": tpu["secs"], **{o: counts.get(o, 0) for o in OUTCOMES}}
    cpu_pass = None
    if cpu is not None:
        norm_cpu = {_normalize_name(t, "cpu"): v for t, v in cpu["results"].items()}
        cpu_pass = {t for t, (o, _) in norm_cpu.items() if o == "passed"}
        # Tests the tpu variant skips are device-restricted (onlyCPU, onlyCUDA, ...): they are not
        # run on tpu at all, so they are counted apart, not as failures.
        both = [t for t in cpu_pass if t in norm_tpu and norm_tpu[t][0] != "skipped"]
        row["cpu_passed"] = len(both)
        row["cpu_passed_tpu_skipped"] = sum(1 for t in cpu_pass if norm_tpu.get(t, ("skipped",))[0] == "skipped")
        row["tpu_passed_of_cpu_passed"] = sum(1 for t in both if norm_tpu[t][0] == "passed")
        row["cpu_import_error"] = cpu["import_error"]
    failing = sorted(t for t, (o, _) in norm_tpu.items() if o in ("failed", "error", "crash", "timeout"))
    known_here = {t: r for (f, t), r in known.items() if f == fname}
    row["known"] = sum(1 for t in failing if t in known_here)
    row["unlisted_failures"] = [t for t in failing if t not in known_here]
    row["known_now_passing"] = sorted(t for t in known_here if norm_tpu.get(t, ("",))[0] == "passed")
    row["top_causes"] = causes.most_common(15)
    row["failing"] = {t: norm_tpu[t][1] for t in failing}
    if cpu_pass is not None:
        row["cpu_only_failures"] = sorted(t for t in failing if t in cpu_pass)
    return row


def _markdown(row):
    out = [f"# {row['file']} on tpu ({row['mode']})", ""]
    if row["import_error"]:
        out += [f"Import failed: `{row['import_error']}`", ""]
    out.append("| " + " | ".join(OUTCOMES) + " | total |")
    out.append("|" + " --- |" * (len(OUTCOMES) + 1))
    out.append("| " + " | ".join(str(row[o]) for o in OUTCOMES) + f" | {row['total']} |")
    out.append("")
    if "cpu_passed" in row:
        out.append(f"Of the {row['cpu_passed']} tests that pass on CPU and run on tpu, "
                   f"{row['tpu_passed_of_cpu_passed']} pass on tpu "
                   f"({_pct(row['tpu_passed_of_cpu_passed'], row['cpu_passed'])}); "
                   f"{row['cpu_passed_tpu_skipped']} more pass on CPU and are skipped on tpu "
                   "(device-restricted: onlyCPU, onlyCUDA, ...).")
        out.append("")
    out.append(f"Known failures (tests/{KNOWN_FAILURES.name}) seen: {row['known']}; failures not listed: "
               f"{len(row['unlisted_failures'])}; listed but now passing: {len(row['known_now_passing'])}")
    out.append("")
    if row["top_causes"]:
        out += ["## Most common causes", "", "| tests | cause |", "| --- | --- |"]
        out += [f"| {n} | `{c}` |" for c, n in row["top_causes"]]
        out.append("")
    if row["failing"]:
        out += ["## Failing tests", ""]
        out += [f"- `{t}`: `{c}`" for t, c in row["failing"].items()]
        out.append("")
    if row["known_now_passing"]:
        out += ["## Listed as known failures, now passing (remove them from the list)", ""]
        out += [f"- `{t}`" for t in row["known_now_passing"]]
    return "\n".join(out) + "\n"


def _pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def _summary_table(rows):
    out = ["| file | mode | passed | failed | errors | skipped | xfail | fail on CPU too | known | "
           "tpu passes / CPU passes |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        errs = r["error"] + r["crash"] + r["timeout"]
        both = len(r["failing"]) - len(r["cpu_only_failures"]) if "cpu_only_failures" in r else "-"
        cmp_ = (f"{r['tpu_passed_of_cpu_passed']} / {r['cpu_passed']} "
                f"({_pct(r['tpu_passed_of_cpu_passed'], r['cpu_passed'])})") if "cpu_passed" in r else "-"
        if r["import_error"]:
            cmp_ = f"import failed: {r['import_error'][:80]}"
        out.append(f"| {r['file']} | {r['mode']} | {r['passed']} | {r['failed']} | {errs} | "
                   f"{r['skipped']} | {r['expected_failure']} | {both} | {r['known']} | {cmp_} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="tpu", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--skip", help=argparse.SUPPRESS)
    ap.add_argument("--pytorch-src", help="a PyTorch source tree of the installed release (its test/ is read)")
    ap.add_argument("--mode", default="strict", help="eager mode(s), comma-separated: strict,debug,defer_and_fuse")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test (default 120)")
    ap.add_argument("--file-timeout", type=float, default=0, help="seconds per file and device (0: none)")
    ap.add_argument("--no-cpu", action="store_true", help="do not run the files on CPU to compare")
    ap.add_argument("--reuse-cpu", action="store_true",
                    help="compare with the CPU results an earlier run saved in --out (same file and -k, or the "
                         "whole file, of which the tests -k names are taken) instead of running the file on CPU again")
    ap.add_argument("--merge", action="store_true",
                    help="with -k: put the subset's tpu results in place of the same tests' results of the "
                         "whole-file run saved in --out for this mode, and report over the whole file "
                         "(re-measures a file after a fix without running all of it again)")
    ap.add_argument("--cpu-only", action="store_true",
                    help="run the files on CPU only and save their results in --out, for later --reuse-cpu runs")
    ap.add_argument("--out", default=str(ROOT / "build" / "pytorch_suites"), help="report directory")
    ap.add_argument("-k", dest="only", default=None,
                    help="run only the tests whose name contains this string (the report is then partial)")
    ap.add_argument("files", nargs="*", help="test files under <src>/test (default: the ones the README table lists)")
    args = ap.parse_args(argv)
    if args.child:
        return _child_main(args)
    if not args.pytorch_src:
        ap.error("--pytorch-src DIR is required: a PyTorch source tree of release 2.13.0 "
                 "(its test/ directory holds the files this runs)")
    src = pathlib.Path(args.pytorch_src).expanduser().resolve()
    test_dir = src / "test" if (src / "test").is_dir() else src
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown eager mode {m!r}: one of {', '.join(MODES)}")
    files = args.files or DEFAULT_FILES
    paths = []
    for f in files:
        p = test_dir / f
        if not p.is_file():
            ap.error(f"{p} does not exist (is --pytorch-src a PyTorch source tree?)")
        paths.append(p)
    known = load_known_failures()
    out = pathlib.Path(args.out).resolve()  # the children chdir into the test directory
    rows = []
    cpu_cache = {}
    if args.cpu_only:
        out.mkdir(parents=True, exist_ok=True)
        for p in paths:
            print(f"{p.name} on cpu ...", flush=True)
            run = _run_file(p, "cpu", "strict", args.timeout, out, args.file_timeout, args.only)
            (out / f"{p.stem}.cpu.json").write_text(json.dumps({"only": args.only, "file_size": p.stat().st_size,
                                                                "run": run}))
            counts = collections.Counter(o for o, _ in run["results"].values())
            print(f"{p.name} on cpu: {dict(counts)} in {run['secs']} s", flush=True)
        return 0
    for mode in modes:
        workdir = out / mode
        workdir.mkdir(parents=True, exist_ok=True)
        for p in paths:
            print(f"[{mode}] {p.name} on tpu ...", flush=True)
            tpu = _run_file(p, "tpu", mode, args.timeout, workdir, args.file_timeout, args.only)
            tpu_saved = workdir / f"{p.stem}.tpu.json"
            only = args.only
            if args.merge and args.only:
                tpu, only = _merge_into_saved(tpu_saved, p, tpu, args.only)
            tpu_saved.write_text(json.dumps({"only": only, "file_size": p.stat().st_size, "run": tpu}))
            cpu = None
            if not args.no_cpu:
                saved = out / f"{p.stem}.cpu.json"
                if p.name not in cpu_cache and args.reuse_cpu and saved.exists():
                    prev = json.loads(saved.read_text())
                    if prev.get("file_size") == p.stat().st_size and prev.get("only") in (only, None):
                        print(f"[{mode}] {p.name} on cpu: results of {saved}", flush=True)
                        run = prev["run"]
                        if prev.get("only") != only:  # a whole-file run: its tests that -k names
                            run = dict(run, results={t: v for t, v in run["results"].items() if only in t})
                        cpu_cache[p.name] = run
                if p.name not in cpu_cache:
                    print(f"[{mode}] {p.name} on cpu ...", flush=True)
                    cpu_cache[p.name] = _run_file(p, "cpu", mode, args.timeout, out, args.file_timeout,
                                                  args.only)
                    saved.write_text(json.dumps({"only": args.only, "file_size": p.stat().st_size,
                                                 "run": cpu_cache[p.name]}))
                cpu = cpu_cache[p.name]
            row = _summarize(p.name, mode, tpu, cpu, known)
            (workdir / f"{p.stem}.json").write_text(json.dumps(row, indent=1))
            (workdir / f"{p.stem}.md").write_text(_markdown(row))
            rows.append(row)
            print(_summary_table([row]).splitlines()[-1], flush=True)
    table = _summary_table(rows)
    (out / "summary.md").write_text(table)
    print(table)
    return 0


DEFAULT_FILES = ["test_complex.py", "test_segment_reductions.py", "test_shape_ops.py", "test_sort_and_select.py",
                 "test_view_ops.py", "test_indexing.py"]

if __name__ == "__main__":
    sys.exit(main())
