"""Translation of inputs longer than training: softmax vs adaptive α-entmax vs ASEntmax, on joined Multi30k sentences.

    python benchmarks/bench_length_translation.py --data_dir ../shared/data/multi30k [--direction de-en]
        [--variants softmax adaptive asentmax] [--positions sinusoidal rope] [--document_context 1 3]
        [--seeds 0 1 2] [--max_steps 1200] [--joins 1 2 4 8] [--runs_dir benchmarks/outputs/quality]
        [--markdown docs/benchmarks.md]

1. Training. Each variant and seed is one run of `benchmarks/bench_quality.py` (called as a command): `hf-entmax
   train` with the `small` preset, its default recipe, ``--max_steps`` × batch ``--batch_size`` on Multi30k sentence
   pairs, and only the flags that define the variant: `softmax` (α = 1 fixed), `adaptive` (learned α and
   softmax-matched queries, the defaults) and `adaptive-unscaled` (learned α, no query scaling: the paper's model)
   as bench_quality defines them, and `asentmax` = `adaptive` with ``--attention_scaling asentmax`` in place of the
   softmax-matched queries, and `sparsemax-cross` = `adaptive-unscaled` with α = 2 fixed in cross-attention
   (sparsemax there: the sparsest source attention, for Sparsefinder). Each variant is trained with every
   ``--positions`` (`POSITIONS`: sinusoidal, the default; rope; nape; nape-split and alibi-split, ALiBi's encoder
   heads given one side each; and with a position term in cross-attention, ``-cross`` the same as self-attention's,
   ``-cross-nape`` NAPE's distance penalty, ``-cross-alibi`` ALiBi's on every head with its smaller slopes:
   rope-cross, nape-split-cross, sinusoidal-cross-nape, rope-cross-nape, rope-cross-alibi)
   and every ``--document_context`` N (1: sentences only, the default; N > 1: `hf-entmax train --document_context
   N`, which adds examples of 2 … N consecutive training pairs joined); a run's name adds ``+POSITIONS`` and
   ``+docN`` to the variant's where they are not the defaults. Runs already finished in ``--runs_dir`` are read, not
   repeated, and a run stopped before it finished resumes from its last checkpoint (bench_quality's); the default is
   bench_quality's own folder, so its softmax and adaptive runs of the same steps and seeds serve both benchmarks. A
   reused run is checked: its attention settings, steps, batch size and seed must be this benchmark's.
2. Longer inputs. The test set (`test_2016_flickr`, 1,000 sentences) is cut into consecutive groups of k sentences
   (k in ``--joins``; a last incomplete group is left out); each group's sources joined with a space make one input
   line, its references joined likewise the reference. k = 1 is the ordinary test set.
3. Scoring. `hf-entmax translate --reference … --metrics_file …` translates each input file with the model's
   generation settings (beam 4, as in training's evaluation), ``--max_new_tokens`` k × ``--max_new_tokens_per_join``
   (64: 1.7× the longest test reference, 37 tokens) but at most the model's positions − 1 (sinusoidal positions; the
   others have no limit), and scores sacreBLEU BLEU and chrF against the joined references. Translations already
   scored are read, not repeated. On long inputs a model trained on sentences often repeats itself until the limit,
   so the limit, not the model, sets most of the cost: a limit far beyond any reference only makes those outputs
   longer and slower. ``--test_sentences N`` uses the first N test sentences (a multiple of the largest k keeps every
   group). With ``--lines_per_input N`` each group is translated instead as a paragraph of k lines, N lines at a time
   (`hf-entmax translate --paragraphs --lines_per_input N`, each input at most N × 64 new tokens), the translations
   joined on the group's line: the way to translate a long document with a model trained on up to N sentences.
   With ``--match_sentences`` (`hf-entmax translate --match_sentences`) no translation may end before it has as many
   sentence ends as its input (its outputs and scores are kept apart, ``k{k}-matched``).

4. Sparsefinder (with ``--sparsefinder_k K``): for each run, `hf-entmax sparsefinder` learns to predict each head's
   α-entmax graph on the validation set (`val`) joined K sentences at a time (its first ``--sparsefinder_train``
   inputs, the next ``--sparsefinder_heldout`` held out; its distance and nearest methods) and chooses, per
   attention type, the sparsest point with held-out recall ≥ ``--sparsefinder_target_recall`` (0.95) and mass kept ≥
   ``--sparsefinder_target_mass`` (0: any); the test inputs of every k ≥ K are then translated twice more,
   with full attention and with attention restricted to the predicted graphs (as `translate --sparsefinder` does)
   of the attention types in ``--sparsefinder_types`` (all three by default; the others attend over every key),
   in one process with the model loaded once, each timed. A second table (``table:length-translation-sparsefinder``)
   gives each type's chosen point, its held-out sparsity, recall and mass kept, and BLEU and time of restricted
   against full translation; with ``--equal_tokens_per_join N`` also the time of both decoding every input to exactly
   k × N tokens (translations of different lengths are different work).

Positions: Marian's sinusoidal position vectors are fixed, not learned, but a model trained on single sentences has
only ever read the positions its training sentences reach (the output states the longest); joined inputs go beyond
them on both sides, in every variant alike. What the benchmark asks is whether attention that stays focused as the
input grows (α-entmax, and ASEntmax's length-scaled queries) copes better with that than softmax.

Everything run is logged in ``--output_dir``/commands.log (bench_quality's own log is in ``--runs_dir``); the table is
printed, saved with the per-seed scores in ``--output_dir``/results.json, and with ``--markdown docs/benchmarks.md``
written between the markers ``table:length-translation``.
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch
from bench_quality import VARIANTS as QUALITY_VARIANTS
from bench_quality import mean_and_spread, mean_difference
from runs import MULTI30K_SPLITS, MULTI30K_TEST, benchmark_log, joined_corpus, joined_lines, run
from tables import measured_command, write_tables

from hf_entmax import AdaptiveEntmaxMarianConfig
from hf_entmax.commands.translate import load_translation_model, translate_lines, use_operating_point
from hf_entmax.common.model_folder import load_tokenizer
from hf_entmax.modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES, position_limit
from hf_entmax.modeling.sentence_ends import count_sentence_ends
from hf_entmax.training.metrics import corpus_scores


TABLE = "length-translation"
SPARSEFINDER_TABLE = "length-translation-sparsefinder"
# The held-out recall and mass kept the chosen Sparsefinder points must reach, unless --sparsefinder_target_* say else.
SPARSEFINDER_TARGETS = (0.95, 0.0)
# Sparsefinder's methods the benchmark sweeps and translates with: those that read the projections' distances.
TRANSLATED_METHODS = ("distance", "nearest")
# Position options a run can be trained with (`hf-entmax train` flags), by the name the run's name carries.
POSITIONS = {
    "sinusoidal": [],
    "rope": ["--position_embedding_type", "rope"],
    "rope-cross": ["--position_embedding_type", "rope", "--cross_attention_positions", "rope"],
    "nape-split-cross": [
        "--position_embedding_type",
        "nape",
        "--encoder_alibi_directions",
        "split",
        "--cross_attention_positions",
        "nape",
    ],
    "sinusoidal-cross-nape": ["--cross_attention_positions", "nape"],
    "rope-cross-nape": ["--position_embedding_type", "rope", "--cross_attention_positions", "nape"],
    "rope-cross-alibi": ["--position_embedding_type", "rope", "--cross_attention_positions", "alibi"],
    "nape": ["--position_embedding_type", "nape"],
    "nape-split": ["--position_embedding_type", "nape", "--encoder_alibi_directions", "split"],
    "alibi-split": ["--position_embedding_type", "alibi", "--encoder_alibi_directions", "split"],
}
VARIANTS = {
    "softmax": QUALITY_VARIANTS["softmax"],
    "adaptive": QUALITY_VARIANTS["adaptive"],
    "asentmax": [*QUALITY_VARIANTS["adaptive"], "--attention_scaling", "asentmax"],
    "adaptive-unscaled": QUALITY_VARIANTS["adaptive-unscaled"],
    # The paper's model with sparsemax cross-attention: the sparsest source attention, where Sparsefinder should pay.
    "sparsemax-cross": [
        *QUALITY_VARIANTS["adaptive-unscaled"],
        "--cross_learn_alpha",
        "False",
        "--cross_alpha_init",
        "2",
    ],
}
# What each variant's saved config.json must say, so that a reused run is the variant it is taken for.
EXPECTED_CONFIG = {
    "softmax": {"learn_alpha": False, "alpha_init": 1.0},  # any query scaling is 1 at α = 1
    "adaptive": {"learn_alpha": True, "attention_scaling": "softmax_matched"},
    "asentmax": {"learn_alpha": True, "attention_scaling": "asentmax"},
    "adaptive-unscaled": {"learn_alpha": True, "attention_scaling": "none"},
    "sparsemax-cross": {
        "learn_alpha": True,
        "attention_scaling": "none",
        "cross_learn_alpha": False,
        "cross_alpha_init": 2.0,
    },
}


class RunSpec(NamedTuple):
    """One model of the comparison: its attention variant, positions and training data, and the run's name."""

    variant: str
    positions: str
    document_context: int  # the most training pairs joined into one example; 1: sentences only

    @property
    def name(self) -> str:
        suffixes = ([] if self.positions == "sinusoidal" else [self.positions]) + (
            [] if self.document_context == 1 else [f"doc{self.document_context}"]
        )
        return "+".join([self.variant, *suffixes])

    @property
    def flags(self) -> list[str]:
        documents = [] if self.document_context == 1 else ["--document_context", str(self.document_context)]
        return [*VARIANTS[self.variant], *POSITIONS[self.positions], *documents]


