"""Sparsefinder: attend only over the query–key pairs a small per-head model predicts to be in α-entmax's support.

*Predicting Attention Sparsity in Transformers* (Treviso, Góis, Fernandes, Fonseca & Martins, SPNLP 2022): per
head, queries and keys are projected to a few dimensions by learned linear maps (trained with a contrastive hinge
loss on the true entmax supports, see ``hf_entmax.sparsefinder``), and the graph of pairs to compute is read off the
projections:

- ``distance``: the pairs whose projections are within a Euclidean distance ``threshold``, where a learned weight per
  head times the distance ``|i − j|`` between query and key positions adds to the squared distance (the position
  term: what a query and a key carry says nothing of their distance in heads that get it from ALiBi's bias, NAPE's
  included, and little in any head, yet many heads attend locally);
- ``nearest``: each query's ``keys`` nearest keys by that same distance, among those it may attend to: a graph of a
  fixed size per query, where a threshold leaves the queries of a very sparse head (sparsemax's few keys) with no key
  or with many (the first fall back to their full row);
- ``quantization``: the pairs that fall in the same bucket in at least one projected dimension, each dimension cut
  into ``buckets`` equally populated buckets (quantiles of the training projections);
- ``clustering``: the pairs whose projections have the same nearest k-means centroid (``clusters`` centroids);
- ``window``: the pairs at most ``size`` positions apart (self-attention only); a ``window`` of that size can also
  be added to any of the other three.

An operating point is written ``METHOD:KNOB=VALUE[,window=W]``, e.g. ``distance:threshold=1.5,window=2``,
``nearest:keys=8``, ``quantization:buckets=8``, ``clustering:clusters=4``, ``window:size=3``.

Restricted attention is α-entmax over the predicted keys only: the other pairs are masked (their probability is
exactly zero). A query whose predicted set holds none of the keys it may attend to falls back to all of them (its
full, exact row), so no row is ever empty and nothing is NaN; a graph of all pairs leaves the mask, and so the
attention, exactly as it was. With hf_entmax installed, sparse graphs are attended over their predicted pairs only,
each query's keys gathered by the native CPU kernel where that pays (``hf_entmax.kernels.dispatch`` decides);
everywhere else the pairs outside the graph are masked and the full attention runs.

This file is copied to the Hub next to the model: it needs nothing but torch, safetensors and transformers.
"""

import json
import math
import os
import re
import weakref
from dataclasses import dataclass, field

import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from transformers.utils import cached_file

from .configuration_adaptive_entmax_marian import ATTENTION_TYPES
from .entmax import is_masked


PREDICTOR_FILE = "sparsefinder.safetensors"
PREDICTOR_FORMAT = "hf_entmax.sparsefinder/1"
METHODS = ("distance", "nearest", "quantization", "clustering", "window")
# The knob that sets each method's sparsity; "window" is the window's half-width.
METHOD_KNOBS = {
    "distance": "threshold",
    "nearest": "keys",
    "quantization": "buckets",
    "clustering": "clusters",
    "window": "size",
}
PROJECTION_METHODS = ("distance", "nearest", "quantization", "clustering")
# Query i and key j are positions of one sequence only here: a window means nothing in cross-attention.
SELF_ATTENTION_TYPES = ("encoder_self", "decoder_self")
# The stored quantile grid of each projected dimension: bucket edges for any number of buckets are read off it.
QUANTILE_STEPS = 64
# Beyond this many buckets the edges, interpolated between the grid's 65 levels, only split hairs, while their tensor
# grows with the number (10**22 buckets would not even fit an index).
MAX_BUCKETS = 65536
# The tensors of a predictor file: ``{attention_type}.{layer}.{part}``, every layer with the three parts below, and
# ``{attention_type}.{layer}.centroids.{k}`` for each number of clusters k, and ``{attention_type}.{layer}.position``
# where the position term was learned (predictors written before it have none: no position term).
PREDICTOR_PARTS = ("query", "key", "quantiles")
_PREDICTOR_KEY = re.compile(
    rf"^({'|'.join(ATTENTION_TYPES)})\.(\d+)\.(?:({'|'.join((*PREDICTOR_PARTS, 'position'))})|centroids\.(\d+))$"
)


