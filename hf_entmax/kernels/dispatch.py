"""Which implementation runs α-entmax, decided here alone, and made visible.

The flat modeling files (`hf_entmax/modeling/`) call two entries, ``native_*`` for hf_entmax's own kernels as opposed
to their PyTorch operations, which they run where an entry returns ``None`` (and where hf_entmax is not installed):

- `native_entmax`, for the mapping (`hf_entmax.entmax`, `entmax15`, `sparsemax`): the native CPU kernel
  (`cpu.entmax`) where `mapping_route` says so;
- `native_entmax_attention`, for the model's attention: Sparsefinder's pairs gathered by the native kernel where the
  graph is sparse enough to pay (`RESTRICTED_MAX_DENSITY`, `cpu.restricted_attention`); on CUDA tensors the Triton
  kernel, opt-in with ``HF_ENTMAX_TRITON=1`` (`triton_attention_route`, `triton_attention.entmax_attention`); on CPU
  tensors the fused native kernel (`attention_route`, `cpu.entmax_attention`).

Each route is a `Route`: the implementation that runs and why. The first call that takes a route logs it once
(logger ``"hf_entmax"``, level INFO), and `describe` sums up the routes of this machine.

The entries are called once per layer and token while decoding, so the routes are a few attribute checks returning
objects made once, here.
"""

import functools
import logging
import os
import platform
from types import ModuleType

import torch

from ..modeling.sparsefinder_attention import NearestKeys, PredictedSparsity
from . import build, cpu
from .build import kernel_status


logger = logging.getLogger("hf_entmax")

MAPPING = "mapping"
ATTENTION = "attention"
_PATH_TITLES = {MAPPING: "α-entmax (entmax, entmax15, sparsemax)", ATTENTION: "α-entmax attention"}
# What runs: the native CPU kernel, the Triton kernel (attention on CUDA tensors) or PyTorch.
NATIVE = "native"
TRITON = "triton"
PYTORCH = "pytorch"
NATIVE_IMPLEMENTATIONS = {MAPPING: "native CPU kernel", ATTENTION: "fused native CPU kernel"}
PYTORCH_IMPLEMENTATIONS = {MAPPING: "PyTorch", ATTENTION: "PyTorch operations"}
COMPOSED_NATIVE_IMPLEMENTATION = "native CPU kernel's mapping with PyTorch products"
TRITON_IMPLEMENTATION = "Triton kernel"
# The opt-in switch of the Triton kernel, and the device types it takes (tests add "cpu", where Triton's interpreter
# runs it).
TRITON_SWITCH = "HF_ENTMAX_TRITON"
TRITON_DEVICE_TYPES = ("cuda",)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class Route:
    """One answer to "which implementation runs?": for ``path`` (`MAPPING` or `ATTENTION`), the ``kind`` (`NATIVE`,
    `TRITON` or `PYTORCH`) and the ``reason``."""

    __slots__ = ("announced", "composed", "kind", "path", "reason")

    def __init__(self, path: str, kind: str, reason: str, composed: bool = False):
        self.path = path
        self.kind = kind
        self.reason = reason
        self.composed = composed  # the native kernel's mapping, the rest of the attention as PyTorch operations
        self.announced = False

    @property
    def native(self) -> bool:
        """Whether the native CPU kernel runs."""
        return self.kind == NATIVE

    @property
    def triton(self) -> bool:
        """Whether the Triton kernel runs."""
        return self.kind == TRITON

    @property
    def implementation(self) -> str:
        """The implementation's name, e.g. ``"native CPU kernel"``, ``"Triton kernel"`` or ``"PyTorch"``."""
        if self.kind == TRITON:
            return TRITON_IMPLEMENTATION
        if self.composed:
            return COMPOSED_NATIVE_IMPLEMENTATION
        return (NATIVE_IMPLEMENTATIONS if self.native else PYTORCH_IMPLEMENTATIONS)[self.path]

    def __str__(self) -> str:
        return f"{_PATH_TITLES[self.path]}: {self.implementation} ({self.reason})"

    def __repr__(self) -> str:
        return f"Route({self.path!r}, {self.kind!r}, reason={self.reason!r})"


