"""Word alignments from cross-attention: `align_pairs` (what `hf-entmax align` runs), the gold-free head choice, the
Pharaoh format with alignment error rate, and markup transfer through an alignment."""

from .align import Alignments, align_pairs
from .heads import HeadChoice, choose_heads
from .markup import parse_markup, transfer_markup
from .pharaoh import AlignmentScores, alignment_scores, format_links, parse_links
from .words import WordAttention, word_cross_attention


__all__ = [
    "AlignmentScores",
    "Alignments",
    "HeadChoice",
    "WordAttention",
    "align_pairs",
    "alignment_scores",
    "choose_heads",
    "format_links",
    "parse_links",
    "parse_markup",
    "transfer_markup",
    "word_cross_attention",
]