@dataclass(frozen=True)
class OperatingPoint:
    """One Sparsefinder graph: a method, its knob and an optional local window.

    Attributes:
        method: One of `METHODS`.
        knob: ``threshold`` (distance, > 0, ``inf`` for all pairs), ``keys`` (nearest, ≥ 1), ``buckets``
            (quantization, 1 to `MAX_BUCKETS`), ``clusters`` (clustering, ≥ 1) or the window's ``size`` (window,
            ≥ 0; a window at least as wide as the input keeps every pair).
        window: Also keep the pairs at most this many positions apart (projection methods, self-attention only).
    """

    method: str
    knob: float
    window: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"Sparsefinder method must be one of {', '.join(METHODS)}, got {self.method!r}")
        name = METHOD_KNOBS[self.method]
        if self.method == "distance":
            if not (isinstance(self.knob, (int, float)) and self.knob > 0):
                raise ValueError(f"`threshold` of the distance method must be a positive number, got {self.knob!r}")
        elif not (isinstance(self.knob, int) and not isinstance(self.knob, bool)) or self.knob < (
            0 if self.method == "window" else 1
        ):
            least = 0 if self.method == "window" else 1
            raise ValueError(f"`{name}` of the {self.method} method must be an integer ≥ {least}, got {self.knob!r}")
        if self.method == "quantization" and self.knob > MAX_BUCKETS:
            raise ValueError(f"`buckets` of the quantization method must be at most {MAX_BUCKETS}, got {self.knob}")
        if self.window is not None:
            if self.method == "window":
                raise ValueError("the window method has no extra `window`: its knob `size` is the window")
            if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 0:
                raise ValueError(f"`window` must be an integer ≥ 0, got {self.window!r}")

    @classmethod
    def parse(cls, spec: str) -> "OperatingPoint":
        """``"distance:threshold=1.5,window=2"`` → ``OperatingPoint("distance", 1.5, 2)``.

        Raises:
            ValueError: For a spec of another form, an unknown method or knob, or a bad value.
        """
        method, _, settings = spec.strip().partition(":")
        form = "METHOD:KNOB=VALUE[,window=W] (e.g. distance:threshold=1.5,window=2)"
        if method not in METHODS:
            raise ValueError(f"Sparsefinder operating point {spec!r}: unknown method {method!r}; expected {form}")
        values = {}
        for setting in filter(None, settings.split(",")):
            name, equals, value = setting.partition("=")
            if not equals or name.strip() not in (METHOD_KNOBS[method], "window") or name.strip() in values:
                raise ValueError(
                    f"Sparsefinder operating point {spec!r}: {setting!r} is not one of "
                    f"{METHOD_KNOBS[method]}=…, window=…; expected {form}"
                )
            values[name.strip()] = value.strip()
        knob_name = METHOD_KNOBS[method]
        if knob_name not in values:
            raise ValueError(f"Sparsefinder operating point {spec!r} gives no {knob_name}=…; expected {form}")
        try:
            knob = float(values[knob_name]) if method == "distance" else int(values[knob_name])
            window = int(values["window"]) if "window" in values else None
        except ValueError:
            raise ValueError(f"Sparsefinder operating point {spec!r}: not a number; expected {form}") from None
        return cls(method, knob, window)

    def spec(self) -> str:
        """The operating point as `parse` reads it."""
        knob = f"{self.knob:.4g}" if self.method == "distance" else str(self.knob)
        window = "" if self.window is None else f",window={self.window}"
        return f"{self.method}:{METHOD_KNOBS[self.method]}={knob}{window}"


