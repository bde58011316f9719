"""Which implementation runs α-entmax, decided here alone, and made visible.

Two paths go through the native kernel: the mapping (`hf_entmax.entmax`, `entmax15`, `sparsemax`, through
`cpu.native_entmax`) and the model's attention (through `cpu.native_entmax_attention`, fused). For each call,
`mapping_route` or `attention_route` gives a `Route`: the implementation that runs and why. The first call that takes
a route logs it once (logger ``"hf_entmax"``, level INFO), and `describe` sums up the routes of this machine.

The functions are called once per layer and token while decoding, so they are a few attribute checks returning
routes made once, here.
"""

import logging
import platform

import torch

from . import build
from .build import kernel_status


logger = logging.getLogger("hf_entmax")

MAPPING = "mapping"
ATTENTION = "attention"
_PATH_TITLES = {MAPPING: "α-entmax (entmax, entmax15, sparsemax)", ATTENTION: "α-entmax attention"}
NATIVE_IMPLEMENTATIONS = {MAPPING: "native CPU kernel", ATTENTION: "fused native CPU kernel"}
PYTORCH_IMPLEMENTATIONS = {MAPPING: "PyTorch", ATTENTION: "PyTorch operations"}


class Route:
    """One answer to "which implementation runs?": for ``path`` (`MAPPING` or `ATTENTION`), ``native`` (the kernel) or
    not, and the ``reason``."""

    __slots__ = ("announced", "native", "path", "reason")

    def __init__(self, path: str, native: bool, reason: str):
        self.path = path
        self.native = native
        self.reason = reason
        self.announced = False

    @property
    def implementation(self) -> str:
        """The implementation's name, e.g. ``"native CPU kernel"`` or ``"PyTorch"``."""
        return (NATIVE_IMPLEMENTATIONS if self.native else PYTORCH_IMPLEMENTATIONS)[self.path]

    def __str__(self) -> str:
        return f"{_PATH_TITLES[self.path]}: {self.implementation} ({self.reason})"

    def __repr__(self) -> str:
        return f"Route({self.path!r}, native={self.native}, reason={self.reason!r})"


class _Routes:
    """The routes of one path for the reasons both paths share."""

    def __init__(self, path: str, native_reason: str):
        self.native = Route(path, True, native_reason)
        self.not_cpu = Route(path, False, "the tensors are not on the CPU, the kernel is CPU only")
        self.empty = Route(path, False, "empty input")
        self.compiling = Route(path, False, "under torch.compile, which does not trace into the kernel")
        self.disabled = Route(path, False, "the kernel is turned off by HF_ENTMAX_NATIVE=0")
        self.unavailable = Route(path, False, "the kernel could not be built: hf_entmax.kernels.describe() says why")

    def kernel(self) -> Route:
        """The route where the kernel applies to the tensors: native if it is loaded (building it on first use)."""
        status = kernel_status()
        if status.available:
            return self.native
        return self.disabled if status.disabled else self.unavailable


_MAPPING_ROUTES = _Routes(MAPPING, "CPU tensors, half precision computed in float32")
_ATTENTION_ROUTES = _Routes(ATTENTION, "float32/float64 CPU tensors")
_ATTENTION_DTYPE = Route(ATTENTION, False, "not float32/float64 tensors of one dtype, which the fused kernel needs")
_ATTENTION_MASK_GRAD = Route(ATTENTION, False, "the mask requires a gradient, which the fused kernel does not give")


def _announce(route: Route) -> Route:
    route.announced = True
    logger.info("hf_entmax: %s", route)
    return route


def mapping_route(scores: torch.Tensor) -> Route:
    """The route of α-entmax on ``scores`` (any shape and dtype): the native kernel for non-empty CPU tensors, outside
    ``torch.compile``, where the kernel is loaded."""
    routes = _MAPPING_ROUTES
    if torch.compiler.is_compiling():
        return routes.compiling  # not logged: torch.compile would trace the logging
    if scores.device.type != "cpu":
        route = routes.not_cpu
    elif scores.numel() == 0:
        route = routes.empty
    else:
        route = routes.kernel()
    return route if route.announced else _announce(route)


def attention_route(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None
) -> Route:
    """The route of the model's attention on these tensors (as `cpu.native_entmax_attention` takes them): the fused
    native kernel for non-empty float32/float64 CPU tensors of one dtype and a mask without gradient, outside
    ``torch.compile``, where the kernel is loaded. Elsewhere the model composes the attention of PyTorch operations,
    and its entmax takes the mapping's route."""
    routes = _ATTENTION_ROUTES
    if torch.compiler.is_compiling():
        return routes.compiling
    # Spelled out rather than looped over: a generator costs more than these checks.
    dtype = query.dtype
    if (
        query.device.type != "cpu"
        or key.device.type != "cpu"
        or value.device.type != "cpu"
        or (mask is not None and mask.device.type != "cpu")
    ):
        route = routes.not_cpu
    elif (
        (dtype != torch.float32 and dtype != torch.float64)
        or key.dtype != dtype
        or value.dtype != dtype
        or (mask is not None and mask.dtype != dtype)
    ):
        route = _ATTENTION_DTYPE
    elif mask is not None and mask.requires_grad:
        route = _ATTENTION_MASK_GRAD
    elif query.numel() == 0 or key.numel() == 0:
        route = routes.empty
    else:
        route = routes.kernel()
    return route if route.announced else _announce(route)


def describe() -> str:
    """A few lines saying which implementation runs α-entmax on this machine and why: for the mapping and for the
    model's attention on CPU tensors, and the kernel's build (compiler, flags, threads, vector instructions, where it
    is cached) or why there is none. Loads the kernel, building it if this machine has no build yet (about 20 s)."""
    status = kernel_status()
    mapping, attention = _MAPPING_ROUTES.kernel(), _ATTENTION_ROUTES.kernel()
    lines = [
        f"hf_entmax on {platform.machine()} with torch {torch.__version__} ({torch.get_num_threads()} threads):",
        f"- {MAPPING} on CPU tensors: {mapping.implementation} ({mapping.reason}); on other devices and under "
        "torch.compile: PyTorch",
        f"- {ATTENTION} on CPU tensors: {attention.implementation} ({attention.reason}); in half precision, with a "
        "mask that requires a gradient, on other devices and under torch.compile: PyTorch operations (their entmax "
        "takes the mapping's route)",
    ]
    path, version = build.compiler_identity()
    compiler_text = f"{path} ({version.splitlines()[0] if version else 'no version'})"
    if status.available:
        info = dict(item.split("=", 1) for item in torch.ops.hf_entmax.build_info().split())
        threads = "OpenMP threads" if status.openmp else "one thread (built without OpenMP)"
        lines += [
            f"- build: {compiler_text}, {' '.join(status.flags)}; {threads}; vector instructions: {info['simd']}",
            f"- cached in {status.library.parent} (HF_ENTMAX_CACHE moves the cache)",
        ]
    elif status.disabled:
        lines.append("- build: none, HF_ENTMAX_NATIVE=0 turns the kernel off")
    else:
        lines.append(
            f"- build: failed with {compiler_text} and {' '.join(status.flags)} (cache: {build.cache_directory()}): "
            f"{status.error}"
        )
    return "\n".join(lines)
