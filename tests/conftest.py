"""Shared pytest setup: which device the tests run on, the --full switch for the
heavy sets, and the end-of-session report of the OpInfo harness.

`--device cpu` (or TORCH_TPU_TEST_DEVICE=cpu) runs the device tests against
PyTorch CPU itself; that checks the test code, not the device.
"""
import os
import pathlib
import time

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPINFO_REPORT = ROOT / "build" / "opinfo_report.md"
_SESSION_START = time.time()


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="run the heavy sets too (also TORCH_TPU_TEST_FULL=1)")
    parser.addoption("--device", action="store", default=None,
                     help="device under test: tpu (default) or cpu to check the tests "
                          "themselves (also TORCH_TPU_TEST_DEVICE)")


def pytest_configure(config):
    config.addinivalue_line("markers", "tpu: needs the device under test (the `device` fixture)")
    config.addinivalue_line("markers", "full: heavy; runs only with --full or TORCH_TPU_TEST_FULL=1")


def is_full(config) -> bool:
    return bool(config.getoption("--full")) or os.environ.get("TORCH_TPU_TEST_FULL", "") not in ("", "0")


def device_name(config) -> str:
    return config.getoption("--device") or os.environ.get("TORCH_TPU_TEST_DEVICE") or "tpu"


def pytest_collection_modifyitems(config, items):
    # Heavy tests are deselected by default, and the summary says how many,
    # so nothing is skipped silently.
    for item in items:  # `-m "not tpu"` selects the tests that need no device
        if {"device", "tpu"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.tpu)
    if is_full(config):
        return
    kept, heavy = [], []
    for item in items:
        (heavy if item.get_closest_marker("full") else kept).append(item)
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = kept
        config._tpu_heavy_deselected = len(heavy)


@pytest.fixture(autouse=True)
def _fixed_seed():
    """Every test starts from the same global RNG state, so its random inputs are the same on every
    run: a comparison with PyTorch CPU allows an ulp or so of a transcendental, which an unlucky
    random input (a cancellation under a sqrt) can amplify past the tolerance once in many runs."""
    torch.manual_seed(0)


def sync(device) -> None:
    """Waits for all queued work on `device` (a no-op on CPU)."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return
    mod = getattr(torch, dev.type, None)
    if mod is not None and hasattr(mod, "synchronize"):
        mod.synchronize()


_device_error = None


def load_device(name):
    """Autoload (an installed torch_tpu) normally registered the device; from a
    checkout without `pip install -e .`, import torch_tpu from the tree."""
    dev_type = name.split(":")[0]
    if dev_type != "cpu" and not hasattr(torch, dev_type):
        import sys
        try:
            import torch_tpu  # noqa: F401  (on PYTHONPATH)
        except ImportError:
            sys.path.insert(0, str(ROOT))
            import torch_tpu  # noqa: F401


@pytest.fixture(scope="session")
def device(pytestconfig):
    """The device string under test ("tpu" by default). Fails (does not skip)
    when the device cannot run a trivial op, naming the cause."""
    global _device_error
    name = device_name(pytestconfig)
    if name != "cpu":
        if _device_error is None:
            try:
                load_device(name)
                t = torch.ones(2, device=name) + 1
                sync(name)
                if t.cpu().tolist() != [2.0, 2.0]:
                    _device_error = f"torch.ones(2, device={name!r}) + 1 gave {t.cpu().tolist()}"
                else:
                    _device_error = ""
            except Exception as e:  # noqa: BLE001 - reported as the reason
                _device_error = f"{type(e).__name__}: {e}"
        if _device_error:
            pytest.fail(f"device {name!r} is not usable: {_device_error}", pytrace=False)
    return name


@pytest.fixture(scope="session")
def tpu(device):
    """torch.device under test (tpu unless --device says otherwise)."""
    return torch.device(device)


@pytest.fixture(scope="session")
def full(pytestconfig) -> bool:
    return is_full(pytestconfig)


EAGER_MODES = ("strict", "debug", "defer_and_fuse")


@pytest.fixture(params=EAGER_MODES)
def eager_mode(request, device):
    """Runs the test in each of the three eager modes: the model-level tests use it, so every
    model trains and generates in Strict, Debug and DeferAndFuse against the same CPU reference.
    Switching synchronizes first; the previous mode comes back after the test."""
    if device == "cpu" and request.param != "strict":
        pytest.skip("eager modes are the tpu's")
    if device == "cpu":
        yield request.param
        return
    import torch_tpu
    prev = torch_tpu.get_eager_mode()
    torch_tpu.set_eager_mode(request.param)
    try:
        yield request.param
    finally:
        torch_tpu.set_eager_mode(prev)


@pytest.fixture
def synchronize(device):
    return lambda: sync(device)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "_tpu_heavy_deselected", 0)
    if n:
        terminalreporter.write_line(f"{n} heavy tests not run (use --full or TORCH_TPU_TEST_FULL=1)")
    summary = getattr(config, "_tpu_opinfo_summary", None)
    if summary:
        terminalreporter.section("OpInfo harness (full table: build/opinfo_report.md)")
        for line in summary.splitlines():
            terminalreporter.write_line(line)
