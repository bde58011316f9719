"""From a target-by-source matrix of attention mass to word alignment links.

A link (i, j) says source word i and target word j translate each other. The rule is the same for every model:
target word j is linked to each source word that gets more than ``threshold`` of its attention. With α-entmax the
natural threshold is 0, the head's exact support: words outside it get exactly zero. A softmax head gives every word
some mass, so it needs a threshold above 0 to leave any word out; ``None`` links each target word to its single most
attended source word instead (none when that is the end-of-sentence token).
"""

import torch


def links_from_weights(weights: torch.Tensor, threshold: float | None) -> list[tuple[int, int]]:
    """The links of one sentence pair.

    Args:
        weights: ``(target words, source words + 1)`` attention mass, the last column on the end-of-sentence token;
            a row of zeros (a word the tokenizer gave no piece) is linked to nothing.
        threshold: Link every source word with more mass than this; None: the most attended one only.

    Returns:
        ``(source index, target index)`` pairs, sorted.
    """
    num_source = weights.shape[-1] - 1
    if threshold is None:
        best = weights.argmax(-1).tolist()  # (target words,)
        # A word with no attention at all (no pieces: the tokenizer dropped it) has no most attended word.
        attended = (weights.sum(-1) > 0).tolist()
        links = [(source, target) for target, source in enumerate(best) if source < num_source and attended[target]]
    else:
        target_index, source_index = torch.nonzero(weights[:, :num_source] > threshold, as_tuple=True)
        links = list(zip(source_index.tolist(), target_index.tolist(), strict=True))
    return sorted(links)


__all__ = ["links_from_weights"]
