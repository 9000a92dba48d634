"""The on-disk cache of generated kernels (DeferAndFuse's compiled chains): `python -m torch_tpu.cache`.

    python -m torch_tpu.cache info            where it is, whether the runtime trusts it (and why not), its size
    python -m torch_tpu.cache list            its entries, least recently used first
    python -m torch_tpu.cache clear           removes the cache's own files (nothing else in the directory)
    python -m torch_tpu.cache verify [--remove]   checks every entry's owner, mode and content hash

`--dir DIR` looks at DIR instead of TORCH_TPU_FUSE_CACHE_DIR (default ~/.cache/torch_tpu/fused). The rules
(what is trusted, what is the cache's own) are the runtime's, in C (runtime/compiler/cache.c, through
torch_tpu._C); this module only prints. See README, "Security".
"""
import argparse
import os
import sys
import time

__all__ = ["info", "entries", "clear", "verify"]


def _c():
    from torch_tpu import _C
    return _C


def info() -> dict:
    """dir, exists, trusted, why (when not trusted), kernels, failures, bytes, limit_bytes."""
    return _c()._kernel_cache_info()


def entries() -> list:
    """One dict per entry (name, library, record, failure, bytes, last_used), least recently used first.
    RuntimeError when the directory is not trusted."""
    return _c()._kernel_cache_list()


def clear() -> int:
    """Removes the cache's own files; how many. RuntimeError when the directory is not trusted."""
    return _c()._kernel_cache_clear()


def verify(remove: bool = False):
    """(good entry count, [bad entries, each with its 'problem']); bad ones removed when `remove`."""
    return _c()._kernel_cache_verify(remove)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _kinds(e: dict) -> str:
    return "+".join(k for k, f in (("library", "library"), ("record", "record"), ("failure", "failure")) if e[f])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_tpu.cache", description=__doc__.split("\n")[0])
    p.add_argument("--dir", help="the cache directory (default: TORCH_TPU_FUSE_CACHE_DIR, else ~/.cache/torch_tpu/fused)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="where the cache is, whether it is trusted, its size and limit")
    sub.add_parser("list", help="its entries, least recently used first")
    sub.add_parser("clear", help="remove the cache's own files")
    v = sub.add_parser("verify", help="check every entry (owner, mode, record, content hash)")
    v.add_argument("--remove", action="store_true", help="remove the bad entries")
    args = p.parse_args(argv)
    if args.dir is not None:
        os.environ["TORCH_TPU_FUSE_CACHE_DIR"] = args.dir  # read by the runtime at each use

    if args.command == "info":
        i = info()
        if not i["dir"]:
            print("directory: none (TORCH_TPU_FUSE_CACHE_DIR is set but empty, or no HOME)")
            return 0
        print(f"directory: {i['dir']}")
        if not i["exists"]:
            print("trusted:   not created yet (it will be, mode 0700, at the first build)")
        elif i["trusted"]:
            print("trusted:   yes")
        else:
            print(f"trusted:   no: {i['why']}")
        print(f"kernels:   {i['kernels']}")
        print(f"failures:  {i['failures']}")
        print(f"size:      {_size(i['bytes'])} ({i['bytes']} bytes)")
        print(f"limit:     {_size(i['limit_bytes'])} (TORCH_TPU_FUSE_CACHE_MAX_MB)")
        return 0
    try:
        if args.command == "list":
            for e in entries():
                used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["last_used"]))
                print(f"{e['name']}  {e['bytes']:>10}  {used}  {_kinds(e)}")
        elif args.command == "clear":
            print(f"removed {clear()} files")
        else:
            good, bad = verify(args.remove)
            for e in bad:
                print(f"{e['name']}: {e['problem']}{' (removed)' if args.remove else ''}")
            print(f"{good} good, {len(bad)} bad")
            return 1 if bad and not args.remove else 0
    except RuntimeError as err:
        print(f"torch_tpu.cache: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