class _Routes:
    """The routes of one path for the reasons both paths share."""

    def __init__(self, path: str, native_reason: str):
        self.native = Route(path, NATIVE, native_reason)
        self.not_cpu = Route(path, PYTORCH, "the tensors are not on the CPU, the kernel is CPU only")
        self.empty = Route(path, PYTORCH, "empty input")
        self.compiling = Route(path, PYTORCH, "under torch.compile, which does not trace into the kernel")
        self.disabled = Route(path, PYTORCH, "the kernel is turned off by HF_ENTMAX_NATIVE=0")
        self.unavailable = Route(path, PYTORCH, "the kernel could not be built: hf_entmax.kernels.describe() says why")

    def kernel(self) -> Route:
        """The route where the kernel applies to the tensors: native if it is loaded (building it on first use)."""
        status = kernel_status()
        if status.available:
            return self.native
        return self.disabled if status.disabled else self.unavailable


_MAPPING_ROUTES = _Routes(MAPPING, "CPU tensors, half precision computed in float32")
_ATTENTION_ROUTES = _Routes(ATTENTION, "float32/float64 CPU tensors")
_ATTENTION_DTYPE = Route(ATTENTION, PYTORCH, "not float32/float64 tensors of one dtype, which the fused kernel needs")
_ATTENTION_MASK_GRAD = Route(ATTENTION, PYTORCH, "the mask requires a gradient, which the fused kernel does not give")
# The fused kernel computes the output from the probabilities inside one autograd node, so weights it returns have no
# path to the output: a gradient of the output never reaches them (gradient-based attribution needs it).
_ATTENTION_WEIGHTS_GRAD = Route(
    ATTENTION,
    NATIVE,
    "the attention weights are wanted with gradients (output_attentions where autograd records): the output is "
    "computed from them, as the same operations as the fused kernel's",
    composed=True,
)


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
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    weights_grad: bool = False,
) -> Route:
    """The route of the model's attention on these tensors (as `cpu.entmax_attention` takes them): the fused
    native kernel for non-empty float32/float64 CPU tensors of one dtype and a mask without gradient, outside
    ``torch.compile``, where the kernel is loaded; there, with ``weights_grad`` (the caller wants the attention weights
    and autograd records), the kernel's mapping with the products as PyTorch operations, so that the weights are part
    of the output's graph (a `Route` whose ``composed`` is True). Elsewhere the model composes the attention of
    PyTorch operations, and its entmax takes the mapping's route."""
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
        if weights_grad and route.native:
            route = _ATTENTION_WEIGHTS_GRAD
    return route if route.announced else _announce(route)


class _TritonRoutes:
    """The routes of the model's attention on the tensors the Triton kernel is for, one per reason."""

    def __init__(self):
        self.triton = Route(ATTENTION, TRITON, f"CUDA float16/bfloat16/float32 tensors, {TRITON_SWITCH}=1")
        self.off = Route(ATTENTION, PYTORCH, f"the Triton kernel is opt-in: {TRITON_SWITCH}=1 turns it on")
        self.not_device = Route(ATTENTION, PYTORCH, "the tensors are not CUDA tensors, which the Triton kernel takes")
        self.dtype = Route(
            ATTENTION, PYTORCH, "not float16/bfloat16/float32 tensors of one dtype, which the Triton kernel takes"
        )
        self.mask_grad = Route(
            ATTENTION, PYTORCH, "the mask requires a gradient, which the Triton kernel does not give"
        )
        self.dropout = Route(
            ATTENTION, PYTORCH, "attention dropout in training, which the Triton kernel does not draw (PyTorch does)"
        )
        self.weights = Route(
            ATTENTION,
            PYTORCH,
            "the attention weights are wanted (output_attentions), which the Triton kernel never forms",
        )


_TRITON_ROUTES = _TritonRoutes()


@functools.cache
def _triton_import_route() -> Route:
    """The Triton kernel's route as far as the installation goes: `_TRITON_ROUTES.triton` if triton imports, else
    why not. Asked once per process (importing triton takes a second)."""
    try:
        import triton  # noqa: F401
    except Exception as error:  # ImportError, or a broken installation failing otherwise
        message = (
            f"{TRITON_SWITCH}=1, but triton cannot be imported ({type(error).__name__}: {error}): pip install triton"
        )
        return Route(ATTENTION, PYTORCH, message)
    return _TRITON_ROUTES.triton


def _triton_kernel() -> ModuleType:
    """The Triton kernel's module, imported where its route needs it (it imports triton)."""
    from . import triton_attention

    return triton_attention


@functools.cache
def _triton_head_dim_route() -> Route:
    limit = _triton_kernel().MAX_HEAD_DIM
    return Route(ATTENTION, PYTORCH, f"a head dimension above {limit}, which the Triton kernel's tiles do not hold")


def _triton_switch_route() -> Route:
    """The Triton kernel's route before looking at the tensors: off unless ``HF_ENTMAX_TRITON=1``, then whether
    triton imports."""
    if os.environ.get(TRITON_SWITCH) != "1":
        return _TRITON_ROUTES.off
    return _triton_import_route()


