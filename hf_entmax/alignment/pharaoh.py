"""The Pharaoh alignment format, and alignment error rate against gold alignments.

A Pharaoh line lists the links of one sentence pair as ``i-j`` (0-based source word i, target word j), separated by
spaces. Gold standards also mark *possible* links, the ones annotators were unsure of: ``i?j`` (or ``ipj``, as in
awesome-align's test sets); ``i-j`` is a *sure* link. AER (Och & Ney, 2003) counts a predicted link right when it is
possible (sure links are possible too) and a sure link found when it is predicted:
AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import HfEntmaxValueError


Links = list[tuple[int, int]]

_LINK = re.compile(r"(\d+)([-?p])(\d+)")


def format_links(links: Iterable[tuple[int, int]]) -> str:
    """``[(0, 1), (2, 2)]`` → ``"0-1 2-2"``."""
    return " ".join(f"{source}-{target}" for source, target in links)


def parse_links(line: str, where: str) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The sure and the possible links of one Pharaoh line (the sure ones are in both sets).

    Args:
        where: The file and line, for the message (``gold.txt, line 3``).

    Raises:
        HfEntmaxValueError: For a field that is not ``i-j``, ``i?j`` or ``ipj``.
    """
    sure, possible = set(), set()
    for field in line.split():
        match = _LINK.fullmatch(field)
        if match is None:
            raise HfEntmaxValueError(
                f"{where}: {field!r} is not an alignment link; expected i-j (sure) or i?j / ipj (possible), "
                "0-based word indices"
            )
        link = (int(match[1]), int(match[3]))
        possible.add(link)
        if match[2] == "-":
            sure.add(link)
    return sure, possible


@dataclass(frozen=True)
class AlignmentScores:
    """Precision, recall and alignment error rate of predicted links against gold ones, over a corpus."""

    precision: float
    recall: float
    aer: float

    def to_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "aer": self.aer}


def alignment_scores(
    predicted: Sequence[Iterable[tuple[int, int]]],
    sure: Sequence[set[tuple[int, int]]],
    possible: Sequence[set[tuple[int, int]]] | None = None,
) -> AlignmentScores:
    """Score predicted links against gold ones, pooled over all sentence pairs (as AER is reported).

    Args:
        predicted: The links of each pair.
        sure: The gold sure links of each pair.
        possible: The gold possible links of each pair (sure ones included); None: the sure links.

    Raises:
        HfEntmaxValueError: If the lists differ in length, or there are no gold sure links to recall.
    """
    possible = sure if possible is None else possible
    if not len(predicted) == len(sure) == len(possible):
        raise HfEntmaxValueError(
            f"{len(predicted)} predicted alignments for {len(sure)} gold ones: give one line per sentence pair"
        )
    num_predicted = num_sure = found_sure = found_possible = 0
    for links, gold_sure, gold_possible in zip(predicted, sure, possible, strict=True):
        links = set(links)
        num_predicted += len(links)
        num_sure += len(gold_sure)
        found_sure += len(links & gold_sure)
        found_possible += len(links & gold_possible)
    if num_sure == 0:
        raise HfEntmaxValueError("the gold alignments have no sure links: there is nothing to measure recall on")
    precision = found_possible / num_predicted if num_predicted else 0.0
    return AlignmentScores(
        precision=precision,
        recall=found_sure / num_sure,
        aer=1.0 - (found_sure + found_possible) / (num_predicted + num_sure),
    )


__all__ = ["AlignmentScores", "Links", "alignment_scores", "format_links", "parse_links"]