def run_specs(arguments: argparse.Namespace) -> list[RunSpec]:
    """Every variant with every position option and training data asked for, in that order."""
    return [
        RunSpec(variant, positions, context)
        for variant in arguments.variants
        for positions in arguments.positions
        for context in arguments.document_context
    ]


def train_runs(arguments: argparse.Namespace, log) -> dict[tuple[RunSpec, int], Path]:
    """Train the runs not finished yet (through bench_quality.py); return each (run, seed)'s folder."""
    direction = f"{arguments.source}-{arguments.target}"
    runs_dir = Path(arguments.runs_dir)
    specs = run_specs(arguments)
    folders = {
        (spec, seed): runs_dir / f"{arguments.max_steps}-steps" / direction / spec.name / f"seed{seed}"
        for spec in specs
        for seed in arguments.seeds
    }
    if any(not (folder / "training_summary.json").exists() for folder in folders.values()):
        command = [sys.executable, str(Path(__file__).with_name("bench_quality.py")), "--data_dir", arguments.data_dir]
        command += ["--output_dir", str(runs_dir), "--directions", direction]
        command += ["--variants", *(spec.name for spec in specs)]
        for spec in specs:
            command += ["--variant", f"{spec.name}={shlex.join(spec.flags)}"]
        command += ["--seeds", *map(str, arguments.seeds)]
        command += ["--max_steps", str(arguments.max_steps), "--batch_size", str(arguments.batch_size)]
        command += ["--table", TABLE, "--extra", arguments.extra]
        log(f"training the missing runs in {runs_dir}")
        run(command, Path(arguments.output_dir) / "commands.log")
    for (spec, seed), folder in folders.items():
        check_run(folder, spec, seed, arguments)
    return folders