def triton_attention_route(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: float = 0.0,
    weights_wanted: bool = False,
) -> Route:
    """The route of the model's attention on tensors of a device the Triton kernel is for (CUDA), as
    `triton_attention.entmax_attention` takes them: the Triton kernel where ``HF_ENTMAX_TRITON=1``, triton imports, the
    tensors are non-empty float16/bfloat16/float32 tensors of one dtype with a head dimension up to the kernel's
    `MAX_HEAD_DIM`, the mask needs no gradient, there is no attention dropout (``dropout`` is the probability in
    effect: 0 in evaluation) and the caller does not want the attention weights; outside ``torch.compile``. Elsewhere
    the model composes the attention of PyTorch operations."""
    routes = _TRITON_ROUTES
    if torch.compiler.is_compiling():
        return _ATTENTION_ROUTES.compiling
    dtype = query.dtype
    if (
        query.device.type not in TRITON_DEVICE_TYPES
        or key.device != query.device
        or value.device != query.device
        or (mask is not None and mask.device != query.device)
    ):
        route = routes.not_device
    elif not (switch := _triton_switch_route()).triton:
        route = switch
    elif dtype not in TRITON_DTYPES or key.dtype != dtype or value.dtype != dtype:
        route = routes.dtype
    elif mask is not None and mask.requires_grad:
        route = routes.mask_grad
    elif dropout > 0.0:
        route = routes.dropout
    elif weights_wanted:
        route = routes.weights
    elif query.shape[-1] > _triton_kernel().MAX_HEAD_DIM:
        route = _triton_head_dim_route()
    elif query.numel() == 0 or key.numel() == 0:
        route = _ATTENTION_ROUTES.empty
    else:
        route = switch
    return route if route.announced else _announce(route)


# Gathering the graph's pairs pays for graphs that keep at most this share of the pairs (docs/sparsefinder.md,
# "Restricted attention"; benchmarks/bench_sparsefinder_speed.py): then it is faster than masking the other pairs at
# every length measured (128–2048 keys; at 0.5 about even), while denser graphs favour the fused kernel over all pairs,
# whose products run at the speed of dense matrix products.
RESTRICTED_MAX_DENSITY = 0.5


def native_entmax(scores: torch.Tensor, alpha: torch.Tensor | float, dim: int) -> torch.Tensor | None:
    """α-entmax by the native kernel where `mapping_route` says so, else ``None`` (the caller runs PyTorch). Same
    contract as `hf_entmax.entmax`, with α already checked and ``dim`` normalised."""
    if not mapping_route(scores).native:
        return None
    return cpu.entmax(scores, alpha, dim)