@dataclass
class LayerProjections:
    """The learned predictor of one attention layer's heads.

    Attributes:
        query, key: ``(heads, head_dim, r)`` projections of the (unscaled) queries and keys.
        quantiles: ``(heads, r, QUANTILE_STEPS + 1)`` quantiles of each projected dimension over the training
            queries and keys, at levels 0, 1/QUANTILE_STEPS, …, 1 (the quantization method's bucket edges).
        centroids: ``{k: (heads, k, r)}`` k-means centroids of the training projections, per number of clusters.
        position: ``(heads,)`` ≥ 0, the weight of the position distance ``|i − j|`` in the distance method's squared
            distance (None: no position term).
    """

    query: torch.Tensor
    key: torch.Tensor
    quantiles: torch.Tensor
    centroids: dict[int, torch.Tensor] = field(default_factory=dict)
    position: torch.Tensor | None = None

    def project_queries(self, query: torch.Tensor) -> torch.Tensor:
        """``(B, H, Lq, D)`` → ``(B, H, Lq, r)`` in float32 (or float64)."""
        return _project(query, self.query)

    def project_keys(self, key: torch.Tensor) -> torch.Tensor:
        """``(B, H, Lk, D)`` → ``(B, H, Lk, r)`` in float32 (or float64)."""
        return _project(key, self.key)

    def project(self, query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, H, Lq, D)``, ``(B, H, Lk, D)`` → ``(B, H, Lq, r)``, ``(B, H, Lk, r)`` in float32 (or float64)."""
        return self.project_queries(query), self.project_keys(key)

    def squared_distances(
        self,
        projected_query: torch.Tensor,
        projected_key: torch.Tensor,
        positions: torch.Tensor,
        key_side: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """What the distance method thresholds and training separates: the squared distance of the projected query
        and key, plus the position term ``position_h · |i − j|``.

        Args:
            projected_query: ``(B, H, Lq, r)``; projected_key: ``(B, H, Lk, r)``, at positions 0 … Lk − 1 (`project`).
            positions: ``(..., Lq)`` the queries' positions.
            key_side: ``distance_key_side(projected_key)`` where made already.

        Returns:
            ``(B, H, Lq, Lk)`` in float32 (or float64).
        """
        squared = squared_distances(projected_query, projected_key, key_side)
        if self.position is None:
            return squared
        key_len = projected_key.shape[-2]
        offsets = positions[..., :, None] - torch.arange(key_len, device=positions.device)  # (..., Lq, Lk)
        while offsets.dim() < 4:
            offsets = offsets.unsqueeze(0)
        # One pass over the (B, H, Lq, Lk) distances: the weights (1, H, 1, 1) times the (…, 1 or H, Lq, Lk) offsets.
        weights = self.position.to(squared.device, squared.dtype).view(1, -1, 1, 1)
        return torch.addcmul(squared, weights, offsets.abs().to(squared.dtype))

    def to(self, device: torch.device | str) -> "LayerProjections":
        return LayerProjections(
            self.query.to(device),
            self.key.to(device),
            self.quantiles.to(device),
            {clusters: centroids.to(device) for clusters, centroids in self.centroids.items()},
            None if self.position is None else self.position.to(device),
        )


class SparsefinderPredictor:
    """The learned projections of every layer of some attention types, as saved in ``sparsefinder.safetensors``.

    Attributes:
        layers: ``{attention_type: [LayerProjections per layer]}``.
        metadata: JSON-ready facts stored with them (how they were trained, the recommended operating points).
    """

    def __init__(self, layers: dict[str, list[LayerProjections]], metadata: dict | None = None) -> None:
        self.layers = layers
        self.metadata = metadata or {}

    @property
    def projection_dim(self) -> int:
        first = next(iter(self.layers.values()))[0]
        return first.query.shape[-1]

    def position_weights(self) -> dict[str, list[list[float]]]:
        """``{attention_type: [[position term per head] per layer]}`` for the types whose layers learned one."""
        return {
            kind: [[round(weight, 4) for weight in layer.position.tolist()] for layer in layers]
            for kind, layers in self.layers.items()
            if all(layer.position is not None for layer in layers)
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the projections (and ``metadata``) to one safetensors file."""
        tensors = {}
        for kind, layers in self.layers.items():
            for index, layer in enumerate(layers):
                prefix = f"{kind}.{index}"
                tensors[f"{prefix}.query"] = layer.query.detach().float().cpu().contiguous()
                tensors[f"{prefix}.key"] = layer.key.detach().float().cpu().contiguous()
                tensors[f"{prefix}.quantiles"] = layer.quantiles.detach().float().cpu().contiguous()
                for clusters, centroids in layer.centroids.items():
                    tensors[f"{prefix}.centroids.{clusters}"] = centroids.detach().float().cpu().contiguous()
                if layer.position is not None:
                    tensors[f"{prefix}.position"] = layer.position.detach().float().cpu().contiguous()
        # Serialized first, then written as a plain file: the file gets the umask's mode (safetensors 0.8's save_file
        # makes it private, safetensors#782), and tensors read from the same file are copied before it is truncated.
        metadata = {"format": PREDICTOR_FORMAT, "metadata": json.dumps(self.metadata)}
        serialized = safetensors_bytes(tensors, metadata=metadata)
        with open(path, "wb") as file:
            file.write(serialized)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SparsefinderPredictor":
        """Read a file written by `save`.

        Raises:
            ValueError: If the file is not a Sparsefinder predictor (not safetensors, another safetensors file, or
                tensors that do not fit together), naming it.
        """
        from safetensors import SafetensorError, safe_open

        written_by = "written by `hf-entmax sparsefinder`"
        try:
            with safe_open(str(path), framework="pt") as handle:
                header = handle.metadata() or {}
            if header.get("format") != PREDICTOR_FORMAT:
                raise ValueError(f"{path} is not a Sparsefinder predictor ({written_by})")
            tensors = load_file(str(path))
            metadata = json.loads(header.get("metadata") or "{}")
        except (SafetensorError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not a Sparsefinder predictor ({written_by}): {error}") from None
        grouped: dict[str, dict[int, dict]] = {}
        for name, tensor in tensors.items():
            match = _PREDICTOR_KEY.match(name)
            if match is None:
                raise ValueError(f"{path}: unexpected tensor {name!r} in a Sparsefinder predictor ({written_by})")
            kind, index, part, clusters = match.groups()
            entry = grouped.setdefault(kind, {}).setdefault(int(index), {"centroids": {}})
            if clusters is not None:
                entry["centroids"][int(clusters)] = tensor
            else:
                entry[part] = tensor
        layers = {}
        for kind, by_index in grouped.items():
            if sorted(by_index) != list(range(len(by_index))):
                raise ValueError(f"{path}: the layers of {kind} are not numbered 0, 1, …")
            missing = [part for part in PREDICTOR_PARTS for entry in by_index.values() if part not in entry]
            if missing:
                raise ValueError(f"{path}: a layer of {kind} has no {missing[0]} projection ({written_by})")
            layers[kind] = [LayerProjections(**by_index[index]) for index in range(len(by_index))]
        return cls(layers, metadata)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **kwargs) -> "SparsefinderPredictor":
        """The ``sparsefinder.safetensors`` of a model folder or Hub repository (``kwargs`` go to ``cached_file``:
        ``revision``, ``token``, ``local_files_only``, …), or a predictor file itself.

        Raises:
            OSError: If there is no such file there.
            ValueError: If the file is not a Sparsefinder predictor (see `load`).
        """
        if os.path.isfile(name_or_path):
            return cls.load(name_or_path)
        path = cached_file(str(name_or_path), PREDICTOR_FILE, _raise_exceptions_for_missing_entries=False, **kwargs)
        if path is None:
            raise OSError(
                f"{name_or_path} has no {PREDICTOR_FILE}: train one with `hf-entmax sparsefinder` (or pass "
                "`predictor=`), or use the window method, which needs none"
            )
        return cls.load(path)


