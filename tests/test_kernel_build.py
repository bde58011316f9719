"""Tests for the Python side of the native kernel: its build (cache key, flags, OpenMP fallback, failures), the one
place that picks the implementation (`hf_entmax.kernels.dispatch`) and `describe()`, what the kernels share with the
PyTorch implementation and how the flat modeling files import them. Builds are mocked where the test is about the
Python logic; the kernel itself is tested in tests/test_kernels.py."""

import importlib.util
import logging
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
import torch

from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.kernels import build, cpu, describe, dispatch
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling.entmax import MAX_NEWTON_STEPS, NEWTON_TOLERANCE_EPS, entmax


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """No kernel status yet (the next call decides it again) and an empty cache in tmp_path."""
    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setenv("HF_ENTMAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_ENTMAX_NATIVE", raising=False)
    monkeypatch.delenv("HF_ENTMAX_MARCH", raising=False)
    return tmp_path


@pytest.fixture
def fake_compiler(monkeypatch):
    """A compiler identity that asks no compiler, so that cache keys can be computed without one."""
    monkeypatch.setattr(build, "compiler_identity", lambda: ("/usr/bin/g++-12", "g++ (Debian 12.2.0) 12.2.0"))


class FakeLoad:
    """Stands in for `torch.utils.cpp_extension.load`: records each call; the first ``failures`` calls raise."""

    def __init__(self, failures: int, message: str = "c++: error: unrecognized command-line option '-fopenmp'"):
        self.failures = failures
        self.message = message
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        if len(self.calls) <= self.failures:
            raise RuntimeError(f"Error building extension '{kwargs['name']}':\n[1/4] c++ -MMD ...\n{self.message}\n")


def install_fake_load(monkeypatch, fake: FakeLoad, ops_loaded: bool = True) -> None:
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load", fake)
    monkeypatch.setattr(build, "_ops_loaded", lambda: ops_loaded)


# ---- The build's name (the cache key) -------------------------------------------------------------------------------


def test_build_name_digests_every_source_file(fake_compiler, monkeypatch, tmp_path):
    """A change to any file of the kernel's source, header or not, gives another build: an old binary is never loaded
    for a new source."""
    sources = tmp_path / "csrc"
    shutil.copytree(build.SOURCE_DIRECTORY, sources)
    monkeypatch.setattr(build, "SOURCE_DIRECTORY", sources)
    flags = build.compiler_flags()
    names = [build.build_name(flags)]
    for path in sorted(sources.iterdir()):
        path.write_text(path.read_text() + "\n// changed\n")
        names.append(build.build_name(flags))
    (sources / "extra.h").write_text("#pragma once\n")
    names.append(build.build_name(flags))
    assert len(set(names)) == len(names)
    assert {path.suffix for path in sources.iterdir()} == {".cpp", ".h"}  # both kinds were changed above


def test_build_name_changes_with_compiler_cpu_flags_machine_and_torch(fake_compiler, monkeypatch):
    """Two machines that share a cache (a network home, a CI cache) load each other's build only if nothing the
    binary depends on differs: the compiler, the CPU's features, the flags, the machine, the torch version."""
    flags = build.compiler_flags()
    reference = build.build_name(flags)
    features = build.cpu_features()
    changes = [
        (build, "compiler_identity", lambda: ("/usr/bin/clang++-17", "clang version 17.0.6")),
        (build, "compiler_identity", lambda: ("/usr/bin/g++-12", "g++ (Debian 12.2.1) 12.2.1")),
        (build, "cpu_features", lambda: features + " avx512_fp16"),
        (build.platform, "machine", lambda: "aarch64"),
        (torch, "__version__", "2.6.0"),
    ]
    for owner, name, value in changes:
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, value)
            assert build.build_name(flags) != reference, name
    assert build.build_name(build.compiler_flags(openmp=False)) != reference
    assert build.build_name(flags) == reference


