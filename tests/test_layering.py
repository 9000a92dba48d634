"""The runtime's layering, drawn from its #include lines and checked (README, "Architecture"):

    include/tpurt  <-  base  <-  hal  <-  exec
                          ^               |
                          +-- ops <-- compiler

Each folder of runtime/ may include only the folders this table allows, so the include graph has no
loop between ops/ and exec/ or between compiler/ and exec/, and each eager mode's room (exec/strict,
exec/debug, exec/defer) stays out of the others'.
"""
import pathlib
import re

import pytest

RUNTIME = pathlib.Path(__file__).resolve().parent.parent / "runtime"

# folder -> folders its files may include (its own always allowed)
ALLOWED = {
    "include": {"include"},
    "base": {"include"},
    "hal": {"include", "base"},
    "ops": {"include", "base"},
    "compiler": {"include", "base", "ops"},
    "dist": {"include", "base"},
    "exec": {"include", "base", "hal", "ops", "compiler"},
}
MODE_ROOMS = ("exec/strict", "exec/debug", "exec/defer")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _layer(rel):
    """The layer of a runtime-relative path ("exec/queue.c" -> "exec"; "tpurt/x.h" -> "include")."""
    top = rel.split("/", 1)[0]
    return "include" if top in ("include", "tpurt") else top


def _edges():
    for path in sorted(RUNTIME.rglob("*")):
        if path.suffix not in (".c", ".h") or "tests" in path.relative_to(RUNTIME).parts:
            continue
        rel = path.relative_to(RUNTIME).as_posix()
        for target in INCLUDE.findall(path.read_text()):
            yield rel, target


def test_every_include_respects_the_layers():
    bad = []
    for src, target in _edges():
        if target.startswith("test_"):
            continue
        src_layer, dst_layer = _layer(src), _layer(target)
        if dst_layer not in ALLOWED or src_layer not in ALLOWED:
            bad.append(f"{src} -> {target}: unknown layer")
        elif dst_layer != src_layer and dst_layer not in ALLOWED[src_layer]:
            bad.append(f"{src} -> {target}")
    assert not bad, "includes that break the layering:\n" + "\n".join(bad)


def test_mode_rooms_stay_apart():
    bad = []
    for src, target in _edges():
        for room in MODE_ROOMS:
            if target.startswith(room + "/") and not src.startswith(room + "/"):
                bad.append(f"{src} -> {target}")
    assert not bad, "a mode's room included from outside it:\n" + "\n".join(bad)


def test_no_include_cycle_between_folders():
    graph = {}
    for src, target in _edges():
        a, b = _layer(src), _layer(target)
        if a != b:
            graph.setdefault(a, set()).add(b)
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            pytest.fail("include cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in seen:
            return
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_checker_sees_a_bad_include(tmp_path, monkeypatch):
    """The check can fail: an ops/ file including exec/ is reported."""
    fake = tmp_path / "runtime"
    (fake / "ops").mkdir(parents=True)
    (fake / "exec").mkdir()
    (fake / "ops" / "bad.c").write_text('#include "exec/queue.h"\n')
    (fake / "exec" / "queue.h").write_text('#include "ops/x.h"\n')
    monkeypatch.setattr(__import__(__name__), "RUNTIME", fake)
    with pytest.raises(AssertionError, match="ops/bad.c -> exec/queue.h"):
        test_every_include_respects_the_layers()
    with pytest.raises(pytest.fail.Exception, match="include cycle"):
        test_no_include_cycle_between_folders()