def native_entmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    weights_wanted: bool = False,
    graph: torch.Tensor | NearestKeys | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The model's α-entmax attention by whichever of hf_entmax's kernels applies, or ``None`` where none does (the
    caller then composes it of PyTorch operations, with the pairs outside ``graph`` masked). Outside
    ``torch.compile``, in this order:

    1. with Sparsefinder's ``graph``, no dropout and no weights wanted: its pairs only, gathered by the native kernel
       where `attention_route` allows the kernel and the graph keeps at most `RESTRICTED_MAX_DENSITY` of the pairs;
       otherwise the pairs outside the graph are masked for the kernels below;
    2. on tensors of a Triton device type (CUDA): the Triton kernel where `triton_attention_route` says so;
    3. on others: the fused native kernel where `attention_route` says so (with ``weights_wanted`` where autograd
       records, its mapping with PyTorch products, so that a gradient of the output reaches the weights).

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled, in the scores' dtype (float32 for a
            half-precision model: the Triton kernel takes it back to the value's dtype).
        key, value: ``(batch, heads, key_len, head_dim)``.
        alpha: α ∈ [1, 2], a float or one per head (``(1, heads, 1, 1)``).
        mask: Additive mask in the query's dtype that broadcasts to ``(batch, heads, query_len, key_len)``: 0 keeps a
            key, −inf or the dtype's lowest value masks it. ``None`` masks nothing.
        dropout: The attention dropout probability in effect (0 in evaluation).
        weights_wanted: Whether the caller returns the attention weights (``output_attentions``).
        graph: Sparsefinder's ``(batch, heads, query_len, key_len)`` bool graph of the pairs attended over (a subset of
            those the mask keeps), or its nearest keys not yet formed (`NearestKeys`), or ``None``.

    Returns:
        ``(output, weights)`` with ``output`` ``(batch, heads, query_len, head_dim)`` and ``weights`` the
        ``(batch, heads, query_len, key_len)`` probabilities after dropout, or ``None`` from the kernels that never
        form them (gathered pairs, Triton); or ``None``.
    """
    if torch.compiler.is_compiling():
        return None  # traced code composes the attention: it does not trace into the kernels
    if graph is not None and dropout == 0.0 and not weights_wanted:
        output = _gathered_attention(query, key, value, alpha, graph, mask)
        if output is not None:
            return output, None
    scores_dtype = query.dtype
    if query.device.type in TRITON_DEVICE_TYPES:
        query = query.to(value.dtype)  # the kernel takes q, k and v in one dtype
        if not triton_attention_route(query, key, value, mask, dropout, weights_wanted).triton:
            return None
        mask = _graph_mask(graph, mask, scores_dtype)
        return _triton_kernel().entmax_attention(query, key, value, alpha, mask), None
    recorded = torch.is_grad_enabled() and (
        query.requires_grad
        or key.requires_grad
        or value.requires_grad
        or (isinstance(alpha, torch.Tensor) and alpha.requires_grad)
    )
    route = attention_route(query, key, value, mask, weights_grad=weights_wanted and recorded)
    if not route.native:
        return None
    mask = _graph_mask(graph, mask, scores_dtype)
    return cpu.entmax_attention(query, key, value, alpha, mask, dropout, composed=route.composed)


def _gathered_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    graph: torch.Tensor | NearestKeys,
    mask: torch.Tensor | None,
) -> torch.Tensor | None:
    """Attention over the graph's pairs only, gathered by the native kernel, the mask's values on them (ALiBi's
    distance bias) added to their scores; or ``None`` where the kernel does not apply (`attention_route`), the mask
    wants a gradient (the kernel gives the bias none), or gathering does not pay (a graph that keeps more than
    `RESTRICTED_MAX_DENSITY` of the pairs)."""
    if not attention_route(query, key, value, None).native:
        return None
    if mask is not None and mask.requires_grad and torch.is_grad_enabled():
        return None
    if isinstance(graph, NearestKeys):
        if graph.keys > RESTRICTED_MAX_DENSITY * graph.shape[-1]:
            return None
        offsets, columns = cpu.nearest_rows(graph.squared, graph.keys)
    else:
        offsets, columns = cpu.graph_rows(graph, int(RESTRICTED_MAX_DENSITY * graph.numel()))
        if columns is None:
            return None
    pair_bias = None if mask is None else cpu.pair_values(mask, offsets, columns, graph.shape)
    return cpu.restricted_attention(query, key, value, alpha, offsets, columns, pair_bias)


def _graph_mask(graph: torch.Tensor | None, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    # Made only for a kernel that runs: the graph's mask has the mask's device and need of a gradient, and the
    # scores' dtype, so the routes above are asked with the mask itself.
    return mask if graph is None else PredictedSparsity.graph_mask(graph, mask, dtype)


def describe() -> str:
    """A few lines saying which implementation runs α-entmax on this machine and why: for the mapping and for the
    model's attention on CPU tensors and on CUDA tensors, and the native kernel's build (compiler, flags, threads,
    vector instructions, where it is cached) or why there is none. Loads the kernel, building it if this machine has
    no build yet (about 20 s); imports triton where HF_ENTMAX_TRITON=1."""
    status = kernel_status()
    mapping, attention, cuda = _MAPPING_ROUTES.kernel(), _ATTENTION_ROUTES.kernel(), _triton_switch_route()
    weights_grad = _ATTENTION_WEIGHTS_GRAD
    lines = [
        f"hf_entmax on {platform.machine()} with torch {torch.__version__} ({torch.get_num_threads()} threads):",
        f"- {MAPPING} on CPU tensors: {mapping.implementation} ({mapping.reason}); on other devices and under "
        "torch.compile: PyTorch",
        f"- {ATTENTION} on CPU tensors: {attention.implementation} ({attention.reason}); "
        + (
            f"with attention weights wanted with gradients: {weights_grad.implementation}; "
            if attention.native
            else ""
        )
        + "in half precision, with a mask that requires a gradient, on other devices and under torch.compile: PyTorch "
        "operations (their entmax takes the mapping's route)",
        f"- {ATTENTION} on CUDA tensors: {cuda.implementation} ({cuda.reason})"
        + (
            "; with attention dropout in training, wanted weights (output_attentions), float64, a mask that requires "
            "a gradient and under torch.compile: PyTorch operations"
            if cuda.triton
            else ""
        ),
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