def test_build_target_comes_from_hf_entmax_march_and_names_the_build(fake_compiler, monkeypatch):
    """CI builds the kernel twice, for this machine and for the baseline x86-64 (no AVX2): each build has its own name,
    so neither is loaded for the other."""
    monkeypatch.delenv("HF_ENTMAX_MARCH", raising=False)
    native = build.compiler_flags()
    monkeypatch.setenv("HF_ENTMAX_MARCH", "x86-64")
    baseline = build.compiler_flags()
    assert "-march=native" in native and "-march=x86-64" in baseline and "-march=native" not in baseline
    assert build.build_name(baseline) != build.build_name(native)
    assert "-fopenmp" in native and "-fopenmp-simd" in build.compiler_flags(openmp=False)
    monkeypatch.setenv("HF_ENTMAX_MARCH", "x86-64 -O0")
    with pytest.raises(HfEntmaxValueError, match=r"HF_ENTMAX_MARCH must be a -march value .*, got 'x86-64 -O0'"):
        build.compiler_flags()


def test_compiler_identity_is_its_path_and_version_asked_once(monkeypatch, tmp_path):
    script = tmp_path / "my-c++"
    script.write_text("#!/bin/sh\necho 'my-c++ 1.2.3'\necho 'Copyright nobody'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    runs = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: runs.append(args) or real_run(*args, **kwargs))
    monkeypatch.setenv("CXX", str(script))
    build._compiler_identity.cache_clear()
    try:
        assert build.compiler_identity() == (os.path.realpath(script), "my-c++ 1.2.3\nCopyright nobody")
        assert build.compiler_identity() == (os.path.realpath(script), "my-c++ 1.2.3\nCopyright nobody")
        assert len(runs) == 1
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        assert build.compiler_identity() == (str(tmp_path / "no-such-compiler"), "not found")
    finally:
        build._compiler_identity.cache_clear()


def test_cpu_features_on_linux_x86_and_arm_macos_and_elsewhere(monkeypatch, tmp_path):
    """The whole feature list on every OS: x86 Linux calls its line ``flags``, Arm Linux ``Features`` (one per core,
    which may differ on big.LITTLE CPUs), macOS has no /proc but sysctl; elsewhere platform.processor()."""
    read_features = build.cpu_features.__wrapped__  # past the per-process cache
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(build, "CPUINFO", cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2\n")
    assert read_features() == "flags\t\t: fpu sse2 avx2"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd\n\nprocessor\t: 4\nFeatures\t: fp asimd sve\n")
    assert read_features() == "Features\t: fp asimd\nFeatures\t: fp asimd sve"

    cpuinfo.unlink()
    sysctl = {"machdep.cpu.features": "machdep.cpu.features: FPU SSE2", "hw.optional": "hw.optional.avx2_0: 1"}
    monkeypatch.setattr(build, "_sysctl", lambda name: sysctl.get(name, ""))
    monkeypatch.setattr(build.platform, "system", lambda: "Darwin")
    assert read_features() == "machdep.cpu.features: FPU SSE2\nhw.optional.avx2_0: 1"
    monkeypatch.setattr(build.platform, "system", lambda: "Windows")
    monkeypatch.setattr(build.platform, "processor", lambda: "Intel64 Family 6 Model 85")
    assert read_features() == "Intel64 Family 6 Model 85"


# ---- Building and loading -------------------------------------------------------------------------------------------


def test_build_compiles_every_source_file_with_openmp_first(fake_compiler, fresh_build, monkeypatch):
    fake = FakeLoad(failures=0)
    install_fake_load(monkeypatch, fake)
    status = build.kernel_status()
    assert status.available and status.openmp and status.flags == build.compiler_flags()
    (call,) = fake.calls
    compiled = sorted(os.path.basename(source) for source in call["sources"])
    assert compiled == sorted(path.name for path in build.SOURCE_DIRECTORY.glob("*.cpp")) and len(compiled) > 1
    assert "-fopenmp" in call["extra_cflags"] and call["extra_ldflags"] == ["-fopenmp"]
    assert call["name"] == build.build_name(status.flags)
    assert call["build_directory"] == str(fresh_build / "cache" / call["name"])


def test_openmp_fallback_when_the_first_build_fails(fake_compiler, fresh_build, monkeypatch, caplog):
    """A compiler without OpenMP (Apple's clang): the build is retried with -fopenmp-simd only and runs on one
    thread, and says so."""
    fake = FakeLoad(failures=1)
    install_fake_load(monkeypatch, fake)
    with caplog.at_level(logging.INFO, logger="hf_entmax"):
        status = build.kernel_status()
    assert status.available and not status.openmp
    first, second = fake.calls
    assert "-fopenmp" in first["extra_cflags"] and first["extra_ldflags"] == ["-fopenmp"]
    assert "-fopenmp" not in second["extra_cflags"] and "-fopenmp-simd" in second["extra_cflags"]
    assert second["extra_ldflags"] == []
    assert status.flags == second["extra_cflags"] and first["name"] != second["name"]
    assert "without OpenMP" in caplog.text and "unrecognized command-line option '-fopenmp'" in caplog.text
    assert build.kernel_status() is status and len(fake.calls) == 2  # decided once per process


def test_a_cached_build_without_openmp_is_loaded_without_trying_openmp_again(fake_compiler, fresh_build, monkeypatch):
    """Where the OpenMP build failed once, later processes load the build without OpenMP: no failing compile each."""
    fake = FakeLoad(failures=0)
    install_fake_load(monkeypatch, fake)
    library = build.library_path(build.compiler_flags(openmp=False))
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    loaded = []
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    status = build.kernel_status()
    assert status.available and not status.openmp and status.library == library
    assert loaded == [str(library)] and fake.calls == []


def test_failed_build_warns_once_with_the_compilers_error_and_falls_back(fake_compiler, fresh_build, monkeypatch):
    fake = FakeLoad(failures=2, message="ops.cpp:12:3: error: 'foo' was not declared in this scope")
    install_fake_load(monkeypatch, fake, ops_loaded=False)
    scores = torch.randn(4, 10)
    with pytest.warns(UserWarning, match=r"fast CPU kernel could not be built .*'foo' was not declared"):
        assert dispatch.native_entmax(scores, 1.5, 1) is None
    assert dispatch.native_entmax(scores, 1.5, 1) is None  # no second attempt, no second warning
    assert len(fake.calls) == 2
    status = build.kernel_status()
    assert not status.available and "error: 'foo' was not declared" in status.error
    assert "[1/4]" not in status.error  # the compiler's error, not ninja's command line
    monkeypatch.setattr(entmax_module, "native_entmax", dispatch.native_entmax)
    torch.testing.assert_close(entmax(scores, 1.5).sum(-1), torch.ones(4))


def test_native_kernel_can_be_turned_off(fresh_build, monkeypatch):
    monkeypatch.setenv("HF_ENTMAX_NATIVE", "0")
    fake = FakeLoad(failures=0)
    install_fake_load(monkeypatch, fake)
    assert not build.kernel_available() and build.kernel_status().disabled
    assert dispatch.native_entmax(torch.randn(2, 5), 1.5, 1) is None
    assert fake.calls == []


# ---- The routes: which implementation runs, and why -----------------------------------------------------------------


@pytest.fixture
def kernel_loaded(monkeypatch):
    """The routes as on a machine where the kernel is loaded (without loading it)."""
    monkeypatch.setattr(build, "_state", {"status": build.KernelStatus(available=True)})


def test_mapping_route_is_native_for_cpu_tensors_only(kernel_loaded):
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        route = dispatch.mapping_route(torch.randn(2, 3).to(dtype))
        assert route.native and route.implementation == "native CPU kernel", dtype
    meta = dispatch.mapping_route(torch.empty(2, 3, device="meta"))
    assert not meta.native and meta.implementation == "PyTorch" and "not on the CPU" in meta.reason
    empty = dispatch.mapping_route(torch.empty(2, 0))
    assert not empty.native and "empty" in empty.reason


def test_attention_route_names_each_reason_for_pytorch(kernel_loaded):
    query, key, value = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mask = torch.zeros(1, 1, 3, 5)
    assert dispatch.attention_route(query, key, value, mask).native
    assert dispatch.attention_route(query.double(), key.double(), value.double(), None).native
    cases = {
        "not on the CPU": (query, key.to("meta"), value, mask),
        "float32/float64": (query.half(), key.half(), value.half(), mask.half()),
        "one dtype": (query, key, value.double(), mask),
        "gradient": (query, key, value, mask.requires_grad_()),
        "empty": (query, key[:, :, :0], value[:, :, :0], None),
    }
    for reason, tensors in cases.items():
        route = dispatch.attention_route(*tensors)
        assert not route.native and reason in route.reason, (reason, route)
        assert route.implementation.startswith("PyTorch operations")


def test_routes_without_the_kernel_say_why(monkeypatch):
    monkeypatch.setattr(build, "_state", {"status": build.KernelStatus(available=False, disabled=True)})
    route = dispatch.mapping_route(torch.randn(2, 3))
    assert not route.native and "HF_ENTMAX_NATIVE=0" in route.reason
    monkeypatch.setattr(build, "_state", {"status": build.KernelStatus(available=False, error="RuntimeError: x")})
    route = dispatch.attention_route(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2))
    assert not route.native and "could not be built" in route.reason


def test_first_call_of_each_route_logs_one_line(kernel_loaded, monkeypatch, caplog):
    mapping = dispatch.mapping_route(torch.randn(2, 3))
    not_cpu = dispatch.mapping_route(torch.empty(2, 3, device="meta"))
    for route in (mapping, not_cpu):
        monkeypatch.setattr(route, "announced", False)
    with caplog.at_level(logging.INFO, logger="hf_entmax"):
        for _ in range(3):
            dispatch.mapping_route(torch.randn(2, 3))
            dispatch.mapping_route(torch.empty(2, 3, device="meta"))
    assert [record.getMessage() for record in caplog.records] == [f"hf_entmax: {mapping}", f"hf_entmax: {not_cpu}"]
    first, second = (record.getMessage() for record in caplog.records)
    assert first.endswith(": native CPU kernel (CPU tensors, half precision computed in float32)")
    assert second.endswith(": PyTorch (the tensors are not on the CPU, the kernel is CPU only)")


# ---- What the kernels share with the PyTorch implementation, and how the flat files import them ------------------


def native_constant(name: str) -> str:
    """The expression a constant of csrc/constants.h is defined by."""
    header = (build.SOURCE_DIRECTORY / "constants.h").read_text(encoding="utf-8")
    match = re.search(rf"constexpr \w+ {name} = ([^;]+);", header)
    assert match, f"{name} is not defined in csrc/constants.h"
    return match.group(1)


def test_the_native_solvers_constants_are_the_pytorch_implementations_or_differ_as_stated():
    """The C++ cannot import entmax.py's constants, so csrc/constants.h states how each of its counterparts relates
    to them, and this checks it: the same cap on Newton's passes; a mass tolerance of 2ε, tighter than the reference's
    on purpose (the kernel also stops where a step stalls), from which tests/test_kernels.py derives its bounds."""
    assert int(native_constant("kMaxNewtonPasses")) == MAX_NEWTON_STEPS
    tolerance = re.fullmatch(r"(\d+) \* std::numeric_limits<T>::epsilon\(\)", native_constant("kMassTolerance"))
    assert tolerance and int(tolerance.group(1)) == 2 < NEWTON_TOLERANCE_EPS


@pytest.mark.parametrize(
    ("missing", "also_unloaded"),
    [
        ("hf_entmax", ("hf_entmax.kernels", "hf_entmax.kernels.dispatch")),  # a Hub folder's copy without hf_entmax
        ("hf_entmax.kernels.dispatch", ()),  # an hf_entmax without these kernels
    ],
)
def test_the_flat_entmax_file_runs_pytorch_where_hf_entmax_is_missing(monkeypatch, missing, also_unloaded):
    """entmax.py as a model folder runs it (a copy, not the package's module): without hf_entmax, its kernel entries
    are None and its functions run PyTorch."""
    for name in also_unloaded:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # importing it raises ModuleNotFoundError naming it
    spec = importlib.util.spec_from_file_location("flat_entmax", entmax_module.__file__)
    flat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flat)
    assert flat.native_entmax is None and flat.native_entmax_attention is None
    torch.testing.assert_close(flat.entmax(torch.tensor([[0.0, 1.0, 5.0]]), 1.5), torch.tensor([[0.0, 0.0, 1.0]]))


