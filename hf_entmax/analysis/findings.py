"""What a report says about a model's heads: headline numbers and plain sentences, from the statistics.

Findings are derived from the numbers with the named thresholds below, e.g. "2 of 4 encoder self-attention heads in
layer 0 attend to the previous token: head 1 with 96% of its mass (α 1.93, near sparsemax)". Attention types that
scale their queries (ASEntmax) add their β, γ and the factor δ + β·log(n + 1)^γ; the findings of other types read
exactly as they would without the option. Everything here is a pure function of a `ModelAnalysis` (or of the
summaries `summarize` returns), so it can be tested on constructed statistics; `report` writes it into report.json,
report.md and the model card.
"""

from typing import Any

import numpy as np
import torch

from ..common.config import describe_scaling_method
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES, ATTENTION_TYPES
from .collect import AttentionTypeStatistics, ModelAnalysis, QueryScaling


# A head with α above this is called near sparsemax (sparsemax is 2), below NEAR_SOFTMAX_ALPHA nearly dense (softmax
# is 1). α alone does not say how many weights are zero: with softmax-matched queries a head of α 1.9 can keep 80% of
# its keys. What a head does is its density: at most LOW_DENSITY means most of its keys get exact zeros.
NEAR_SPARSEMAX_ALPHA = 1.8
NEAR_SOFTMAX_ALPHA = 1.1
LOW_DENSITY = 0.5
# A head is positional / subword-merging when at least this much of its attention goes to the previous or next
# token / to the other pieces of the query's word, on average over queries.
ROLE_MASS = 0.5
# A head "sends most of its attention to one token" when one token type gets at least this share of it.
TOKEN_FOCUS_SHARE = 0.5
# ASEntmax's factor is also reported for inputs this many times longer than the longest analysed one.
LONG_INPUT_MULTIPLE = 8
# (statistic, what one head does, what several heads do)
ROLES = (
    ("previous_token_mass", "attends to the previous token", "attend to the previous token"),
    ("next_token_mass", "attends to the next token", "attend to the next token"),
    (
        "same_word_mass",
        "merges subwords, attending to the other pieces of the query's word",
        "merge subwords, attending to the other pieces of the query's word",
    ),
)
# Below this change over training, α counts as unchanged (a fixed α is logged too).
UNCHANGED_ALPHA = 0.005

# The terms of the findings and the tables, as report.json and report.md define them.
DEFINITIONS = {
    "alpha": "α of the head's α-entmax (1 = softmax, 2 = sparsemax); 1 for every head of a softmax model.",
    "density": "mean over queries of the fraction of the keys a query may attend to (not padding, not future "
    "tokens) that get a non-zero weight; exact zeros count as zeros.",
    "largest_weight": "mean over queries of the largest weight a query gives a key (1: all its mass on one key; "
    "1/n: spread evenly over n). A cross-attention head that aligns target words with the source words they "
    "translate keeps it high; one that has not found them spreads its mass, dense or sparse.",
    "js_divergence": "mean over queries of the mean Jensen–Shannon divergence between the layer's pairs of heads, "
    "in bits (base 2, so in [0, 1]; 0 for identical heads).",
    "previous_token_mass": "mean probability a query puts on the token just before it (self-attention only).",
    "next_token_mass": "mean probability a query puts on the token just after it (self-attention only; never "
    "defined in decoder self-attention, which cannot see the future).",
    "same_word_mass": "mean probability a query puts on the other subword pieces of its own word, over queries "
    "whose word has several pieces (self-attention only; a piece starting with ▁ begins a word).",
    "top_tokens": "the token types that receive the largest share of the head's attention, summed over queries.",
}
SCALING_DEFINITIONS = {
    "scaling": "Learned query scaling (attention types with attention_scaling 'asentmax', 'asentmax_per_token' or "
    "'ssmax'): before α-entmax, head h multiplies a query that may attend to n keys (real source tokens; the causal "
    "prefix in decoder self-attention) by δ + β_h · log(n + 1)^γ_h, with β_h and γ_h learned and the offset δ fixed "
    "(SSMax: s_h · log(n + 1), i.e. β = s, γ = 1, δ = 0; per-token ASEntmax: β and γ computed from each query token, "
    "reported as each head's mean over the analysed tokens; heads left unscaled, as NAPE's ALiBi heads, keep 1). "
    "The factor "
    "is monotonic in n: it grows with n (the head sharpens, attending to fewer keys, on longer inputs) where "
    "β·γ > 0 and shrinks (the head softens) where β·γ < 0; at 1 the scores are those of an unscaled head. "
    f"Reported at the numbers of keys the queries of the analysed sentences saw, and at {LONG_INPUT_MULTIPLE}× "
    "the largest of them.",
}


