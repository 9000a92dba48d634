"""The generated-kernel cache on disk runs code, so it must never load another user's code or write through
someone's symlink (README, "Security"). Each test attacks it and asserts the outcome in a fresh process: the
chain's results equal PyTorch CPU's, the attacker's library is never loaded (it would leave a marker file the
moment it is mapped), nothing outside the cache is written, and the warning says why.

Run as root (as here), "another user" is a forked child that setuid()s to nobody (65534) to own and plant
files and directories; otherwise a directory or file of the wrong mode stands in for the foreign one (both
paths are in each test that needs one).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

pytestmark = pytest.mark.tpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOBODY = 65534
AS_ROOT = os.geteuid() == 0
WHO = "other_user" if AS_ROOT else "wrong_mode"
ABI = int(re.search(r"#define TPURT_KERNEL_ABI_VERSION (\d+)u",
                    open(os.path.join(ROOT, "runtime/compiler/kernel_abi.h")).read()).group(1))

# A process that runs a chain in DeferAndFuse until its generated kernel runs (first sight asks the disk
# cache, second queues a build, third runs what was built) and compares every result with PyTorch CPU.
_CHILD = textwrap.dedent("""
    import json, os, sys, torch, torch_tpu
    from torch_tpu import _C
    kind = sys.argv[1]
    x = torch.linspace(-3, 3, 5000)
    if kind == "tanh":
        fn = lambda x: ((x * 2.0 + 1.0).exp() * x).tanh()
    elif kind == "sigmoid":
        fn = lambda x: ((x * 0.5 - 1.0).sigmoid() * x).abs()
    else:  # a chain whose build always fails (digamma calls a helper private to the library)
        x = torch.linspace(0.1, 1.9, 5000)
        fn = lambda x: (x * 0.5).digamma() + x
    for pid_plant in os.environ.get("PLANT_TEMPS", "").split(os.pathsep) if os.environ.get("PLANT_TEMPS") else []:
        # the temporaries an earlier writer named after its process id and a counter
        for seq in range(64):
            os.symlink(os.environ["PRECIOUS"], f"{pid_plant}.{os.getpid()}.{seq}.tmp")
    # PyTorch CPU's own first call of this chain in a new process gives other values now and then
    # under load (2 processes in 90, with or without torch_tpu imported: x in [0.007, 0.37] off by up
    # to 8e-5 relative, and every later call in the process agrees with the others), so the
    # reference is its second call.
    fn(x)
    want = fn(x)
    xt = x.to("tpu")
    _C._set_exec_mode(2)
    _C._fusion_stats_reset()
    same = True

    def explain(it, y, got):
        # What a failure needs to be read (seen only in full runs under load, never alone): which elements,
        # by how much, whether they hold one of the chain's intermediates or zeros (a value not written or
        # read too early), whether the device tensor still reads the same (a copy that raced the chain),
        # whether the input is intact, and what the generic path and the unfused ops give now.
        d = (got - want).abs()
        bad = (d > 1e-6 + 1e-5 * want.abs()).nonzero().flatten()
        i = int(d.argmax())
        stats = _C._fusion_stats()
        print(f"run {it} differs: max |diff| {float(d.max())} at {i}: {float(got[i])} vs {float(want[i])}, "
              f"{bad.numel()} elements; stats {stats}", file=sys.stderr)
        print(f"run {it} differs: bad elements {bad[:8].tolist()} .. {bad[-8:].tolist()}, per 2048-element tile "
              f"{torch.bincount(bad // 2048, minlength=3).tolist()}", file=sys.stderr)
        stages = {"zero": torch.zeros_like(x), "x": x}
        if kind == "tanh":
            stages.update({"x*2": x * 2.0, "x*2+1": x * 2.0 + 1.0, "exp": (x * 2.0 + 1.0).exp(),
                           "exp*x": (x * 2.0 + 1.0).exp() * x})
        seen = [n for n, v in stages.items() if torch.equal(got[bad], v[bad])]
        print(f"run {it} differs: bad elements hold {seen or 'none of the intermediates'}; device tensor read "
              f"again equal: {torch.equal(y.cpu(), got)}; input intact: {torch.equal(xt.cpu(), x)}",
              file=sys.stderr)
        _C._fusion_set_codegen(False)
        generic = torch.allclose(fn(xt).cpu(), want, rtol=1e-5, atol=1e-6)
        _C._fusion_set_codegen(True)
        _C._fusion_set_enabled(False)
        unfused = torch.allclose(fn(xt).cpu(), want, rtol=1e-5, atol=1e-6)
        _C._fusion_set_enabled(True)
        print(f"run {it} differs: now the generic path is right: {generic}, the unfused ops: {unfused}",
              file=sys.stderr)

    for it in range(3):
        y = fn(xt)
        got = y.cpu()
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            explain(it, y, got)
            same = False
        del y
        _C._fusion_wait_builds()
    _C._set_exec_mode(0)
    st = _C._fusion_stats()
    print(json.dumps({"same": bool(same), "loads": st["codegen_disk_loads"], "builds": st["codegen_builds"],
                      "shared_loads": st["codegen_shared_loads"], "shared_stores": st["codegen_shared_stores"],
                      "failures": st["codegen_build_failures"], "rejects": st["codegen_disk_rejects"],
                      "runs": st["codegen_runs"]}))