def check_run(folder: Path, spec: RunSpec, seed: int, arguments: argparse.Namespace) -> None:
    """Stop if a finished run in ``folder`` is not the variant, positions, training data, steps, batch size and seed
    it is taken for."""
    config = json.loads((folder / "config.json").read_text())
    summary = json.loads((folder / "training_summary.json").read_text())
    settings = summary["hyperparameters"]
    documents = summary["preprocessing"].get("document_context")
    position_flags = dict(zip(POSITIONS[spec.positions][::2], POSITIONS[spec.positions][1::2], strict=True))
    # The config class fills in an option's default, also where a config was saved before the option existed.
    loaded, defaults = AdaptiveEntmaxMarianConfig.from_pretrained(folder), AdaptiveEntmaxMarianConfig()
    position_keys = ("position_embedding_type", "encoder_alibi_directions", "cross_attention_positions")
    expected_positions = {key: position_flags.get(f"--{key}", getattr(defaults, key)) for key in position_keys}
    found = {key: config.get(key) for key in EXPECTED_CONFIG[spec.variant]}
    found |= {key: getattr(loaded, key) for key in position_keys}
    found |= {key: settings.get(key) for key in ("max_steps", "per_device_train_batch_size", "seed")}
    found["document_context"] = documents["max_sentences"] if documents else 1
    expected = (
        EXPECTED_CONFIG[spec.variant]
        | expected_positions
        | {
            "max_steps": arguments.max_steps,
            "per_device_train_batch_size": arguments.batch_size,
            "seed": seed,
            "document_context": spec.document_context,
        }
    )
    if found != expected:
        sys.exit(f"{folder} is not the {spec.name} run this benchmark needs: it has {found}, expected {expected}")


def read_lines(path: Path, count: int | None) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines if count is None else lines[:count]