def mean_sparsity(analysis: ModelAnalysis) -> dict[str, float]:
    """Share of exact zeros per attention type: 1 − the mean density (see `DEFINITIONS`), so that a model card and
    an analysis report of the same model and sentences print the same number.

    Averaged over queries within each head, then over heads and layers, as the density is.
    """
    return {kind: 1.0 - statistics.density.nanmean().item() for kind, statistics in analysis.attention.items()}


def summarize(analysis: ModelAnalysis) -> dict[str, dict[str, Any]]:
    """Headline numbers per attention type: α range and mean, mean density, largest weight and JS divergence, role
    counts."""
    summary = {}
    for kind, statistics in analysis.attention.items():
        alpha = statistics.alpha
        summary[kind] = {
            "mean_alpha": round(alpha.mean().item(), 4),
            "min_alpha": round(alpha.min().item(), 4),
            "max_alpha": round(alpha.max().item(), 4),
            "mean_density": round(statistics.density.nanmean().item(), 4),
            "mean_largest_weight": round(statistics.largest_weight.nanmean().item(), 4),
            "mean_js_divergence": round(statistics.js_divergence.mean().item(), 4),
            "heads": alpha.numel(),
            "near_sparsemax_heads": int((alpha > NEAR_SPARSEMAX_ALPHA).sum()),
            "low_density_heads": int((statistics.density <= LOW_DENSITY).sum()),
            "positional_heads": len(_role_heads(statistics, "previous_token_mass", "next_token_mass")),
            "subword_heads": len(_role_heads(statistics, "same_word_mass")),
        }
        if statistics.scaling is not None:
            summary[kind]["scaling"] = _scaling_summary(statistics.scaling)
    return summary


def _scaling_summary(scaling: QueryScaling) -> dict[str, Any]:
    """ASEntmax's β, γ and factor of one attention type, in numbers: see ``SCALING_DEFINITIONS``."""
    trend = scaling.beta * scaling.gamma  # (layers, heads): the sign of d factor / d n
    if scaling.scaled_heads is not None:
        trend = trend * scaling.scaled_heads  # a head left unscaled keeps a factor of 1
    fewest, most = scaling.key_counts
    long_keys = LONG_INPUT_MULTIPLE * most
    # The factor is monotonic in n, so over the sample's n it spans the values at the fewest and the most keys.
    sample_factors, long_factors = scaling.factor([fewest, most]), scaling.factor(long_keys)  # (layers, heads, 2|1)
    return {
        "offset": scaling.offset,
        "mean_beta": round(scaling.beta.mean().item(), 4),
        "mean_gamma": round(scaling.gamma.mean().item(), 4),
        "sharpening_heads": int((trend > 0).sum()),
        "softening_heads": int((trend < 0).sum()),
        "key_counts": [fewest, most],
        "factor_range": [round(sample_factors.min().item(), 4), round(sample_factors.max().item(), 4)],
        "long_keys": long_keys,
        "long_factor_range": [round(long_factors.min().item(), 4), round(long_factors.max().item(), 4)],
    }