def _project(states: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, D)`` queries or keys times a ``(H, D, r)`` projection → ``(B, H, L, r)``, at least in float32."""
    dtype = torch.promote_types(states.dtype, torch.float32)
    return torch.einsum("bhld,hdr->bhlr", states.to(dtype), projection.to(states.device, dtype))


def last_positions(query_len: int, key_len: int, device: torch.device) -> torch.Tensor:
    """``(Lq,)`` position of each query among the keys of self-attention when the keys end with the queries: the last
    ``Lq`` of ``Lk`` (teacher forcing, and cached decoding with a growing cache)."""
    return torch.arange(key_len - query_len, key_len, device=device)


def window_graph(positions: torch.Tensor, key_len: int, size: int) -> torch.Tensor:
    """``(..., Lq)`` query positions → ``(..., Lq, Lk)`` bool: the self-attention pairs at most ``size`` apart (a
    window of at least ``key_len`` keeps every pair)."""
    offsets = positions[..., :, None] - torch.arange(key_len, device=positions.device)  # (..., Lq, Lk)
    # Positions are among the keys, so no offset reaches key_len: a wider window (10**22 does not fit int64) is that.
    return offsets.abs() <= min(size, key_len)


def distance_key_side(projected_key: torch.Tensor) -> torch.Tensor:
    """``(B, H, Lk, r)`` → ``(B, H, Lk, r + 2)``, ``[k, 1, ‖k‖²]``: the keys' side of `squared_distances`' product.
    Made once per input for cross-attention's keys (`PredictedSparsity.source_keys`): at a decoding step, with a
    single query per row, making it costs several times the product itself."""
    return torch.cat(
        [projected_key, torch.ones_like(projected_key[..., :1]), projected_key.square().sum(-1, keepdim=True)], dim=-1
    )


def squared_distances(
    projected_query: torch.Tensor, projected_key: torch.Tensor, key_side: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, H, Lq, r)``, ``(B, H, Lk, r)`` → ``(B, H, Lq, Lk)`` squared Euclidean distances.

    As ``‖q‖² + ‖k‖² − 2 q·k``, one matrix product of vectors two entries longer, ``[−2q, ‖q‖², 1] · [k, 1, ‖k‖²]``:
    the pairs' differences would form a ``(B, H, Lq, Lk, r)`` tensor first, and each further operation on the
    ``(B, H, Lq, Lk)`` result is another pass over it (together several times the cost of the attention they are meant
    to save). Rounding can leave a distance slightly below 0; it is clamped there. ``key_side``:
    `distance_key_side` of the keys where made already."""
    query_side = torch.cat(
        [
            -2 * projected_query,
            projected_query.square().sum(-1, keepdim=True),
            torch.ones_like(projected_query[..., :1]),
        ],
        dim=-1,
    )
    if key_side is None:
        key_side = distance_key_side(projected_key)
    return (query_side @ key_side.transpose(-1, -2)).clamp_(min=0)


