"""Building and loading the native CPU kernel (the C++ in ``csrc/``), once per machine.

The kernel is compiled on first use with the machine's C++ compiler through `torch.utils.cpp_extension` into
``$HF_ENTMAX_CACHE`` (default ``~/.cache/hf_entmax``), under a name that digests everything the binary depends on:
every source file, the flags, the torch version, the compiler (its path and ``--version``), ``platform.machine()`` and
the CPU's full feature list. A ``-march=native`` build runs only on CPUs like the one that built it, so machines that
share a cache (a network home, a CI cache) never load each other's builds.

It is built for ``-march=$HF_ENTMAX_MARCH`` (default ``native``; ``x86-64`` gives a baseline build without AVX2), with
OpenMP where the compiler has it; where ``-fopenmp`` fails the build is retried with ``-fopenmp-simd`` only (the
vectorisation hints without the OpenMP runtime), which solves the rows on one thread. If that fails too, or there is no
compiler, one warning says so and the PyTorch implementation runs. ``HF_ENTMAX_NATIVE=0`` turns the kernel off.
"""

import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import HfEntmaxValueError


SOURCE_DIRECTORY = Path(__file__).parent / "csrc"
CPUINFO = Path("/proc/cpuinfo")  # Linux
# -fno-trapping-math lets GCC vectorise the branch-free exp/log (they evaluate both arms of a select).
BASE_COMPILER_FLAGS = ["-O3", "-fno-trapping-math", "-fno-math-errno"]
# With OpenMP, and without it where the compiler lacks it: -fopenmp-simd keeps the `#pragma omp simd` loops vectorised.
OPENMP_FLAG = "-fopenmp"
NO_OPENMP_FLAG = "-fopenmp-simd"


@dataclass
class KernelStatus:
    """Whether the kernel is loaded, and what it was built from (or why it is not there).

    Attributes:
        available: The kernel's ops are loaded.
        disabled: ``HF_ENTMAX_NATIVE=0`` turned the kernel off (no build was tried).
        flags: The compiler flags of the loaded build, or of the last build tried.
        openmp: The loaded build uses OpenMP threads.
        library: The loaded shared library.
        error: Why the build failed (``Type: message``), empty otherwise.
    """

    available: bool
    disabled: bool = False
    flags: list[str] = field(default_factory=list)
    openmp: bool = False
    library: Path | None = None
    error: str = ""


_state: dict[str, KernelStatus] = {}
logger = logging.getLogger("hf_entmax")


def source_files() -> list[Path]:
    """Every file of the kernel's source (the ``.cpp`` files it compiles and the headers they include), by name."""
    return sorted(path for path in SOURCE_DIRECTORY.iterdir() if path.suffix in (".cpp", ".h"))


def compiler_flags(openmp: bool = True) -> list[str]:
    """The flags the kernel is built with: ``-march`` from ``HF_ENTMAX_MARCH`` (default ``native``), with OpenMP or,
    for ``openmp=False``, only its SIMD directives."""
    march = os.environ.get("HF_ENTMAX_MARCH", "native")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", march):
        raise HfEntmaxValueError(
            f"HF_ENTMAX_MARCH must be a -march value of the C++ compiler such as native or x86-64, got {march!r}"
        )
    return [*BASE_COMPILER_FLAGS, OPENMP_FLAG if openmp else NO_OPENMP_FLAG, f"-march={march}"]


def compiler() -> str:
    """The C++ compiler that `torch.utils.cpp_extension` builds with: ``$CXX``, or ``c++`` (``cl`` on Windows)."""
    return os.environ.get("CXX", "cl" if platform.system() == "Windows" else "c++")


@functools.cache
def _compiler_identity(command: str) -> tuple[str, str]:
    path = shutil.which(command)
    if path is None:
        return command, "not found"
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
        version = (result.stdout or result.stderr).strip()
    except (OSError, subprocess.SubprocessError) as error:
        version = f"no version ({type(error).__name__})"
    return os.path.realpath(path), version


def compiler_identity() -> tuple[str, str]:
    """``(path, version)``: the compiler's resolved path and its ``--version`` output ("not found" where there is no
    such compiler), asked once per process and compiler."""
    return _compiler_identity(compiler())