def findings(analysis: ModelAnalysis) -> list[str]:
    """Plain sentences about one model's heads, from its numbers and the module's thresholds."""
    sentences = []
    matched = [
        ATTENTION_TITLES[kind]
        for kind, statistics in analysis.attention.items()
        if statistics.scaling_method == "softmax_matched"
    ]
    if matched:
        titles = _join([matched[0], *(title.lower() for title in matched[1:])])
        sentences.append(
            f"{titles} {_verb(matched, 'scales its', 'scale their')} queries by n^(1 − α) for n keys "
            "(softmax_matched): near uniform attention every head is as sharp as softmax whatever its α, so α shapes "
            "how weights fall to zero and the density, not α, says how sparse a head is."
        )
    for kind, statistics in analysis.attention.items():
        title, noun = ATTENTION_TITLES[kind], ATTENTION_TITLES[kind].lower()
        alpha, density = statistics.alpha, statistics.density
        if bool((alpha == 1).all()):
            sentences.append(
                f"{title}: softmax (α = 1 in every head); {percent(density.nanmean())} of the weights a query may "
                "use are non-zero."
            )
        else:
            sentences.append(
                f"{title}: α from {alpha.min():.2f} to {alpha.max():.2f} (mean {alpha.mean():.2f}); a query gives "
                f"a non-zero weight to {percent(density.nanmean())} of the tokens it may attend to, on average "
                "(softmax: 100%)."
            )
        if statistics.scaling is not None:
            sentences += _scaling_findings(title, statistics.scaling)
        num_layers, num_heads = alpha.shape
        for layer in range(num_layers):
            where = f"{noun} heads in layer {layer}"
            near_sparsemax = [head for head in range(num_heads) if alpha[layer, head] > NEAR_SPARSEMAX_ALPHA]
            if near_sparsemax:
                listed = _join(
                    f"{head} (α {alpha[layer, head]:.2f}, density {percent(density[layer, head])})"
                    for head in near_sparsemax
                )
                sentences.append(
                    f"{_count(near_sparsemax, num_heads)} {where} {_verb(near_sparsemax, 'is', 'are')} near "
                    f"sparsemax (α > {NEAR_SPARSEMAX_ALPHA}): {_heads(near_sparsemax)} {listed}."
                )
            low_density = [head for head in range(num_heads) if density[layer, head] <= LOW_DENSITY]
            if low_density:
                listed = _join(
                    f"{head} (density {percent(density[layer, head])}, α {alpha[layer, head]:.2f})"
                    for head in low_density
                )
                sentences.append(
                    f"{_count(low_density, num_heads)} {where} {_verb(low_density, 'gives', 'give')} exact zeros to "
                    f"most keys (density ≤ {percent(LOW_DENSITY)}): {_heads(low_density)} {listed}."
                )
            dense = [head for head in range(num_heads) if 1 < alpha[layer, head] < NEAR_SOFTMAX_ALPHA]
            if dense:
                listed = _join(f"{head} (α {alpha[layer, head]:.2f})" for head in dense)
                sentences.append(
                    f"{_count(dense, num_heads)} {where} {_verb(dense, 'is', 'are')} nearly dense "
                    f"(α < {NEAR_SOFTMAX_ALPHA}): "
                    f"{_heads(dense)} {listed}."
                )
            for statistic, *verbs in ROLES:
                values = getattr(statistics, statistic)
                if values is None:
                    continue
                heads = [head for head in range(num_heads) if values[layer, head] >= ROLE_MASS]
                if heads:
                    listed = _join(
                        f"head {head} with {percent(values[layer, head])} of its mass "
                        f"({_alpha_note(alpha[layer, head])})"
                        for head in heads
                    )
                    sentences.append(f"{_count(heads, num_heads)} {where} {_verb(heads, *verbs)}: {listed}.")
            focused = [
                (head, *statistics.top_tokens[layer][head][0])
                for head in range(num_heads)
                if statistics.top_tokens[layer][head] and statistics.top_tokens[layer][head][0][1] >= TOKEN_FOCUS_SHARE
            ]
            if focused:
                listed = _join(
                    f"head {head} to {inline_code(token)} ({percent(share)})" for head, token, share in focused
                )
                sends = _verb(focused, "sends most of its", "send most of their")
                sentences.append(f"{_count(focused, num_heads)} {where} {sends} attention to one token: {listed}.")
        divergence = statistics.js_divergence
        if num_layers > 1:
            high, low = int(divergence.argmax()), int(divergence.argmin())
            sentences.append(
                f"{title}: head diversity (JS divergence between heads) is highest in layer {high} "
                f"({divergence[high]:.2f} bits) and lowest in layer {low} ({divergence[low]:.2f} bits)."
            )
        else:
            sentences.append(f"{title}: head diversity (JS divergence between heads) is {divergence[0]:.2f} bits.")
    sentences += _trajectory_findings(analysis)
    return sentences


def comparison_findings(models: list[dict[str, Any]]) -> list[str]:
    """Sentences that compare the models of a report (``report.json``'s ``models`` entries) per attention type."""
    sentences = []
    for kind in ATTENTION_TYPES:
        summaries = [(model["name"], model["summary"][kind]) for model in models]
        title = ATTENTION_TITLES[kind]
        sentences.append(
            f"{title}, density: "
            + ", ".join(f"{name} {percent(summary['mean_density'])}" for name, summary in summaries)
            + "; largest weight: "
            + ", ".join(f"{name} {summary['mean_largest_weight']:.2f}" for name, summary in summaries)
            + "; head diversity (JS): "
            + ", ".join(f"{name} {summary['mean_js_divergence']:.2f}" for name, summary in summaries)
            + " bits; positional heads: "
            + ", ".join(f"{name} {summary['positional_heads']}" for name, summary in summaries)
            + "."
        )
    return sentences


def percent(value: float | torch.Tensor | None) -> str:
    """A share (0.42) as a whole percentage ("42%"); "–" when it is undefined (None or NaN, e.g. a statistic no
    query of the sample defines)."""
    value = float(value) if value is not None else float("nan")
    return "–" if value != value else f"{100 * value:.0f}%"


def inline_code(token: str) -> str:
    """A token as inline code that survives a markdown table cell."""
    return "`" + token.replace("`", "'").replace("|", "\\|") + "`"