def nearest_graph(squared: torch.Tensor, keys: int, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, H, Lq, Lk)`` squared distances → bool: each query's ``keys`` pairs of smallest distance among its
    ``allowed`` ones (bool, broadcastable; None: those below +inf), all of them where it has no more than that."""
    if allowed is not None:
        squared = squared.masked_fill(~allowed, float("inf"))
    nearest = squared.topk(min(keys, squared.shape[-1]), dim=-1, largest=False).indices
    graph = torch.zeros_like(squared, dtype=torch.bool).scatter_(-1, nearest, True)
    return graph & (squared != float("inf"))  # a query with fewer allowed keys took disallowed ones too


@dataclass(frozen=True)
class NearestKeys:
    """The nearest method's graph before it is formed: each query's ``keys`` keys of smallest ``squared`` distance,
    ``(B, H, Lq, Lk)``, +inf on the pairs it may not attend to (`nearest_graph`).

    hf_entmax's gathered attention reads it straight into the compressed rows it attends over
    (``hf_entmax.kernels.cpu.nearest_rows``); every other path forms the bool graph (`dense`). In decoding, the bool
    graph, the check for empty rows (`effective_graph`) and the graph's compression each cost a pass over every pair:
    together about what attending over the nearest keys alone saves."""

    squared: torch.Tensor
    keys: int

    @property
    def shape(self) -> torch.Size:
        return self.squared.shape

    def dense(self) -> torch.Tensor:
        """``(B, H, Lq, Lk)`` bool."""
        return nearest_graph(self.squared, self.keys)


def distance_graph(squared: torch.Tensor, threshold: float) -> torch.Tensor:
    """``(B, H, Lq, Lk)`` squared distances (`LayerProjections.squared_distances`) → bool: the pairs within
    ``threshold`` (``inf``: every pair)."""
    if math.isinf(threshold):
        return torch.ones_like(squared, dtype=torch.bool)
    return squared <= threshold * threshold


def bucket_edges(quantiles: torch.Tensor, buckets: int) -> torch.Tensor:
    """``(H, r, QUANTILE_STEPS + 1)`` quantile grid → ``(H, r, buckets − 1)`` inner edges of ``buckets`` equally
    populated buckets (linear interpolation between the grid's levels)."""
    steps = quantiles.shape[-1] - 1
    levels = torch.arange(1, buckets, dtype=torch.float64, device=quantiles.device) * steps / buckets  # (buckets-1,)
    lower = levels.floor().long().clamp(max=steps - 1)
    fraction = (levels - lower).to(quantiles.dtype)
    return quantiles[..., lower] + fraction * (quantiles[..., lower + 1] - quantiles[..., lower])


def quantization_graph(
    projected_query: torch.Tensor, projected_key: torch.Tensor, edges: torch.Tensor
) -> torch.Tensor:
    """Pairs that share a bucket in at least one projected dimension.

    Args:
        projected_query, projected_key: ``(B, H, Lq, r)``, ``(B, H, Lk, r)``.
        edges: ``(H, r, buckets − 1)`` increasing inner bucket edges per head and dimension.

    Returns:
        ``(B, H, Lq, Lk)`` bool.
    """

    def buckets_of(projected: torch.Tensor) -> torch.Tensor:  # (B, H, L, r) → (B, H, L, r) bucket indices
        batch, heads, length, dims = projected.shape
        values = projected.permute(1, 3, 0, 2).reshape(heads, dims, batch * length)  # (H, r, B·L)
        indices = torch.searchsorted(edges.to(projected.dtype).contiguous(), values.contiguous())
        return indices.reshape(heads, dims, batch, length).permute(2, 0, 3, 1)

    query_buckets, key_buckets = buckets_of(projected_query), buckets_of(projected_key)
    graph = torch.zeros(
        (*projected_query.shape[:-1], projected_key.shape[-2]), dtype=torch.bool, device=projected_query.device
    )
    for dim in range(query_buckets.shape[-1]):  # one dimension at a time: memory stays that of the graph
        graph |= query_buckets[..., :, None, dim] == key_buckets[..., None, :, dim]
    return graph


def nearest_centroid(projected: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, r)`` and ``(H, k, r)`` → ``(B, H, L)`` index of each projection's nearest centroid."""
    squared = (projected[..., :, None, :] - centroids[None, :, None].to(projected.dtype)).square().sum(-1)
    return squared.argmin(-1)  # (B, H, L)


def cluster_graph(projected_query: torch.Tensor, projected_key: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """``(B, H, Lq, Lk)`` bool: pairs whose projections share their nearest of the ``(H, k, r)`` centroids."""
    query_clusters = nearest_centroid(projected_query, centroids)  # (B, H, Lq)
    key_clusters = nearest_centroid(projected_key, centroids)  # (B, H, Lk)
    return query_clusters[..., :, None] == key_clusters[..., None, :]


def predicted_graph(
    point: OperatingPoint,
    projections: LayerProjections | None,
    query: torch.Tensor,
    key: torch.Tensor,
    self_attention: bool,
    positions: torch.Tensor | None = None,
    projected_key: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
    formed: bool = True,
    key_side: torch.Tensor | None = None,
) -> "torch.Tensor | NearestKeys":
    """The pairs an operating point predicts, before the fallback (see `effective_graph`).

    Args:
        point: The method, knob and window.
        projections: The layer's learned projections (``None`` is fine for the window method).
        query: ``(B, H, Lq, D)`` unscaled queries (as the attention function receives them).
        key: ``(B, H, Lk, D)``.
        self_attention: Whether queries and keys are positions of one sequence (windows need it).
        positions: ``(..., Lq)`` each query's position, for windows and the position term (default: teacher
            forcing's, `last_positions` in self-attention and 0 … Lq − 1 in cross-attention). Keys are at 0 … Lk − 1.
        projected_key: ``projections.project_keys(key)`` where made already (default: made here).
        allowed: bool, broadcastable to ``(B, H, Lq, Lk)``: the pairs a query may attend to, among which the nearest
            method chooses (default: all).
        formed: False: the nearest method without a window returns its `NearestKeys`, for the kernel to form.
        key_side: ``distance_key_side(projected_key)`` where made already (the distance methods).

    Returns:
        ``(B, H, Lq, Lk)`` bool (or `NearestKeys`, see ``formed``), or ``(Lq, Lk)`` for the window method.

    Raises:
        ValueError: For a window in cross-attention, or a number of clusters the projections have no centroids for.
    """
    uses_window = point.method == "window" or point.window is not None
    if uses_window and not self_attention:
        raise ValueError(f"{point.spec()}: windows exist in self-attention only, not in cross-attention")
    query_len, key_len = query.shape[-2], key.shape[-2]
    if positions is None:
        positions = (
            last_positions(query_len, key_len, query.device)
            if self_attention
            else torch.arange(query_len, device=query.device)
        )
    if point.method == "window":
        return window_graph(positions, key_len, int(point.knob))
    if projections is None:
        raise ValueError(f"{point.spec()} needs the learned projections of a Sparsefinder predictor")
    projected_query = projections.project_queries(query)
    if projected_key is None:
        projected_key = projections.project_keys(key)
    if point.method in ("distance", "nearest"):
        squared = projections.squared_distances(projected_query, projected_key, positions, key_side)
        if point.method == "distance":
            graph = distance_graph(squared, float(point.knob))
        elif formed or point.window is not None:
            graph = nearest_graph(squared, int(point.knob), allowed)
        else:
            # A graph carries no gradient: the bool one does not, nor do these distances.
            squared = squared.detach() if allowed is None else squared.detach().masked_fill(~allowed, float("inf"))
            return NearestKeys(squared, int(point.knob))
    elif point.method == "quantization":
        edges = bucket_edges(projections.quantiles.to(query.device), int(point.knob))
        graph = quantization_graph(projected_query, projected_key, edges)
    else:
        if int(point.knob) not in projections.centroids:
            raise ValueError(
                f"{point.spec()}: the predictor has centroids for clusters="
                f"{', '.join(map(str, sorted(projections.centroids)))} only"
            )
        centroids = projections.centroids[int(point.knob)].to(query.device)
        graph = cluster_graph(projected_query, projected_key, centroids)
    if point.window is not None:
        graph = graph | window_graph(positions, key_len, point.window)
    return graph


def effective_graph(predicted: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The pairs restricted attention computes: the predicted pairs a query may attend to, and every pair it may
    attend to when none of them is predicted (the fallback to the full row, so that no real query is left empty).

    Args:
        predicted: bool, broadcastable to ``(B, H, Lq, Lk)``.
        allowed: bool, broadcastable to ``(B, H, Lq, Lk)``: real keys, not in the future.

    Returns:
        ``(B, H, Lq, Lk)`` bool, a subset of ``allowed`` with a non-empty row wherever ``allowed``'s is.
    """
    graph = predicted & allowed
    empty = ~graph.any(-1, keepdim=True)  # (B, H, Lq, 1)
    return graph | (allowed & empty)


class PredictedSparsity:
    """What one attention module needs to attend over its predicted graph: the operating point and its layer's
    projections. Set on the modules by `apply_predicted_sparsity`; read by the model's attention function."""

    def __init__(
        self, point: OperatingPoint, projections: LayerProjections | None, self_attention: bool, causal: bool
    ) -> None:
        self.point, self.projections = point, projections
        self.self_attention, self.causal = self_attention, causal
        # Cross-attention's last keys (a weak reference), their projections and distance_key_side.
        self._projected_source: tuple[weakref.ref, torch.Tensor, torch.Tensor] | None = None

    def source_keys(self, key: torch.Tensor, cached: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``projections.project_keys(key)`` of cross-attention's keys and its `distance_key_side`, made once per
        input: while decoding, the keys are the encoder states cached at the first step, the same tensor at every
        later step, and projecting them anew at each step would cost more than the attention over them (``r``
        multiplications per key entry, where the scores take one per query).

        Args:
            key: ``(B, H, Lk, D)``.
            cached: Whether ``key`` is the cache's, filled at an earlier step (the projections of that step's keys are
                then still valid: a static cache refilled in place for a new input is not ``cached`` at its first
                step, and beam search's reordering moves beams among the identical source keys of one input only).
        """
        projected = self._projected_source
        if cached and projected is not None and projected[0]() is key:
            return projected[1], projected[2]
        projected_key = self.projections.project_keys(key)
        key_side = distance_key_side(projected_key)
        if not projected_key.requires_grad:  # in training, keeping them would keep the autograd graph alive
            self._projected_source = (weakref.ref(key), projected_key, key_side)
        return projected_key, key_side

    def graph(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        mask: torch.Tensor | None,
        query_start: int | torch.Tensor = 0,
        keys_cached: bool = False,
    ) -> "torch.Tensor | NearestKeys":
        """The pairs restricted attention computes (`effective_graph` of the prediction and the allowed pairs).

        Args:
            query: ``(B, H, Lq, D)`` unscaled queries.
            key: ``(B, H, Lk, D)``.
            mask: Additive mask broadcastable to ``(B, H, Lq, Lk)`` (0 keeps a key, −inf or the dtype's lowest value
                masks it), or ``None``.
            query_start: The position of the first query (the tokens already cached; in cross-attention the target
                tokens before it).
            keys_cached: Whether cross-attention's keys are the cache's, filled at an earlier decoding step
                (`source_keys`).

        Returns:
            ``(B, H, Lq, Lk)`` bool, or the nearest method's `NearestKeys` (without a window).
        """
        key_len = key.shape[-2]
        if self.projections is not None and self.projections.query.device != query.device:
            self.projections = self.projections.to(query.device)
        positions = torch.arange(query.shape[-2], device=query.device) + query_start  # (Lq,)
        if mask is None:
            allowed = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=query.device)
        else:
            allowed = ~is_masked(mask)
        if self.causal and allowed.shape[-1] == key_len:
            # A causal query's position is that of the last key it may see, itself: also where the keys are a static
            # cache longer than the sequence so far, or begin with left padding (distances count the padding, as
            # ALiBi's do, so they are the same as without it).
            key_indices = torch.arange(key_len, device=query.device)
            positions = torch.where(allowed, key_indices, 0).amax(-1)  # (B, 1 or H, Lq)
        projected_key = key_side = None
        if not self.self_attention and self.point.method in PROJECTION_METHODS and self.projections is not None:
            projected_key, key_side = self.source_keys(key, keys_cached)
        predicted = predicted_graph(
            self.point,
            self.projections,
            query,
            key,
            self.self_attention,
            positions,
            projected_key=projected_key,
            allowed=allowed,
            formed=False,
            key_side=key_side,
        )
        if isinstance(predicted, NearestKeys):
            # Each query's nearest keys are among those it may attend to, and it has some wherever it may attend to
            # any: the fallback has nothing to add.
            return predicted
        return effective_graph(predicted, allowed).expand(*query.shape[:-1], key_len)

    @staticmethod
    def graph_mask(graph: "torch.Tensor | NearestKeys", mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask that restricts attention to ``graph`` ``(B, H, Lq, Lk)`` (`graph`'s): ``mask`` (or 0, in
        ``dtype``) on the graph's pairs and on the pairs masked already, −inf on the pairs a query may attend to that
        the graph leaves out."""
        if isinstance(graph, NearestKeys):
            graph = graph.dense()
        if mask is None:
            mask = torch.zeros((1, 1, 1, 1), dtype=dtype, device=graph.device)
            dropped = ~graph
        else:
            dropped = ~is_masked(mask) & ~graph
        return mask.expand(graph.shape).masked_fill(dropped, float("-inf"))


def split_sparsity_settings(
    settings: "str | OperatingPoint | list | tuple | dict | None",
) -> tuple[OperatingPoint | None, dict[str, OperatingPoint]]:
    """What `set_predicted_sparsity` accepts, as the point for every attention type and those for named types.

    Args:
        settings: ``None`` (none), an operating point or its spec (for every attention type it applies to), a
            ``{attention_type: point or spec}`` dict, or a list of specs, each optionally ``TYPE=SPEC``
            (``"cross=distance:threshold=2"``; one without a type is for every type).

    Returns:
        ``(point for every type or None, {attention_type: point})``.

    Raises:
        ValueError: For an unknown attention type or a bad spec.
    """
    if settings is None:
        return None, {}
    if isinstance(settings, dict):
        items = list(settings.items())
    else:
        items = []
        for item in [settings] if isinstance(settings, (str, OperatingPoint)) else settings:
            kind, equals, spec = item.partition("=") if isinstance(item, str) else ("", "", item)
            # "distance:threshold=2" also has an "=": only a known attention type before it names one.
            items.append((kind.strip(), spec) if equals and ":" not in kind else (None, item))
    every_type, typed = None, {}
    for kind, point in items:
        if kind is not None and kind not in ATTENTION_TYPES:
            raise ValueError(f"unknown attention type {kind!r}; expected {', '.join(ATTENTION_TYPES)}")
        point = point if isinstance(point, OperatingPoint) else OperatingPoint.parse(point)
        if kind is None:
            every_type = point
        else:
            typed[kind] = point
    return every_type, typed


def apply_predicted_sparsity(
    model: torch.nn.Module,
    settings: "str | OperatingPoint | list | tuple | dict | None",
    predictor: "SparsefinderPredictor | str | os.PathLike | None" = None,
) -> dict[str, OperatingPoint]:
    """Make every attention module of ``model`` attend over its predicted graph (or, with ``None``, over all keys).

    Args:
        model: An AdaptiveEntmaxMarian model (its attention modules carry ``attention_type``, ``layer_idx`` and
            ``predicted_sparsity``).
        settings: See `split_sparsity_settings`. A point given for every type applies to the types it can: those
            the predictor has projections for (projection methods), the self-attention types (windows).
        predictor: The learned projections, their file, or the folder / Hub id holding ``sparsefinder.safetensors``;
            ``None`` loads the model's own (``model.name_or_path``) when a method needs one.

    Returns:
        The operating point now used by each attention type.

    Raises:
        ValueError: For a bad spec, a window in cross-attention, an attention type, layer or number of clusters the
            predictor does not have.
        OSError: If a predictor is needed and there is none.
    """
    modules = [module for module in model.modules() if hasattr(module, "predicted_sparsity")]
    every_type, points = split_sparsity_settings(settings)
    given = [point for point in (every_type, *points.values()) if point is not None]
    if isinstance(predictor, (str, os.PathLike)) or (
        predictor is None and any(point.method in PROJECTION_METHODS for point in given)
    ):
        predictor = SparsefinderPredictor.from_pretrained(predictor or model.name_or_path)
    available = set(predictor.layers) if predictor is not None else set()

    def applies(point: OperatingPoint, kind: str) -> str | None:
        """Why ``point`` cannot run in attention type ``kind`` (None: it can)."""
        if (point.method == "window" or point.window is not None) and kind not in SELF_ATTENTION_TYPES:
            return f"{point.spec()}: windows exist in self-attention only, not in {kind}"
        if point.method in PROJECTION_METHODS and kind not in available:
            return f"the Sparsefinder predictor has no projections for {kind}"
        return None

    for kind, point in points.items():
        if (reason := applies(point, kind)) is not None:
            raise ValueError(reason)
    if every_type is not None:
        kinds = {module.attention_type for module in modules} - set(points)
        points.update({kind: every_type for kind in kinds if applies(every_type, kind) is None})
        if not any(point is every_type for point in points.values()):
            raise ValueError(f"{every_type.spec()} applies to none of this model's attention types")
    for module in modules:
        point = points.get(module.attention_type)
        projections = None
        if point is not None and point.method in PROJECTION_METHODS:
            layers = predictor.layers[module.attention_type]
            if module.layer_idx >= len(layers) or layers[module.layer_idx].query.shape[0] != module.num_heads:
                raise ValueError(
                    f"the Sparsefinder predictor's {module.attention_type} projections do not fit this model "
                    f"({len(layers)} layers of {layers[0].query.shape[0]} heads): it was trained for another model"
                )
            projections = layers[module.layer_idx]
            if point.method == "clustering" and int(point.knob) not in projections.centroids:
                raise ValueError(
                    f"{point.spec()}: the predictor has centroids for clusters="
                    f"{', '.join(map(str, sorted(projections.centroids)))} only"
                )
        module.predicted_sparsity = (
            None
            if point is None
            else PredictedSparsity(
                point,
                projections,
                module.attention_type in SELF_ATTENTION_TYPES,
                module.attention_type == "decoder_self",
            )
        )
    return points


__all__ = [
    "MAX_BUCKETS",
    "METHODS",
    "METHOD_KNOBS",
    "PREDICTOR_FILE",
    "QUANTILE_STEPS",
    "LayerProjections",
    "NearestKeys",
    "OperatingPoint",
    "PredictedSparsity",
    "SparsefinderPredictor",
    "apply_predicted_sparsity",
    "bucket_edges",
    "cluster_graph",
    "distance_graph",
    "distance_key_side",
    "effective_graph",
    "last_positions",
    "nearest_centroid",
    "nearest_graph",
    "predicted_graph",
    "quantization_graph",
    "split_sparsity_settings",
    "squared_distances",
    "window_graph",
]