def joined_inputs(arguments: argparse.Namespace) -> tuple[int, dict[int, dict]]:
    """Write each k's joined source and reference files, and the same groups as paragraphs (k lines, then an empty
    line: the input of ``--lines_per_input``); return the number of test sentences used and
    ``{k: {"source": path, "reference": path, "paragraph_source": path, "paragraph_reference": path,
    "lines": number of inputs}}``."""
    data_dir = Path(arguments.data_dir)
    sources = read_lines(data_dir / f"{MULTI30K_TEST}.{arguments.source}", arguments.test_sentences)
    references = read_lines(data_dir / f"{MULTI30K_TEST}.{arguments.target}", arguments.test_sentences)
    if len(sources) != len(references):
        sys.exit(f"{MULTI30K_TEST}: {len(sources)} source lines but {len(references)} reference lines")
    folder = Path(arguments.output_dir) / "inputs" / f"{len(sources)}-sentences"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {}
    for k in arguments.joins:
        files = {}
        for name, lines in (("source", sources), ("reference", references)):
            language = arguments.source if name == "source" else arguments.target
            joined = joined_lines(lines, k)
            files[name] = folder / f"k{k}.{language}"
            files[name].write_text("".join(line + "\n" for line in joined), "utf-8")
            # The same groups, a line per sentence and an empty line after each group (as joined_lines, no last
            # incomplete group).
            paragraphs = [
                "".join(f"{line}\n" for line in lines[start : start + k]) for start in range(0, len(joined) * k, k)
            ]
            files[f"paragraph_{name}"] = folder / f"k{k}-paragraphs.{language}"
            files[f"paragraph_{name}"].write_text("\n".join(paragraphs), "utf-8")
        inputs[k] = {**files, "lines": len(joined)}
    return len(sources), inputs


def source_token_counts(folder: Path, inputs: dict[int, dict], train_source: Path) -> dict:
    """Source tokens (with `</s>`) per input line for each k, and of the training sentences, by the run's
    tokenizer: how far the joined inputs reach beyond the positions training saw."""
    config = AdaptiveEntmaxMarianConfig.from_pretrained(folder)
    tokenizer = load_tokenizer(folder, str(folder), config=config)

    def counts(path: Path) -> list[int]:
        return [len(ids) for ids in tokenizer(path.read_text(encoding="utf-8").splitlines())["input_ids"]]

    training = sorted(counts(train_source))
    return {
        "training": {"max": training[-1], "p99": training[int(0.99 * (len(training) - 1))]},
        **{
            k: {"mean": statistics.mean(counts(files["source"])), "max": max(counts(files["source"]))}
            for k, files in inputs.items()
        },
    }


def max_new_tokens(folder: Path, k: int, arguments: argparse.Namespace) -> int:
    """k × ``--max_new_tokens_per_join`` for an input of k sentences, within the model's positions where it has a
    table."""
    positions = position_limit(AdaptiveEntmaxMarianConfig.from_pretrained(folder))  # None: relative positions
    limit = k * arguments.max_new_tokens_per_join
    return limit if positions is None else min(limit, positions - 1)


def words(text: str) -> int:
    """The words of ``text``, split at whitespace: the unit of the benchmark's output / reference length ratios."""
    return len(text.split())


def translate(folder: Path, k: int, files: dict, arguments: argparse.Namespace, target: Path) -> dict:
    """Translate and score one k's input with one run, or read the scores if they exist; return the metrics, with
    ``length_ratio``: the translations' words over the references' (a model that stops after one sentence of k
    scores low for its length alone, whatever the sentence's quality), and ``sentence_ratio``: their sentences
    (`count_sentence_ends`) over the references'."""
    per_input = arguments.lines_per_input
    if per_input is None:
        name, source, reference, options = f"k{k}", files["source"], files["reference"], []
        sentences_per_input = k
    else:
        name, source, reference = f"k{k}-lines{per_input}", files["paragraph_source"], files["paragraph_reference"]
        options, sentences_per_input = ["--paragraphs", "--lines_per_input", str(per_input)], min(k, per_input)
    if arguments.match_sentences:
        name, options = f"{name}-matched", [*options, "--match_sentences"]
    metrics_file, output_file = target / f"{name}.json", target / f"{name}.txt"
    if not metrics_file.exists():
        command = ["hf-entmax", "translate", "--model", str(folder), "--input", str(source), *options]
        command += ["--output", str(output_file), "--reference", str(reference), "--metrics_file", str(metrics_file)]
        command += ["--max_new_tokens", str(max_new_tokens(folder, sentences_per_input, arguments))]
        command += ["--batch_size", str(arguments.translate_batch_size), "--no-progress"]
        target.mkdir(parents=True, exist_ok=True)
        run(command, Path(arguments.output_dir) / "commands.log")

    output, expected = (path.read_text(encoding="utf-8") for path in (output_file, reference))
    return {
        **json.loads(metrics_file.read_text()),
        "length_ratio": words(output) / words(expected),
        "sentence_ratio": count_sentence_ends(output) / max(count_sentence_ends(expected), 1),
    }