def _trajectory_findings(analysis: ModelAnalysis) -> list[str]:
    if not analysis.alpha_history:
        return []
    first, last = analysis.alpha_history[0], analysis.alpha_history[-1]
    steps = f"steps {first['step']:,}–{last['step']:,}"
    kinds = [kind for kind in ATTENTION_TYPES if kind in first and kind in last]
    changes = {kind: np.array(last[kind]) - np.array(first[kind]) for kind in kinds}  # (layers, heads) each
    if not kinds or max(np.abs(change).max() for change in changes.values()) < UNCHANGED_ALPHA:
        return [f"α did not change over training ({steps})."]
    means = ", ".join(
        f"{np.mean(first[kind]):.2f} → {np.mean(last[kind]):.2f} in {ATTENTION_TITLES[kind].lower()}" for kind in kinds
    )
    kind = max(kinds, key=lambda kind: np.abs(changes[kind]).max())
    layer, head = np.unravel_index(np.abs(changes[kind]).argmax(), changes[kind].shape)
    return [
        f"Over training ({steps}), mean α went {means}; α moved most in {ATTENTION_TITLES[kind].lower()} layer "
        f"{layer} head {head}: {first[kind][layer][head]:.2f} → {last[kind][layer][head]:.2f}."
    ]


def _scaling_findings(title: str, scaling: QueryScaling) -> list[str]:
    """How one attention type's heads scale their queries with the number of keys (``SCALING_DEFINITIONS``)."""
    numbers = _scaling_summary(scaling)
    beta, gamma = scaling.beta, scaling.gamma
    num_heads = beta.numel()
    constant = num_heads - numbers["sharpening_heads"] - numbers["softening_heads"]
    fewest, most = numbers["key_counts"]
    long_keys = numbers["long_keys"]
    keys = f"{fewest} key" if fewest == most == 1 else f"{fewest}–{most} keys" if fewest < most else f"{most} keys"
    heads = "" if scaling.scaled_heads is None else f" in {int(scaling.scaled_heads.sum())} heads of each layer"
    if scaling.method == "ssmax":
        values = f"s from {beta.min():.2f} to {beta.max():.2f}"
    else:
        values = f"β from {beta.min():.2f} to {beta.max():.2f}, γ from {gamma.min():.2f} to {gamma.max():.2f}"
        if scaling.method == "asentmax_per_token":
            values += " (each head's mean over the analysed tokens)"
    factor = describe_scaling_method(scaling.method, scaling.offset, scaling.projection_bias)
    sentences = [
        f"{title} scales its queries{heads} by {factor}: "
        f"{numbers['sharpening_heads']} of {num_heads} heads sharpen as inputs grow (β·γ > 0), "
        f"{numbers['softening_heads']} soften (β·γ < 0)"
        + (f", {constant} keep a constant factor" if constant else "")
        + f"; {values}. "
        f"The factor spans {_range(numbers['factor_range'])} at the {keys} a query may attend to in these sentences "
        f"and {_range(numbers['long_factor_range'])} at {long_keys} keys ({LONG_INPUT_MULTIPLE}× the longest)."
    ]
    at_most, at_long = scaling.factor([most, long_keys]).unbind(-1)  # (layers, heads) each
    layer, head = np.unravel_index((at_long - at_most).abs().argmax().item(), at_most.shape)
    if at_long[layer, head] != at_most[layer, head]:
        sentences.append(
            f"{title}: the factor changes most in layer {layer} head {head} (β {beta[layer, head]:.2f}, "
            f"γ {gamma[layer, head]:.2f}): {at_most[layer, head]:.2f} at {most} keys → {at_long[layer, head]:.2f} at "
            f"{long_keys}."
        )
    return sentences


def _range(bounds: list[float]) -> str:
    return f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def _role_heads(statistics: AttentionTypeStatistics, *names: str) -> list[tuple[int, int]]:
    """``(layer, head)`` of the heads with at least `ROLE_MASS` in any of the named statistics."""
    masks = [getattr(statistics, name) >= ROLE_MASS for name in names if getattr(statistics, name) is not None]
    if not masks:
        return []
    return [tuple(index) for index in torch.stack(masks).any(0).nonzero().tolist()]


def _alpha_note(alpha: torch.Tensor) -> str:
    return f"α {alpha:.2f}" + (", near sparsemax" if alpha > NEAR_SPARSEMAX_ALPHA else "")


def _count(items: list, total: int) -> str:
    return f"{len(items)} of {total}"


def _verb(items: list, singular: str, plural: str) -> str:
    return singular if len(items) == 1 else plural


def _heads(items: list) -> str:
    return "head" if len(items) == 1 else "heads"


def _join(parts) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


__all__ = [
    "DEFINITIONS",
    "LONG_INPUT_MULTIPLE",
    "LOW_DENSITY",
    "NEAR_SOFTMAX_ALPHA",
    "NEAR_SPARSEMAX_ALPHA",
    "ROLE_MASS",
    "SCALING_DEFINITIONS",
    "TOKEN_FOCUS_SHARE",
    "comparison_findings",
    "findings",
    "inline_code",
    "mean_sparsity",
    "percent",
    "summarize",
]
