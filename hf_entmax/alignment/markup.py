"""Carry inline markup from a source sentence into its translation through a word alignment.

Recognised tags: XML-like pairs ``<b>…</b>`` (any name, with attributes), self-closing ``<br/>``, and placeholders
``{1}…{/1}`` or a lone ``{1}``. A pair of tags encloses the source words between them; in the translation it encloses
the words aligned to those (from the first to the last, so the span stays contiguous). A lone tag goes before the
target word aligned to the source word that follows it. Every tag of the source appears exactly once in the result
and the result is well-formed: where aligned spans would cross, the one covering more source words is widened to
contain the other; a pair whose words are aligned to nothing is kept, empty, where its next aligned word went.
"""

import re
from dataclasses import dataclass

from ..errors import HfEntmaxValueError
from .pharaoh import Links


TAG = re.compile(r"<(/?)([A-Za-z][\w:.-]*)(?:\s[^<>]*?)?(/?)>|\{(/?)(\w+)\}")


@dataclass
class Tag:
    """One tag of a source line.

    Attributes:
        text: The tag as written.
        kind: ``"open"``, ``"close"`` or ``"lone"``.
        start, end: For an opening tag, the source words it encloses with its closing tag, ``[start, end)``; for a lone
            tag, ``start`` is the word it goes before or, with ``after``, after.
        partner: For an opening tag, the index of its closing tag in the line's tag list.
        after: A lone tag written right after a word (no space between) or after the last word: it follows that word.
        space_before, space_after: Whether whitespace surrounded the tag in the source, kept in the translation.
    """

    text: str
    kind: str
    start: int = 0
    end: int = 0
    partner: int | None = None
    after: bool = False
    space_before: bool = True
    space_after: bool = True


@dataclass
class MarkedLine:
    """A source line with its tags taken out: ``text`` is what the model reads."""

    text: str
    tags: list[Tag]


def has_markup(line: str) -> bool:
    """Whether ``line`` contains a tag `parse_markup` recognises."""
    return TAG.search(line) is not None


def parse_markup(line: str, where: str) -> MarkedLine:
    """Take the tags out of a source line, recording where each was among its words.

    A tag inside a word counts with the whole word.

    Args:
        where: The file and line, for the message.

    Raises:
        HfEntmaxValueError: For a closing tag without its opening one, or an XML-like opening tag never closed (a
            placeholder ``{n}`` without ``{/n}`` is a lone tag).
    """
    text, tags, names, open_tags = "", [], [], []
    places = []  # per tag: (words started before it, whether it touches the word before it)
    position = 0
    for match in TAG.finditer(line):
        text += line[position : match.start()]
        position = match.end()
        words_started = len(text.split())
        glued_before = bool(text) and not text[-1].isspace()
        places.append((words_started, glued_before))
        tag = Tag(
            text=match[0],
            kind="close" if match[1] or match[4] else "open",
            space_before=match.start() == 0 or line[match.start() - 1].isspace(),
            space_after=match.end() == len(line) or line[match.end()].isspace(),
        )
        name = ("<", match[2]) if match[2] else ("{", match[5])
        if tag.kind == "close":
            opener = next((index for index in reversed(open_tags) if names[index] == name), None)
            if opener is None:
                raise HfEntmaxValueError(f"{where}: {match[0]} closes a tag that was not opened")
            open_tags.remove(opener)
            tags[opener].end, tags[opener].partner = words_started, len(tags)
        elif match[3]:  # self-closing
            tag.kind = "lone"
        else:
            tag.start = words_started - 1 if glued_before else words_started
            open_tags.append(len(tags))
        tags.append(tag)
        names.append(name)
    text += line[position:]
    num_words = len(text.split())
    for index in open_tags:
        if names[index][0] == "<":
            raise HfEntmaxValueError(f"{where}: {tags[index].text} is never closed")
        tags[index].kind = "lone"  # a placeholder {n} without {/n}
    # Lone tags: where they stand among the words, now that the words after them are known.
    for tag, (words_started, glued_before) in zip(tags, places, strict=True):
        if tag.kind == "lone":
            tag.after = glued_before or words_started == num_words
            tag.start = words_started - 1 if tag.after else words_started
    return MarkedLine(text=" ".join(text.split()), tags=tags)