def train_predictor(folder: Path, run_name: str, seed: int, arguments: argparse.Namespace) -> dict:
    """Sparsefinder's predictor for one run, trained on the validation set joined ``--sparsefinder_k`` sentences at a
    time (or read if it exists); return ``{"predictor": path, "points": {type: (spec, sparsity, recall, mass)}}``
    with the chosen point of each attention type: of the distance and nearest methods' chosen points (they need no
    clustering), the sparsest that reaches the targets (else the distance method's)."""
    k = arguments.sparsefinder_k
    targets = arguments.sparsefinder_target_recall, arguments.sparsefinder_target_mass
    # Points chosen for other targets are another report (the command chooses them): a folder of their own.
    folder_name = (
        f"val-k{k}" if targets == SPARSEFINDER_TARGETS else f"val-k{k}-recall{targets[0]:g}-mass{targets[1]:g}"
    )
    output = Path(arguments.output_dir) / "sparsefinder" / run_name / f"seed{seed}" / folder_name
    report = output / "report.json"
    if not report.exists():
        validation = MULTI30K_SPLITS["validation"]
        languages = [arguments.source, arguments.target]
        inputs = Path(arguments.output_dir) / "inputs" / f"{validation}-k{k}"
        joined_corpus(Path(arguments.data_dir), k, languages, inputs, {"validation": validation})
        files = [inputs / f"{validation}.{language}" for language in languages]
        command = ["hf-entmax", "sparsefinder", str(folder), "--source_file", str(files[0]), "--target_file"]
        command += [str(files[1]), "--output", str(output), "--train_size", str(arguments.sparsefinder_train)]
        command += ["--heldout_size", str(arguments.sparsefinder_heldout), "--max_length", "1024", "--no-bleu"]
        command += ["--methods", *TRANSLATED_METHODS]  # the others' sweeps would only cost time
        command += ["--target_recall", f"{targets[0]:g}", "--target_mass", f"{targets[1]:g}"]
        command += ["--no-progress"]
        run(command, Path(arguments.output_dir) / "commands.log")
    attention = json.loads(report.read_text())["attention"]
    points = {}
    for kind, result in attention.items():
        if kind not in arguments.sparsefinder_types:
            continue
        chosen = [
            next(point for point in result["points"] if point["point"] == result["chosen"][method])
            for method in TRANSLATED_METHODS
            if method in result["chosen"]
        ]
        reaching = [
            point for point in chosen if point["recall"] >= targets[0] and point.get("mass", 1.0) >= targets[1]
        ]
        score = max(reaching, key=lambda point: point["sparsity"]) if reaching else chosen[0]
        # Reports written before the mass was measured have none: None.
        points[kind] = (score["point"], score["sparsity"], score["recall"], score.get("mass"))
    return {"predictor": output / "sparsefinder.safetensors", "points": points}


def timed_translations(folder: Path, k: int, files: dict, predictor: dict, arguments) -> dict:
    """Translate one k's test input with full and with restricted attention (the predictor's chosen points), in
    turn, in this process with the model loaded once, as `hf-entmax translate` does; return both scores and the
    seconds each translation took (loading excluded: the comparison is of the attention), and its words over the
    references' (``length_ratio``: restricted attention that ends translations earlier loses BLEU and time for it)."""
    model, tokenizer = load_translation_model(str(folder), progress=False)
    sources = read_lines(files["source"], None)
    references = read_lines(files["reference"], None)
    settings = [f"{kind}={spec}" for kind, (spec, *_) in predictor["points"].items()]
    results = {}
    for name in ("full", "restricted"):
        if name == "restricted":
            use_operating_point(model, settings, str(predictor["predictor"]), str(folder))
        start = time.perf_counter()
        translations = translate_lines(
            model,
            tokenizer,
            sources,
            batch_size=arguments.translate_batch_size,
            max_new_tokens=max_new_tokens(folder, k, arguments),
            match_sentences=arguments.match_sentences,
            progress=False,
        )
        seconds = time.perf_counter() - start
        results[name] = {
            **corpus_scores(translations, references),
            "seconds": seconds,
            "length_ratio": words("\n".join(translations)) / words("\n".join(references)),
        }
        if arguments.equal_tokens_per_join is not None:
            new_tokens = min(k * arguments.equal_tokens_per_join, max_new_tokens(folder, k, arguments))
            results[name]["equal_length_seconds"] = equal_length_seconds(
                model, tokenizer, sources, new_tokens, arguments.translate_batch_size
            )
    return results