def _sysctl(name: str) -> str:
    try:
        result = subprocess.run(["sysctl", name], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


@functools.cache
def cpu_features() -> str:
    """The CPU's full feature list, on every OS where it can be read, else ``platform.processor()``.

    Linux: every distinct ``flags`` (x86) or ``Features`` (Arm) line of ``/proc/cpuinfo``. macOS: ``sysctl``'s
    ``machdep.cpu.features`` and ``machdep.cpu.leaf7_features`` (Intel) and ``hw.optional`` (every CPU, Apple silicon's
    ``hw.optional.arm.FEAT_*`` included).
    """
    lines: list[str] = []
    try:
        for line in CPUINFO.read_text().splitlines():
            if line.split(":")[0].strip().lower() in ("flags", "features") and line not in lines:
                lines.append(line)
    except OSError:
        pass
    if not lines and platform.system() == "Darwin":
        names = ("machdep.cpu.features", "machdep.cpu.leaf7_features", "hw.optional")
        lines = [text for name in names if (text := _sysctl(name))]
    return "\n".join(lines) or platform.processor()


def build_name(flags: list[str]) -> str:
    """The name of the kernel's build with ``flags``: a digest of every source file, the flags, the torch version, the
    compiler, the machine and its CPU features."""
    digest = hashlib.sha256()
    for path in source_files():
        source = path.read_bytes()
        digest.update(f"{path.name}\0{len(source)}\0".encode())
        digest.update(source)
    key = [platform.machine(), *compiler_identity(), torch.__version__, " ".join(flags), cpu_features()]
    digest.update("\0".join(key).encode())
    return f"hf_entmax_cpu_{digest.hexdigest()[:16]}"


def cache_directory() -> Path:
    """Where the builds are kept: ``$HF_ENTMAX_CACHE``, default ``~/.cache/hf_entmax``."""
    return Path(os.environ.get("HF_ENTMAX_CACHE", Path.home() / ".cache" / "hf_entmax"))


def library_path(flags: list[str]) -> Path:
    """The shared library of the build with ``flags``, there or not."""
    name = build_name(flags)
    return cache_directory() / name / f"{name}.so"


def _compile(flags: list[str], openmp: bool) -> None:
    from torch.utils import cpp_extension  # imported only to build: it is slow to import

    library = library_path(flags)
    library.parent.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name=library.stem,
        sources=[str(path) for path in source_files() if path.suffix == ".cpp"],
        extra_cflags=flags,
        extra_ldflags=[OPENMP_FLAG] if openmp else [],
        build_directory=str(library.parent),
        is_python_module=False,
        verbose=False,
    )


def _ops_loaded() -> bool:
    return hasattr(torch.ops.hf_entmax, "entmax_forward")


def _first_error_line(error: Exception) -> str:
    """``Type: message`` of a failed build, the message cut to the compiler's first error where it has one (its output
    begins with the whole command line)."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines()]
    first_error = next(
        (line for line in lines if re.search(r"\b(fatal )?error\b", line) and "Error building" not in line), ""
    )
    return f"{type(error).__name__}: {(first_error or text)[:300]}"


def _build() -> KernelStatus:
    """Load the cached build of the kernel, or compile it: with OpenMP, then without; the status says which."""
    if os.environ.get("HF_ENTMAX_NATIVE", "1") == "0":
        return KernelStatus(available=False, disabled=True)
    attempts = [(compiler_flags(openmp=True), True), (compiler_flags(openmp=False), False)]
    # A build without OpenMP is in the cache only where the build with it failed (the compiler is part of the name).
    for flags, openmp in attempts:
        library = library_path(flags)
        if library.exists():
            torch.ops.load_library(str(library))
            return KernelStatus(available=True, flags=flags, openmp=openmp, library=library)
    errors = []
    for flags, openmp in attempts:
        try:
            _compile(flags, openmp)
        except Exception as error:  # no compiler, no ninja, a compile error: try the next flags, then use PyTorch
            errors.append(_first_error_line(error))
            continue
        if _ops_loaded():
            if not openmp:
                logger.info("hf_entmax: built the CPU kernel without OpenMP (%s): it runs on one thread", errors[-1])
            return KernelStatus(available=True, flags=flags, openmp=openmp, library=library_path(flags))
        errors.append("the library loaded without the hf_entmax ops")
    warnings.warn(
        f"hf_entmax: the fast CPU kernel could not be built with {compiler()} and {' '.join(attempts[0][0])}, nor "
        f"without OpenMP ({errors[-1]}); using the PyTorch implementation, which is slower. Set HF_ENTMAX_NATIVE=0 to "
        "skip the attempt.",
        stacklevel=4,
    )
    return KernelStatus(available=False, flags=attempts[-1][0], error=errors[-1])


def kernel_status() -> KernelStatus:
    """The kernel's status, loading or building it on the first call (one build attempt per process)."""
    status = _state.get("status")
    if status is None:
        status = _state["status"] = _build()
    return status


def kernel_available() -> bool:
    """Whether the native kernel is built and loaded (building it on the first call)."""
    return kernel_status().available