def transfer_markup(marked: MarkedLine, translation: str, links: Links) -> str:
    """The translation with the source's tags put in through ``links`` (source word, target word).

    Args:
        marked: The parsed source line (`parse_markup`).
        translation: The untagged translation; its words are whitespace-separated.
        links: Alignment links between ``marked.text``'s words and the translation's.
    """
    words = translation.split()
    targets_of: dict[int, list[int]] = {}
    for source, target in links:
        targets_of.setdefault(source, []).append(target)
    num_source = len(marked.text.split())

    def before_next_aligned(source_index: int) -> int:
        """Before the first target word aligned to this source word or a later one; the end without one."""
        aligned = next((targets_of[index] for index in range(source_index, num_source) if index in targets_of), None)
        return min(aligned) if aligned else len(words)

    def after_previous_aligned(source_index: int) -> int:
        """After the last target word aligned to this source word or an earlier one; the start without one."""
        aligned = next((targets_of[index] for index in range(source_index, -1, -1) if index in targets_of), None)
        return max(aligned) + 1 if aligned else 0

    spans: dict[int, list[int]] = {}  # opening tag index -> [start, end) over the translation's words
    lone: dict[int, int] = {}  # lone tag index -> the boundary it goes to (before word k; len(words): the end)
    for index, tag in enumerate(marked.tags):
        if tag.kind == "lone":
            lone[index] = after_previous_aligned(tag.start) if tag.after else before_next_aligned(tag.start)
        elif tag.kind == "open":
            aligned = [target for source in range(tag.start, tag.end) for target in targets_of.get(source, [])]
            start = min(aligned) if aligned else before_next_aligned(tag.end)
            spans[index] = [start, max(aligned) + 1 if aligned else start]
    _nest(spans, marked.tags)

    # Words and tags as tokens joined by single spaces, except where a tag was glued to its neighbour in the source:
    # an opening tag to the word after it, a closing tag to the word before it, a lone tag on either side.
    tokens: list[tuple[str, bool, bool]] = []  # (text, glued to the token before, glued to the token after)
    for boundary in range(len(words) + 1):
        for index in _tags_at(boundary, spans, lone, marked.tags):
            tag = marked.tags[index]
            glued_before = tag.kind != "open" and not tag.space_before
            tokens.append((tag.text, glued_before, tag.kind != "close" and not tag.space_after))
        if boundary < len(words):
            tokens.append((words[boundary], False, False))
    text = ""
    for position, (token, glued_before, _) in enumerate(tokens):
        if position and not glued_before and not tokens[position - 1][2]:
            text += " "
        text += token
    return text


def _tags_at(boundary: int, spans: dict[int, list[int]], lone: dict[int, int], tags: list[Tag]) -> list[int]:
    """The tags written at a boundary between target words, in order: closing tags (innermost first), empty pairs,
    lone tags, opening tags (outermost first)."""
    ending = [index for index, (start, end) in spans.items() if end == boundary and start < end]
    starting = [index for index, (start, end) in spans.items() if start == boundary and start < end]
    empty = [index for index, (start, end) in spans.items() if start == end == boundary]
    order = [tags[index].partner for index in sorted(ending, key=lambda index: -spans[index][0])]
    order += [tag for index in empty for tag in (index, tags[index].partner)]
    order += [index for index, target in lone.items() if target == boundary]
    order += sorted(starting, key=lambda index: -spans[index][1])
    return order


def _nest(spans: dict[int, list[int]], tags: list[Tag]) -> None:
    """Widen crossing spans until every two are nested or disjoint: the one covering more source words grows."""
    changed = True
    while changed:
        changed = False
        for first in spans:
            for second in spans:
                (a_start, a_end), (b_start, b_end) = spans[first], spans[second]
                if a_start < b_start < a_end < b_end:
                    size = {index: tags[index].end - tags[index].start for index in (first, second)}
                    outer, inner = (first, second) if size[first] >= size[second] else (second, first)
                    spans[outer] = [min(spans[outer][0], spans[inner][0]), max(spans[outer][1], spans[inner][1])]
                    changed = True


__all__ = ["MarkedLine", "Tag", "has_markup", "parse_markup", "transfer_markup"]