def decode_exactly(model: torch.nn.Module, batch: dict, new_tokens: int, **generation) -> None:
    """Decode ``batch`` to exactly ``new_tokens`` tokens, no early end (``generation``: further `generate` settings,
    e.g. ``num_beams``; the model's own otherwise)."""
    with torch.no_grad():
        # Lengths count the decoder's start token.
        model.generate(**batch, min_length=new_tokens + 1, max_length=new_tokens + 1, **generation)


def equal_length_seconds(
    model: torch.nn.Module, tokenizer, sources: list[str], new_tokens: int, batch_size: int
) -> float:
    """Seconds to decode every source to exactly ``new_tokens`` tokens (the model's beam search, no early end), in
    batches of the input order: the cost of the attention at an equal amount of decoding, where full and restricted
    translations of different lengths would time different work."""
    start = time.perf_counter()
    for first in range(0, len(sources), batch_size):
        batch = tokenizer(sources[first : first + batch_size], return_tensors="pt", padding=True)
        decode_exactly(model, batch, new_tokens)
    return time.perf_counter() - start


def sparsefinder_table(timings: dict, predictors: dict, arguments: argparse.Namespace) -> str:
    """Per k ≥ K, run and seed: the chosen point of each attention type with its held-out sparsity, recall and mass
    kept, and restricted against full translation (BLEU, output length, wall time)."""
    restricted_types = ", ".join(arguments.sparsefinder_types)
    if set(arguments.sparsefinder_types) != set(ATTENTION_TYPES):
        restricted_types += " only"
    lines = [
        "| k | model | seed | chosen points (held-out sparsity / recall / mass kept) | BLEU full | BLEU restricted | "
        "output / reference words, full / restricted | time restricted / full |",
        "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    equal_length = arguments.equal_tokens_per_join is not None
    if equal_length:
        lines[0] += f" time restricted / full, k × {arguments.equal_tokens_per_join} tokens each |"
        lines[1] += " ---: |"
    for (name, seed, k), result in timings.items():
        points = "; ".join(
            f"{kind} `{spec}` ({sparsity:.0%} / {recall:.0%} / {'–' if mass is None else f'{mass:.1%}'})"
            for kind, (spec, sparsity, recall, mass) in predictors[name, seed]["points"].items()
        )
        full, restricted = result["full"], result["restricted"]
        lines.append(
            f"| {k} | {name} | {seed} | {points} | {full['bleu']:.2f} | {restricted['bleu']:.2f} | "
            f"{full['length_ratio']:.2f} / {restricted['length_ratio']:.2f} | "
            f"{restricted['seconds'] / full['seconds']:.2f} |"
            + (f" {restricted['equal_length_seconds'] / full['equal_length_seconds']:.2f} |" if equal_length else "")
        )
    lines += [
        "",
        f"Predictors trained on `val` joined {arguments.sparsefinder_k} sentences at a time "
        f"({arguments.sparsefinder_train} inputs, {arguments.sparsefinder_heldout} held out); per attention type the "
        "sparsest distance or nearest point with held-out recall ≥ "
        f"{arguments.sparsefinder_target_recall:g} and mass kept ≥ {arguments.sparsefinder_target_mass:g}; "
        f"restricted attention in {restricted_types}. Times: the translation alone (beam 4, batches as "
        "`hf-entmax translate` makes them, the model loaded once), full and restricted in turn in one process"
        + (
            f"; and decoding every input to exactly k × {arguments.equal_tokens_per_join} tokens (no early end; at "
            "most the model's positions), where the two translations' lengths differ."
            if equal_length
            else "."
        ),
    ]
    return "\n".join(lines)


def score_of(metrics: dict, name: str) -> float:
    """BLEU or chrF from a `--metrics_file` of `hf-entmax translate` (keys ``bleu``, ``chrf``)."""
    return metrics[name.lower()]


def table(scores: dict, inputs: dict, tokens: dict, arguments: argparse.Namespace) -> str:
    """One row per k and run: BLEU and chrF, mean ± standard deviation over seeds; the BLEU difference to softmax of
    the same positions and training data, seed by seed (where softmax is among the variants); and the output's words
    and sentences over the references'."""
    specs = run_specs(arguments)
    lines = [
        "| k | inputs | source tokens, mean (max) | model | BLEU | chrF | − softmax BLEU | output / reference words "
        "| output / reference sentences |",
        "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k in arguments.joins:
        for spec in specs:
            bleu, chrf = (
                mean_and_spread([score_of(scores[spec.name, seed, k], name) for seed in arguments.seeds])
                for name in ("BLEU", "chrF")
            )
            baseline = spec._replace(variant="softmax")
            difference = "–"
            if spec.variant != "softmax" and baseline in specs:
                difference = mean_difference(
                    [
                        score_of(scores[spec.name, seed, k], "BLEU") - score_of(scores[baseline.name, seed, k], "BLEU")
                        for seed in arguments.seeds
                    ]
                )
            ratio, sentence_ratio = (
                statistics.mean(scores[spec.name, seed, k][name] for seed in arguments.seeds)
                for name in ("length_ratio", "sentence_ratio")
            )
            lines.append(
                f"| {k} | {inputs[k]['lines']} | {tokens[k]['mean']:.0f} ({tokens[k]['max']}) | {spec.name} | {bleu} "
                f"| {chrf} | {difference} | {ratio:.2f} | {sentence_ratio:.2f} |"
            )
    signature = scores[specs[0].name, arguments.seeds[0], arguments.joins[0]]["bleu_signature"]
    documents = [context for context in arguments.document_context if context > 1]
    lines += [
        "",
        f"{arguments.source}→{arguments.target}, `{MULTI30K_TEST}` cut into groups of k consecutive sentences "
        f"(sources and references joined with a space); `small` preset, {arguments.max_steps} steps × batch "
        f"{arguments.batch_size}, default recipe; seeds {' '.join(map(str, arguments.seeds))} (mean ± standard "
        f"deviation; − softmax: mean ± standard error of the paired differences); "
        + (
            f"each group translated as a paragraph of k lines, {arguments.lines_per_input} at a time (`hf-entmax "
            f"translate --paragraphs --lines_per_input {arguments.lines_per_input}`), the translations joined; "
            if arguments.lines_per_input
            else ""
        )
        + (
            "no translation ended before it had as many sentence ends as its input (`--match_sentences`); "
            if arguments.match_sentences
            else ""
        )
        + f"beam 4, at most {arguments.max_new_tokens_per_join} new tokens per sentence of an input. A run's name: "
        f"its attention variant, `+positions` where not sinusoidal, `+docN` where trained with `--document_context N`"
        + (f" (also on joined training examples of up to {max(documents)} sentences)" if documents else "")
        + f". Longest training sentence: {tokens['training']['max']} source tokens (99% ≤ "
        f"{tokens['training']['p99']}). sacreBLEU {signature}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data/multi30k")
    parser.add_argument("--output_dir", default="benchmarks/outputs/length-translation")
    parser.add_argument(
        "--runs_dir", default="benchmarks/outputs/quality", help="where the training runs are (bench_quality's layout)"
    )
    parser.add_argument("--direction", default="de-en", help="source-target, e.g. de-en")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["softmax", "adaptive", "asentmax"])
    parser.add_argument("--positions", nargs="+", choices=list(POSITIONS), default=["sinusoidal"])
    parser.add_argument(
        "--document_context",
        nargs="+",
        type=int,
        default=[1],
        help="train each model on sentences (1) and/or with `--document_context N` (N > 1)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=1200)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--joins", nargs="+", type=int, default=[1, 2, 4, 8], help="sentences per test input (k)")
    parser.add_argument("--test_sentences", type=int, default=None, help="use only the first N test sentences")
    parser.add_argument("--max_new_tokens_per_join", type=int, default=64, help="generation limit per sentence")
    parser.add_argument("--translate_batch_size", type=int, default=32, help="inputs per generate call")
    parser.add_argument(
        "--lines_per_input",
        type=int,
        default=None,
        help="translate each k-sentence group as a paragraph of k lines, this many at a time (`hf-entmax translate "
        "--paragraphs --lines_per_input N`), instead of as one input",
    )
    parser.add_argument(
        "--match_sentences",
        action="store_true",
        help="let no translation end before it has as many sentence ends as its input (`hf-entmax translate "
        "--match_sentences`)",
    )
    parser.add_argument("--extra", default="", help="flags added to every training run (e.g. for a quick check)")
    parser.add_argument(
        "--sparsefinder_k",
        type=int,
        default=None,
        help="also train Sparsefinder on validation inputs of this many sentences and translate every k >= it with "
        "restricted attention",
    )
    parser.add_argument("--sparsefinder_train", type=int, default=80, help="joined validation inputs to train on")
    parser.add_argument("--sparsefinder_heldout", type=int, default=40, help="joined validation inputs held out")
    parser.add_argument(
        "--sparsefinder_target_recall",
        type=float,
        default=SPARSEFINDER_TARGETS[0],
        help="the chosen points' least held-out recall",
    )
    parser.add_argument(
        "--sparsefinder_target_mass",
        type=float,
        default=SPARSEFINDER_TARGETS[1],
        help="the chosen points' least held-out mass kept",
    )
    parser.add_argument(
        "--sparsefinder_types",
        nargs="+",
        choices=ATTENTION_TYPES,
        default=list(ATTENTION_TYPES),
        help="the attention types restricted to their predicted graphs (the others attend over every key)",
    )
    parser.add_argument(
        "--equal_tokens_per_join",
        type=int,
        default=None,
        help="also time full and restricted attention decoding exactly this many tokens per sentence of an input",
    )
    parser.add_argument("--markdown", nargs="+", default=None, help="put the table into these Markdown files")
    arguments = parser.parse_args()
    arguments.source, _, arguments.target = arguments.direction.partition("-")
    if not arguments.source or not arguments.target:
        parser.error(f"--direction must be source-target, e.g. de-en; got {arguments.direction!r}")
    if arguments.lines_per_input is not None and arguments.lines_per_input < 1:
        parser.error(f"--lines_per_input must be a positive number of lines, got {arguments.lines_per_input}")
    if arguments.equal_tokens_per_join is not None and (
        arguments.sparsefinder_k is None or arguments.equal_tokens_per_join < 1
    ):
        parser.error("--equal_tokens_per_join needs --sparsefinder_k and a positive number of tokens")
    if arguments.sparsefinder_k is not None and arguments.lines_per_input is not None:
        parser.error("--sparsefinder_k measures whole k-sentence inputs; leave out --lines_per_input")
    if min(arguments.joins) < 1 or (arguments.test_sentences is not None and arguments.test_sentences < 1):
        parser.error("--joins and --test_sentences must be positive integers")
    if min(arguments.document_context) < 1:
        parser.error("--document_context must be 1 (sentences only) or more sentences joined")
    if arguments.sparsefinder_k is not None and not any(k >= arguments.sparsefinder_k for k in arguments.joins):
        parser.error(f"--sparsefinder_k {arguments.sparsefinder_k}: no --joins k is that long")
    if arguments.test_sentences is not None and max(arguments.joins) > arguments.test_sentences:
        parser.error(f"--joins {max(arguments.joins)} needs at least that many --test_sentences")

    out = Path(arguments.output_dir)
    command = measured_command("bench_length_translation.py")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    with benchmark_log(out, command, vars(arguments), machine) as log:
        folders = train_runs(arguments, log)
        sentences, inputs = joined_inputs(arguments)
        scores = {}
        for (spec, seed), folder in folders.items():
            target = out / "translations" / folder.relative_to(arguments.runs_dir) / f"{sentences}-sentences"
            for k, files in inputs.items():
                metrics = scores[spec.name, seed, k] = translate(folder, k, files, arguments, target)
                log(
                    f"{spec.name} seed {seed} k={k}: BLEU {score_of(metrics, 'BLEU'):.2f}, "
                    f"chrF {score_of(metrics, 'chrF'):.2f}, length ratio {metrics['length_ratio']:.2f}, "
                    f"sentences ratio {metrics['sentence_ratio']:.2f}"
                )
        train_source = Path(arguments.data_dir) / f"train.{arguments.source}"
        tokens = source_token_counts(next(iter(folders.values())), inputs, train_source)
        markdown = table(scores, inputs, tokens, arguments)
        log(markdown)
        markdown_tables = {TABLE: markdown}
        if arguments.sparsefinder_k is not None:
            predictors, timings = {}, {}
            for (spec, seed), folder in folders.items():
                predictors[spec.name, seed] = predictor = train_predictor(folder, spec.name, seed, arguments)
                for k, files in inputs.items():
                    if k >= arguments.sparsefinder_k:
                        timings[spec.name, seed, k] = timed_translations(folder, k, files, predictor, arguments)
            markdown_tables[SPARSEFINDER_TABLE] = sparsefinder_table(timings, predictors, arguments)
            log(markdown_tables[SPARSEFINDER_TABLE])
    results = {"source tokens": tokens, "scores": {f"{v} seed{s} k{k}": m for (v, s, k), m in scores.items()}}
    if arguments.sparsefinder_k is not None:
        # Each k's full and restricted translation: scores and seconds.
        results["sparsefinder"] = {f"{v} seed{s} k{k}": timing for (v, s, k), timing in timings.items()}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    if arguments.markdown:
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({machine}) with `{command}`."
        write_tables(arguments.markdown, {name: f"{text}\n\n{measured}" for name, text in markdown_tables.items()})


if __name__ == "__main__":
    main()