""")


def _child(cache, kind="tanh", **env):
    e = dict(os.environ, TORCH_TPU_FUSE_CACHE_DIR=str(cache), **env)
    e.pop("TORCH_TPU_LOG_LEVEL", None)
    r = subprocess.run([sys.executable, "-c", _CHILD, kind], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _show_differs(r.stderr, f"{kind}, cache {cache}")
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _show_differs(err, label):
    for line in err.splitlines():  # whole, in the failing test's captured stderr (assertions truncate)
        if "differs" in line:
            print(f"child ({label}): {line}", file=sys.stderr)


def _as_other_user(fn):
    """Runs fn() in a forked child that has become uid/gid 65534 (nobody)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            fn()
            code = 0
        except BaseException as e:  # noqa: BLE001 - reported through the exit code
            os.write(2, f"as nobody: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _fnv1a(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.fixture
def base(device):
    """A directory others can reach (pytest's tmp_path is private to root): `drop` in it is where the
    other user plants, `marker` is what the attacker's library creates when it is loaded."""
    if device != "tpu":
        pytest.skip("generated kernels are a tpu feature")
    d = tempfile.mkdtemp(prefix="tpu_cache_sec.")
    os.chmod(d, 0o755)
    drop = os.path.join(d, "drop")
    os.mkdir(drop)
    if AS_ROOT:
        os.chown(drop, NOBODY, NOBODY)
    else:
        os.chmod(drop, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def evil_so(base):
    """An attacker's library: any kernel ABI symbols you like, and a constructor that leaves base/marker."""
    src = os.path.join(base, "evil.c")
    with open(src, "w") as f:
        f.write(textwrap.dedent(f"""
            #include <fcntl.h>
            #include <unistd.h>
            __attribute__((constructor)) static void loaded(void) {{
              int fd = open("{base}/marker", O_WRONLY | O_CREAT, 0644);
              if (fd >= 0) close(fd);
            }}
            __attribute__((visibility("default"))) const unsigned tpurt_kernel_abi_version = {ABI}u;
            __attribute__((visibility("default"))) int tpurt_fused_kernel(const void* a, long b, long e, int s) {{
              return 0;
            }}
        """))
    so = os.path.join(base, "evil.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, src], check=True)
    os.chmod(so, 0o644)
    return so


def _built_entry(cache, kind="tanh"):
    """Builds `kind`'s kernel into cache (a trusted one) in a process of its own; its hash and source."""
    st, err = _child(cache, kind)
    assert st["same"] and st["builds"] == 1, (st, err[-2000:])
    rec = [n for n in os.listdir(cache) if n.endswith(".kernel")]
    assert len(rec) == 1
    text = open(os.path.join(cache, rec[0]), "rb").read()
    return rec[0][:16], text[text.index(b"\n") + 1:]


def _plant_entry(cache, h, source, so_bytes):
    """A record for library bytes so_bytes at h's name (written by this user: only the library is foreign)."""
    head = f"torch_tpu kernel v2 abi {ABI} so {_fnv1a(so_bytes):016x}\n".encode()
    with open(os.path.join(cache, h + ".kernel.new"), "wb") as f:
        f.write(head + source)
    os.chmod(os.path.join(cache, h + ".kernel.new"), 0o600)
    os.replace(os.path.join(cache, h + ".kernel.new"), os.path.join(cache, h + ".kernel"))


def _snapshot(d):
    return {n: (os.lstat(os.path.join(d, n)).st_mtime_ns, os.lstat(os.path.join(d, n)).st_size)
            for n in os.listdir(d)}


# ---- the directory ----------------------------------------------------------------------------------------

def _foreign_dir(path, evil, source_of=None):
    """A cache directory the user must not trust: another user's (with that user's entry in it), or one of
    the wrong mode."""
    if AS_ROOT:
        data = open(evil, "rb").read()

        def make():
            os.mkdir(path, 0o755)
            if source_of:
                h, source = source_of
                with open(os.path.join(path, h + ".so"), "wb") as f:
                    f.write(data)
                head = f"torch_tpu kernel v2 abi {ABI} so {_fnv1a(data):016x}\n".encode()
                with open(os.path.join(path, h + ".kernel"), "wb") as f:
                    f.write(head + source)
        _as_other_user(make)
    else:
        os.mkdir(path)
        os.chmod(path, 0o777)


@pytest.mark.parametrize("who", [WHO])
def test_cache_dir_of_another_user_is_not_used(base, evil_so, who):
    h_src = _built_entry(os.path.join(base, "mine"))
    cache = os.path.join(base, "drop", "cache")
    _foreign_dir(cache, evil_so, h_src)
    before = _snapshot(cache)
    st, err = _child(cache)
    assert st["same"] and st["runs"] >= 1 and st["builds"] == 1 and st["loads"] == 0, (st, err[-2000:])  # built, kept in memory
    assert not os.path.exists(os.path.join(base, "marker"))
    assert _snapshot(cache) == before  # nothing written there
    assert "kernel cache: not using " + cache in err
    assert ("belongs to uid 65534, not to this user" if who == "other_user" else "writable by") in err
    assert err.count("kernel cache: not using") == 1  # once per process


def test_world_writable_cache_dir_is_not_used(base):
    cache = os.path.join(base, "open")
    os.mkdir(cache)
    os.chmod(cache, 0o1777)  # even with the sticky bit
    st, err = _child(cache)
    assert st["same"] and st["runs"] >= 1 and st["builds"] == 1, (st, err[-2000:])
    assert os.listdir(cache) == []
    assert "is writable by its group and others (mode 1777)" in err


@pytest.mark.parametrize("below", [False, True])
def test_symlinked_cache_dir_is_not_used(base, below):
    """A symlink as the cache directory, or (default layout) as a directory from the root down, is refused
    even when it points at a private directory of this user's: nothing is written there."""
    target = os.path.join(base, "private")
    os.mkdir(target, 0o700)
    link = os.path.join(base, "drop", "link")
    if AS_ROOT:
        _as_other_user(lambda: os.symlink(target, link))
    else:
        os.symlink(target, link)
    env = {}
    if below:  # XDG_CACHE_HOME/torch_tpu is the root; its "fused" is a symlink
        xdg = os.path.join(base, "xdg")
        os.makedirs(os.path.join(xdg, "torch_tpu"), mode=0o700)
        os.chmod(os.path.join(xdg, "torch_tpu"), 0o700)
        os.symlink(target, os.path.join(xdg, "torch_tpu", "fused"))
        e = dict(os.environ, XDG_CACHE_HOME=xdg)
        e.pop("TORCH_TPU_FUSE_CACHE_DIR", None)
        e.pop("TORCH_TPU_LOG_LEVEL", None)
        r = subprocess.run([sys.executable, "-c", _CHILD, "tanh"], env=e, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        _show_differs(r.stderr, f"tanh, XDG_CACHE_HOME {xdg}")
        st, err = json.loads(r.stdout.strip().splitlines()[-1]), r.stderr
        shown = os.path.join(xdg, "torch_tpu", "fused")
    else:
        st, err = _child(link)
        shown = link
    assert st["same"] and st["runs"] >= 1, (st, err[-2000:])
    assert os.listdir(target) == []
    assert f"{shown} is a symlink" in err


# ---- entries ----------------------------------------------------------------------------------------------

def _other_users_copy(src, dst):
    """dst: a copy of src owned by the other user (or, without root, writable by others)."""
    data = open(src, "rb").read()
    if AS_ROOT:
        def write():
            with open(dst, "wb") as f:
                f.write(data)
            os.chmod(dst, 0o644)
        _as_other_user(write)
    else:
        with open(dst, "wb") as f:
            f.write(data)
        os.chmod(dst, 0o666)


@pytest.mark.parametrize("who", [WHO])
def test_symlinked_library_to_another_users_is_refused(base, evil_so, who):
    cache = os.path.join(base, "cache")
    h, source = _built_entry(cache)
    theirs = os.path.join(base, "drop", "evil.so")
    _other_users_copy(evil_so, theirs)
    os.unlink(os.path.join(cache, h + ".so"))
    os.symlink(theirs, os.path.join(cache, h + ".so"))
    _plant_entry(cache, h, source, open(evil_so, "rb").read())
    st, err = _child(cache)
    assert st["same"] and st["loads"] == 0 and st["rejects"] == 1 and st["builds"] == 1 and st["runs"] >= 1, (st, err[-2000:])
    assert not os.path.exists(os.path.join(base, "marker"))
    assert f"entry {h}.so refused and removed: {h}.so is a symlink" in err
    assert not os.path.islink(os.path.join(cache, h + ".so"))  # rebuilt in its place
    assert open(theirs, "rb").read() == open(evil_so, "rb").read()


@pytest.mark.parametrize("who", [WHO])
def test_foreign_library_with_correct_name_and_record_is_refused(base, evil_so, who):
    cache = os.path.join(base, "cache")
    h, source = _built_entry(cache)
    theirs = os.path.join(base, "drop", "evil.so")
    _other_users_copy(evil_so, theirs)
    os.replace(theirs, os.path.join(cache, h + ".so"))  # moved in: keeps its owner and mode
    _plant_entry(cache, h, source, open(evil_so, "rb").read())
    st, err = _child(cache)
    assert st["same"] and st["loads"] == 0 and st["rejects"] == 1 and st["builds"] == 1, (st, err[-2000:])
    assert not os.path.exists(os.path.join(base, "marker"))
    why = "belongs to uid 65534, not to this user" if who == "other_user" else "is writable by others (mode 0666)"
    assert f"entry {h}.so refused and removed: {h}.so {why}" in err


def test_corrupted_library_is_refused_and_rebuilt(base):
    cache = os.path.join(base, "cache")
    h, _ = _built_entry(cache)
    so = os.path.join(cache, h + ".so")
    data = bytearray(open(so, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(so + ".new", "wb") as f:
        f.write(bytes(data))
    os.chmod(so + ".new", 0o600)
    os.replace(so + ".new", so)
    st, err = _child(cache)
    assert st["same"] and st["loads"] == 0 and st["rejects"] == 1 and st["builds"] == 1 and st["runs"] >= 1, (st, err[-2000:])
    st, err = _child(cache)  # the rebuilt entry is good
    assert st["same"] and st["loads"] == 1 and st["builds"] == 0, (st, err[-2000:])


def test_planted_symlinks_at_failure_record_and_temporaries_are_not_written_through(base):
    """A symlink at the name of the failure record, and at every temporary name the writer could have been
    predicted to use, point at a file elsewhere: that file is unchanged and the record is still written."""
    cache = os.path.join(base, "cache")
    st, err = _child(cache, "fails")
    assert st["same"] and st["failures"] == 1 and st["runs"] == 0, (st, err[-2000:])
    fail = [n for n in os.listdir(cache) if n.endswith(".fail")]
    assert len(fail) == 1
    fail = os.path.join(cache, fail[0])
    os.unlink(fail)
    precious = os.path.join(base, "precious")
    with open(precious, "w") as f:
        f.write("not yours")
    os.chmod(precious, 0o600)
    os.symlink(precious, fail)
    st, err = _child(cache, "fails", PRECIOUS=precious, PLANT_TEMPS=fail)
    assert st["same"] and st["failures"] == 1 and st["runs"] == 0, (st, err[-2000:])
    assert open(precious).read() == "not yours"
    assert not os.path.islink(fail) and os.stat(fail).st_mode & 0o777 == 0o600
    assert open(fail, "rb").read().startswith(b"torch_tpu build failure v2 time ")


# ---- size limit --------------------------------------------------------------------------------------------

def test_size_limit_evicts_least_recently_used(base):
    cache = os.path.join(base, "cache")
    os.mkdir(cache, 0o700)
    now = time.time()
    planted = [f"00000000000000c{i}" for i in range(4)]
    for i, h in enumerate(planted):  # 4 x 300 KiB, c0 the least recently used
        p = os.path.join(cache, h + ".so")
        with open(p, "wb") as f:
            f.write(b"x" * (300 << 10))
        os.chmod(p, 0o600)
        os.utime(p, (now - 4000 + 1000 * i, now - 4000 + 1000 * i))
    other = os.path.join(cache, "notes.txt")  # not the cache's: never evicted
    with open(other, "w") as f:
        f.write("mine")
    os.utime(other, (1, 1))
    st, err = _child(cache, TORCH_TPU_FUSE_CACHE_MAX_MB="1")
    assert st["same"] and st["builds"] == 1 and st["runs"] >= 1, (st, err[-2000:])
    names = set(os.listdir(cache))
    assert planted[0] + ".so" not in names
    assert {p + ".so" for p in planted[1:]} <= names and "notes.txt" in names
    assert sum(os.path.getsize(os.path.join(cache, n)) for n in names if n != "notes.txt") <= 1 << 20


# ---- remembered failures -----------------------------------------------------------------------------------

def test_failure_record_holds_only_for_the_same_compiler_and_an_hour(base):
    cache = os.path.join(base, "cache")
    st, err = _child(cache, "fails")  # a real failure record: its header names this compiler
    assert st["failures"] == 1, (st, err[-2000:])
    fail = next(n for n in os.listdir(cache) if n.endswith(".fail"))
    head = open(os.path.join(cache, fail), "rb").read().split(b"\n", 1)[0].decode()
    compiler = head.split(" compiler ", 1)[1]
    h, source = _built_entry(cache, "sigmoid")
    for ext in (".so", ".kernel"):
        os.unlink(os.path.join(cache, h + ext))
    now = int(time.time())
    cases = [  # (record, held)
        (f"torch_tpu build failure v2 time {now - 10} compiler {compiler}\n".encode() + source, True),
        (f"torch_tpu build failure v2 time {now - 7200} compiler {compiler}\n".encode() + source, False),
        (f"torch_tpu build failure v2 time {now - 10} compiler /usr/bin/cc dev 1 ino 2 size 3 mtime 4.0\n"
         .encode() + source, False),
        (source, False),  # the earlier format: no compiler, no time
    ]
    for record, held in cases:
        p = os.path.join(cache, h + ".fail")
        with open(p + ".new", "wb") as f:
            f.write(record)
        os.chmod(p + ".new", 0o600)
        os.replace(p + ".new", p)
        st, err = _child(cache, "sigmoid")
        assert st["same"], record[:80]
        if held:
            assert st["builds"] == 0 and st["runs"] == 0 and os.path.exists(p), record[:80]
        else:  # retried: built and run, the stale record gone
            assert st["builds"] == 1 and st["runs"] >= 1 and not os.path.exists(p), record[:80]
            for ext in (".so", ".kernel"):
                os.unlink(os.path.join(cache, h + ext))


# ---- the CLI -----------------------------------------------------------------------------------------------

def _cli(cache, *args):
    r = subprocess.run([sys.executable, "-m", "torch_tpu.cache", "--dir", str(cache), *args],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_cli_info_list_verify_clear_match_the_directory(base):
    cache = os.path.join(base, "cache")
    h1, _ = _built_entry(cache, "tanh")
    st, err = _child(cache, "sigmoid")
    assert st["builds"] == 1
    h2 = next(n[:16] for n in os.listdir(cache) if n.endswith(".kernel") and not n.startswith(h1))
    st, err = _child(cache, "fails")
    h3 = next(n[:16] for n in os.listdir(cache) if n.endswith(".fail"))
    so2 = os.path.join(cache, h2 + ".so")  # corrupted
    data = bytearray(open(so2, "rb").read())
    data[100] ^= 0x5A
    with open(so2 + ".new", "wb") as f:
        f.write(bytes(data))
    os.chmod(so2 + ".new", 0o600)
    os.replace(so2 + ".new", so2)
    outside = os.path.join(base, "outside.so")
    with open(outside, "w") as f:
        f.write("outside")
    os.symlink(outside, os.path.join(cache, "00000000000000d1.so"))  # a symlink at an entry's name
    with open(os.path.join(cache, "README"), "w") as f:  # not the cache's
        f.write("keep")

    rc, out, _ = _cli(cache, "info")
    own = [n for n in os.listdir(cache) if re.fullmatch(r"[0-9a-f]{16}\.(so|kernel|fail)", n)
           and not os.path.islink(os.path.join(cache, n))]
    assert rc == 0 and f"directory: {cache}" in out and "trusted:   yes" in out
    assert re.search(r"kernels:\s+2\n", out) and re.search(r"failures:\s+1\n", out)
    assert f"({sum(os.path.getsize(os.path.join(cache, n)) for n in own)} bytes)" in out
    assert "limit:     512.0 MiB" in out

    rc, out, _ = _cli(cache, "list")
    listed = {line.split()[0]: line.split()[-1] for line in out.splitlines()}
    assert rc == 0 and listed == {h1: "library+record", h2: "library+record", h3: "failure",
                                  "00000000000000d1": "library"}

    rc, out, _ = _cli(cache, "verify")
    assert rc == 1 and "2 good, 2 bad" in out  # h1 and h3 (a failure record) good; h2 corrupt, d1 a symlink
    assert f"{h2}: the library's bytes do not hash to its record" in out
    assert "00000000000000d1: 00000000000000d1.so is a symlink" in out
    assert f"{h1}:" not in out and f"{h3}:" not in out
    assert os.path.exists(so2)  # a check removes nothing
    rc, out, _ = _cli(cache, "verify", "--remove")
    assert rc == 0 and "(removed)" in out
    assert not os.path.exists(so2) and not os.path.lexists(os.path.join(cache, "00000000000000d1.so"))
    assert open(outside).read() == "outside"

    rc, out, _ = _cli(cache, "clear")
    assert rc == 0 and out.startswith("removed ")
    assert sorted(os.listdir(cache)) == ["README"]
    rc, out, _ = _cli(cache, "info")
    assert re.search(r"kernels:\s+0\n", out) and "(0 bytes)" in out


def test_cli_reports_an_untrusted_dir_and_touches_nothing(base):
    cache = os.path.join(base, "open")
    os.mkdir(cache)
    os.chmod(cache, 0o777)
    p = os.path.join(cache, "00000000000000e1.so")
    with open(p, "w") as f:
        f.write("whoever wrote this")
    rc, out, _ = _cli(cache, "info")
    assert rc == 0 and f"trusted:   no: {cache} is writable by its group and others (mode 0777)" in out
    for cmd in ("list", "clear", "verify"):
        rc, _, err = _cli(cache, cmd)
        assert rc == 2 and "not trusted" in err, (cmd, err)
    assert os.listdir(cache) == ["00000000000000e1.so"]


def test_tier2_compilation_cache_names_the_directory(base):
    """TorchTPU's TORCH_TPU_TIER2_COMPILATION_CACHE is the per-host cache when TORCH_TPU_FUSE_CACHE_DIR is
    not set: a generated kernel lands there, and the next process loads it instead of building."""
    cache = os.path.join(base, "tier2")
    e = dict(os.environ, TORCH_TPU_TIER2_COMPILATION_CACHE=cache)
    e.pop("TORCH_TPU_FUSE_CACHE_DIR", None)
    e.pop("TORCH_TPU_LOG_LEVEL", None)
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _CHILD, "tanh"], env=e, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        _show_differs(r.stderr, f"tanh, tier 2 cache {cache}")
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert all(r["same"] for r in runs), runs
    assert runs[0]["builds"] == 1 and runs[1]["builds"] == 0 and runs[1]["runs"] >= 1
    assert any(n.endswith(".so") for n in os.listdir(cache))


@pytest.mark.parametrize("who", [WHO])
def test_tier3_shared_cache_serves_other_hosts_and_is_checked(base, evil_so, who):
    """TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT, a cache shared by many hosts: a kernel built on one host
    (its own per-host cache) is published there; a second host (an empty per-host cache) loads it from
    there instead of building, and copies it into its own cache, whose next process loads it locally.
    A shared root the user must not trust is not used: the kernel is built, nothing written there."""
    shared = os.path.join(base, "shared")
    host_a, host_b = os.path.join(base, "host_a"), os.path.join(base, "host_b")
    st, err = _child(host_a, TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=shared)
    assert st["same"] and st["builds"] == 1 and st["shared_stores"] == 1 and st["shared_loads"] == 0, (st, err[-2000:])
    assert sorted(os.path.splitext(n)[1] for n in os.listdir(os.path.join(shared, "fused"))) == [".kernel", ".so"]
    st, err = _child(host_b, TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=shared)
    assert st["same"] and st["runs"] >= 1 and st["builds"] == 0 and st["shared_loads"] == 1 and st["loads"] == 0, (st, err[-2000:])
    assert sorted(os.listdir(host_b)) == sorted(os.listdir(os.path.join(shared, "fused")))
    st, err = _child(host_b, TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=shared)
    assert st["same"] and st["builds"] == 0 and st["loads"] == 1 and st["shared_loads"] == 0, (st, err[-2000:])

    foreign = os.path.join(base, "drop", "shared")
    _foreign_dir(foreign, evil_so)
    before = _snapshot(foreign)
    st, err = _child(os.path.join(base, "host_c"), TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=foreign)
    assert st["same"] and st["builds"] == 1 and st["shared_loads"] == 0 and st["shared_stores"] == 0, (st, err[-2000:])
    assert _snapshot(foreign) == before and not os.path.exists(os.path.join(base, "marker"))
    assert "kernel cache: not using " + foreign in err