def test_an_import_error_inside_the_kernels_is_not_swallowed():
    """Only a missing hf_entmax falls back: a module missing inside the kernels, or a name one of them no longer
    defines, fails `import hf_entmax` instead of sending every call to the slow path unseen. Each case in a fresh
    interpreter (both at once), since it must import hf_entmax anew."""
    cases = {
        "sys.modules['hf_entmax.kernels.build'] = None": "ModuleNotFoundError: import of hf_entmax.kernels.build",
        "sys.modules['hf_entmax.kernels.build'] = types.ModuleType('hf_entmax.kernels.build')": (
            "ImportError: cannot import name"
        ),
    }
    script = (
        "import sys, types\n{}\n"
        "try:\n    import hf_entmax\nexcept ImportError as error:\n    print(f'{{type(error).__name__}}: {{error}}')\n"
    )
    runs = {
        setup: subprocess.Popen(
            [sys.executable, "-c", script.format(setup)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for setup in cases
    }
    for setup, expected in cases.items():
        stdout, stderr = runs[setup].communicate(timeout=300)
        assert runs[setup].returncode == 0, stderr
        assert stdout.startswith(expected), (setup, stdout, stderr[-2000:])


# ---- describe() -----------------------------------------------------------------------------------------------------


def test_describe_names_pytorch_and_the_reason_without_the_kernel(fake_compiler, monkeypatch):
    monkeypatch.setattr(build, "_state", {"status": build.KernelStatus(available=False, disabled=True)})
    text = describe()
    assert "mapping on CPU tensors: PyTorch (the kernel is turned off by HF_ENTMAX_NATIVE=0)" in text
    assert "attention on CPU tensors: PyTorch operations" in text
    failed = build.KernelStatus(available=False, flags=["-O3", "-march=native"], error="RuntimeError: no ninja")
    monkeypatch.setattr(build, "_state", {"status": failed})
    text = describe()
    assert "could not be built" in text and "RuntimeError: no ninja" in text and "-march=native" in text
    assert "/usr/bin/g++-12 (g++ (Debian 12.2.0) 12.2.0)" in text


@pytest.mark.skipif(not build.kernel_available(), reason="the native CPU kernel could not be built here")
def test_describe_names_the_kernel_its_build_and_its_cache():
    text = describe()
    status = build.kernel_status()
    assert "mapping on CPU tensors: native CPU kernel" in text
    assert "attention on CPU tensors: fused native CPU kernel" in text
    assert " ".join(status.flags) in text and str(status.library.parent) in text
    assert ("OpenMP threads" if status.openmp else "one thread") in text
    assert "vector instructions: " in text


@pytest.mark.skipif(
    os.environ.get("HF_ENTMAX_REQUIRE_KERNEL") != "1", reason="only where the kernel must build (CI sets it)"
)
def test_the_kernel_builds_where_it_must():
    """The kernel tests skip on a machine without a compiler; CI must not pass by skipping them, so there a build
    that fails is a failure (``HF_ENTMAX_REQUIRE_KERNEL=1``, with ``HF_ENTMAX_REQUIRE_OPENMP=0|1`` to say which
    build is expected)."""
    assert cpu.kernel_available(), describe()
    openmp = os.environ.get("HF_ENTMAX_REQUIRE_OPENMP")
    if openmp is not None:
        assert ("OpenMP threads" in describe()) == (openmp == "1"), describe()
