"""Document-level training examples: consecutive sentence pairs of one document joined into one example.

Translating a paragraph with a model that only ever saw single sentences is what breaks it (it writes one sentence
for the paragraph); training on joined neighbours as well is the concatenation approach of document-level MT
(Tiedemann & Scherrer 2017; Junczys-Dowmunt 2019). `hf-entmax train --document_context N` keeps every sentence pair
and adds joined examples of 2 … N consecutive pairs, never across a document boundary:

- local files: the line (row) order is the document order, and a pair whose source and target are both empty (an
  empty line in both text files, an empty row of a table) ends a document;
- ``--dataset_name``: consecutive rows with the same value in ``--document_column`` form a document.

The joined examples are chosen without randomness, so that a run and its resumption see the same data: ``round(N ×
ratio)`` windows start at evenly spaced pairs, their lengths cycling through 2 … ``max_sentences``, each cut at its
document's end (a window left with one pair is dropped). Sources are joined with a space, and so are targets.
"""

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, Features, Translation

from ..errors import HfEntmaxValueError


logger = logging.getLogger(__name__)

DOCUMENT = "document"  # the column of document numbers that a split read for joining carries beside `translation`


def boundary_documents(boundaries: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Document numbers of pairs read in order, where a ``True`` in ``boundaries`` (an empty pair) ends a document.

    Returns:
        ``(num_pairs,)`` int64: 0 for the first document's pairs, 1 for the next, ...
    """
    return np.cumsum(np.asarray(pc.fill_null(boundaries, False), dtype=np.int64))


def column_documents(ids: pa.Array | pa.ChunkedArray, description: str, column: str) -> np.ndarray:
    """Document numbers from a column of document ids: consecutive rows with the same id form one document.

    Raises:
        HfEntmaxValueError: If a row has no id, naming the column and the 1-based row.
    """
    ids = pa.chunked_array([ids]) if isinstance(ids, pa.Array) else ids
    missing = pc.indices_nonzero(pc.is_null(ids)).to_pylist()
    if missing:
        raise HfEntmaxValueError(
            f"{description}: --document_column {column!r} has no document id in row {missing[0] + 1} "
            f"({len(missing):,} rows without one); every row needs the id of its document"
        )
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    changed = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    return np.concatenate([[0], np.cumsum(np.asarray(changed, dtype=np.int64))])


def join_documents(split: Dataset, max_sentences: int, ratio: float, description: str) -> Dataset:
    """The split's sentence pairs, then ``round(len(split) × ratio)`` (at least one) examples of 2 … ``max_sentences``
    consecutive pairs of one document joined (fewer where windows are cut to one pair at a document's end).

    Args:
        split: A ``translation`` column and a `DOCUMENT` column of document numbers, in document order.
        max_sentences: The most pairs joined into one example (≥ 2).
        ratio: Joined examples per sentence pair, in (0, 1].
        description: What the split is, for messages.

    Returns:
        A dataset with the ``translation`` column alone: the sentence pairs first, the joined examples after them.

    Raises:
        HfEntmaxValueError: If no document has two pairs, so that nothing can be joined, or every window falls on a
            document's last pair.
    """
    table = split.with_format("arrow")[:]
    translation = table.column("translation").combine_chunks()
    documents = np.asarray(table.column(DOCUMENT), dtype=np.int64)
    num_pairs = len(documents)
    # Where each pair's document ends (exclusive), from the start of the next document.
    starts = np.flatnonzero(np.diff(documents, prepend=-1))
    document_ends = np.append(starts[1:], num_pairs)[np.searchsorted(starts, np.arange(num_pairs), side="right") - 1]
    if not (np.diff(np.append(starts, num_pairs)) >= 2).any():
        raise HfEntmaxValueError(
            f"{description}: --document_context found no document of two or more pairs to join "
            f"({len(starts):,} documents of {num_pairs:,} pairs): it needs the pairs in document order, a document's "
            "sentences one after another (in local files an empty pair ends a document; with --dataset_name, "
            "--document_column names the document of each row)"
        )
    num_windows = max(1, round(num_pairs * ratio))
    window_starts = (np.arange(num_windows) * num_pairs) // num_windows
    window_lengths = 2 + np.arange(num_windows) % (max_sentences - 1)
    window_ends = np.minimum(window_starts + window_lengths, document_ends[window_starts])
    kept = window_ends - window_starts >= 2
    if not kept.any():
        raise HfEntmaxValueError(
            f"{description}: the {num_windows:,} joined example(s) that --document_context_ratio {ratio:g} asks of "
            f"{num_pairs:,} pairs all start at a document's last pair; give a larger ratio"
        )
    window_starts, window_ends = window_starts[kept], window_ends[kept]
    languages = [translation.type.field(index).name for index in range(translation.type.num_fields)]
    joined = []
    for index in range(len(languages)):
        side = pc.struct_field(translation, index).to_pylist()
        joined.append([" ".join(side[start:end]) for start, end in zip(window_starts, window_ends, strict=True)])
    examples = pa.concat_arrays(
        [translation, pa.StructArray.from_arrays([pa.array(texts, pa.string()) for texts in joined], names=languages)]
    )
    lengths = window_ends - window_starts
    logger.info(
        f"document context: {description} trains on its {num_pairs:,} pairs and {len(lengths):,} joined examples "
        f"of {lengths.min()}–{lengths.max()} pairs (mean {lengths.mean():.2f}) from {len(starts):,} documents"
    )
    features = Features({"translation": Translation(languages=languages)})
    return Dataset.from_dict({"translation": examples}, features=features)
