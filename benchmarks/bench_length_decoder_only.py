"""Length extrapolation in ASEntmax's own setting: a decoder-only model, NAPE or RoPE positions, copy, reverse, sort,
MQMTAR and flip-flop, softmax vs SSMax vs 1.5-entmax vs adaptive α-entmax vs ASEntmax.

    python benchmarks/bench_length_decoder_only.py [--tasks copy reverse sort mqmtar] [--positions nape rope]
        [--variants softmax ssmax entmax15 adaptive adaptive_matched asentmax asentmax_per_token] [--seeds 0 1 2]
        [--steps 2000] [--train_min_length 32 --train_max_length 64] [--test_multiples 1 2 4 8 16 64]
        [--filler_max 0] [--layer_style marian] [--attention_scaling_projection_bias]
        [--select_multiple 8] [--save_models] [--checkpoint_every 500] [--markdown docs/benchmarks.md]

The setting of the reference code (github deep-spin/asentmax, ``synthetic/``): one sequence
``<bos> source <sep> target <eos>`` per example, a causal `AdaptiveEntmaxMarianForCausalLM` trained with the loss on
the target and its ``<eos>`` only, tested by greedy decoding from ``<bos> source <sep>``. A test string counts only if
the whole output and its ``<eos>`` are right (exact match); the share of the answer's positions right, position by
position, shows how far into a long answer a model stays right. ``length`` is the reference's ``seq_len``:

- `copy`, `reverse`, `sort`: a string of ``length`` symbols out of ``--symbols`` (the reference's 32) and the same
  string, reversed or sorted;
- `mqmtar` (multi-query multi-token associative recall): ``length`` tokens holding ⌊0.8 · length / 6⌋ key–value pairs
  ``k k : v v`` (keys and values two letters out of ``--mqmtar_alphabet``, distinct within a string), each pair in a
  block of spaces at a random offset drawn as the reference's generator draws it, then ``--mqmtar_queries`` queries
  ``? k k``; the target is ``? v v`` for each query. The reference uses an alphabet of 256 letters (and 10k
  pairs to draw from); 32 letters keep the keys distinct up to 64 × 64 tokens (546 pairs out of 1,024 keys) and
  leave a small model fewer embeddings to learn on a CPU;
- `flip-flop`: ``length / 2`` (command, bit) pairs, commands `write` (probability ``--flip_flop_write_prob``, 0.1 as
  in the reference) or `ignore`, the first always `write`, the last `read` without its bit; the target is the bit of
  the last `write`. The reference writes no ``<sep>`` there (`read` ends the source); here every task has one.

Training strings have lengths drawn uniformly from [--train_min_length, --train_max_length] ([32, 64], the
reference's ``seq_len 48 ± 16``); test strings have exactly ``multiple × --train_max_length`` (64 … 4,096 by default).

``--filler_max N`` (0 by default; not in the reference) puts 0 … N filler tokens (a token of their own, their number
drawn uniformly per string) between ``<bos>`` and each training source; test sources have none. Small models can learn
copy by pairing the t-th output with the t-th symbol after ``<bos>`` (heads without a position bias can count under
the causal mask), which fails past the training lengths; with fillers no fixed index marks a symbol, so that finding
it by its content (an induction head) is the cue left.

``--layer_style`` chooses the layers (the config's `layer_style`): Marian's post-norm ones (the default), pre-norm, or
``gemma2``, the reference's Gemma-2 layers (RMSNorm before and after each block, a GeGLU feed-forward, embeddings
scaled by √d_model; its linear layers keep Marian's biases and its output layer the tied embeddings).

Variants (`VARIANTS`), which differ only in the attention:

- `softmax`: α = 1, fixed; `ssmax`: softmax with scalable-softmax queries (× s_h · log n, s_h learned);
- `entmax15`: α = 1.5, fixed;
- `adaptive`: α learned per head from the paper's random start, queries unscaled; `adaptive_matched`: the same with
  softmax-matched queries (× n^(1 − α), hf_entmax's default for fresh models);
- `asentmax`: α = 1.5, fixed, queries × (1 + β_h · log(n + 1)^γ_h) with β_h, γ_h learned per head;
  `asentmax_per_token`: the same with β and γ computed from each query token's hidden state (by maps without a bias;
  ``--attention_scaling_projection_bias`` gives them one, as every reproduction command of the reference). The
  reference's ASEntmax runs fix α (its ``entmax_alpha: 1.5``, never a parameter) and learn only the scale, so these do
  too.

Under NAPE, SSMax and ASEntmax scale the heads without a position bias only (the config's default there, as in the
reference), softmax-matched queries every head; under RoPE every variant scales all heads.

Equal budget: every variant of a task and seed sees the same training strings in the same order (the data stream is
seeded by the seed alone), starts from the same weights wherever its parameters have the softmax model's names and
shapes (copied from a softmax model drawn from the seed; α logits and scale parameters are the variant's own), and
trains the same number of steps with the same optimiser: the `from-scratch` recipe's AdamW (learning rate 1e-3,
β = (0.9, 0.98), no weight decay, gradient clipping at 1, α logits at 10× the rate) with the reference's schedule
shape, a linear warm-up over ``--warmup`` of the steps then cosine decay to 0. No dropout. The test strings are the
same for every variant and seed.

Checkpoints. By default a run keeps its last weights. ``--select_multiple M`` chooses them as the reference does (its
copy runs keep the checkpoint with the best exact match on validation strings 8× the longest training string, its sort
runs the best BLEU at 4×, reading its monitored validation sets as lengths 64, 128, 256, 512): every ``--select_every``
steps (a tenth of the steps by default) and after the last, greedy decoding of ``--select_strings`` validation strings
of M × ``--train_max_length`` symbols (drawn from a seed of their own, never the test's) scores the model by exact
match, then by the share of positions right, and the run ends with the best weights; its result says which step they
are from and holds the validation scores by step.

Budget. The default model (d_model 64, 2 layers, 4 heads, FFN 4×) and budget (2,000 steps × 32 strings) are sized
for a 2-core CPU, a few minutes per run (each run logs its steps per second and its seconds of training and testing);
the reference trains larger models for ~150k steps × 128 on a GPU. Copy, reverse and MQMTAR need a head that finds
a token by its neighbours (an induction head), which small models learn only after a plateau at loss ln(symbols) that
a CPU budget may not outlast; sort (counting) is learned sooner. ``--device cuda --steps 20000 --batch_size 128`` is
nearer the reference's budget.

Long tests are costly (a copy of 4,096 symbols takes 4,097 decoding steps over up to 8,195 keys), so a length gets
``min(--test_strings, max(--min_test_strings, --test_tokens // length))`` strings: with the defaults 100 at 1×–2×, 64
at 4×, 32 at 8×, 16 at 16× and 4 at 64× (the table says how many). The prompt is read into the key–value cache
``--prefill_chunk`` tokens at a time, which bounds the attention scores held at once, and decoding stops when every
string of a batch has written ``<eos>``. Our own loop, rather than `generate`, is what allows the chunked prefill; it
decodes as fast as `generate` and gives the same tokens (tests/test_bench_length_decoder_only.py).

Runs already finished in --output_dir are read, not repeated (their settings must match, the test's aside; another
--output_dir otherwise). Runs longer than a sitting can be stopped and resumed: every ``--checkpoint_every`` steps (500
by default; 0 for none) and after its last step a run saves its model, optimiser, schedule, data stream, random state
and validation scores in its run folder (``checkpoint.pt``, written whole or not at all, deleted once the run's result
is written); stopped (Ctrl-C, which says which step it will resume from, or the machine's end), the same command goes
on from there, and ends with the weights and figures a run that never stopped would have (bit for bit on the same
machine and ``--threads``; the times aside). ``--save_models`` also keeps each model it trains in its run folder's
``model/`` (`AutoModelForCausalLM` loads it), to look at its outputs and attention later without training it again, and
to test it again: a finished run is tested on its kept model at the ``--test_multiples`` it was not tested at, and its
result extended; with other test strings (``--test_strings``, ``--min_test_strings``, ``--test_tokens``,
``--test_seed``) it is tested again at every length asked for, and its result replaced. ``--markdown
docs/benchmarks.md`` writes the table between the markers ``table:length-decoder-only``.
"""

import argparse
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import length_runs
import torch
from runs import add_threads_option, stop_in_one_line
from transformers import get_cosine_schedule_with_warmup

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianForCausalLM
from hf_entmax.common.config import LAYER_STYLE_DESCRIPTIONS
from hf_entmax.modeling.configuration_adaptive_entmax_marian import LAYER_STYLES


# The model's special tokens; a task's own tokens (0, 1, …) are shifted by FIRST_SYMBOL.
PAD, BOS, SEP, EOS, FIRST_SYMBOL = 0, 1, 2, 3, 4
TABLE = "length-decoder-only"
VALIDATION_SEED = 4321  # of the strings a checkpoint is chosen on; --test_seed is another

# MQMTAR's tokens, as the reference's generator numbers them: space, key–value separator, query mark, then letters.
SPACE, KEY_VALUE_SEPARATOR, QUERY, FIRST_LETTER = 0, 1, 2, 3
KEY_LETTERS = VALUE_LETTERS = 2
PAIR_SHARE = 0.8  # of a string's tokens that belong to key–value pairs (the reference's num_kv 0.8)
# Key, separator, value and the space that closes the pair: the unit the reference counts pairs in.
PAIR_UNIT = KEY_LETTERS + VALUE_LETTERS + 2

# Flip-flop's tokens: the two bits, then the three commands.
WRITE, IGNORE, READ = 2, 3, 4

VARIANTS: dict[str, dict] = {
    "softmax": {"alpha_init": 1.0, "learn_alpha": False},
    "ssmax": {"alpha_init": 1.0, "learn_alpha": False, "attention_scaling": "ssmax"},
    "entmax15": {"alpha_init": 1.5, "learn_alpha": False},
    "adaptive": {"alpha_init": "random", "learn_alpha": True, "attention_scaling": None},
    "adaptive_matched": {"alpha_init": "random", "learn_alpha": True, "attention_scaling": "softmax_matched"},
    "asentmax": {"alpha_init": 1.5, "learn_alpha": False, "attention_scaling": "asentmax"},
    "asentmax_per_token": {"alpha_init": 1.5, "learn_alpha": False, "attention_scaling": "asentmax_per_token"},
}

POSITIONS = ("nape", "rope", "alibi", "none")
DEFAULT_TASKS = ("copy", "reverse", "sort", "mqmtar")


def random_string(length: int, symbols: int, generator: torch.Generator) -> torch.Tensor:
    """``(length,)`` symbols drawn uniformly from ``0 … symbols − 1``."""
    return torch.randint(0, symbols, (length,), generator=generator)


def sample_copy(length: int, arguments: argparse.Namespace, generator: torch.Generator):
    string = random_string(length, arguments.symbols, generator)
    return string, string


def sample_reverse(length: int, arguments: argparse.Namespace, generator: torch.Generator):
    string = random_string(length, arguments.symbols, generator)
    return string, string.flip(0)


def sample_sort(length: int, arguments: argparse.Namespace, generator: torch.Generator):
    string = random_string(length, arguments.symbols, generator)
    return string, string.sort().values


def distinct_words(count: int, letters: int, alphabet: int, generator: torch.Generator) -> torch.Tensor:
    """``(count, letters)`` words of ``letters`` letters out of ``alphabet``, no two alike."""
    codes = torch.randperm(alphabet**letters, generator=generator)[:count]  # (count,)
    powers = alphabet ** torch.arange(letters - 1, -1, -1)  # (letters,)
    return codes[:, None] // powers % alphabet  # (count, letters)


def mqmtar_pairs(length: int, alphabet: int) -> int:
    """How many key–value pairs a MQMTAR string of ``length`` tokens holds (the reference's rule, capped so that
    keys and values stay distinct)."""
    return min(int(length * PAIR_SHARE // PAIR_UNIT), alphabet**KEY_LETTERS, alphabet**VALUE_LETTERS)


def sample_mqmtar(length: int, arguments: argparse.Namespace, generator: torch.Generator):
    """A MQMTAR string: key–value pairs in blocks of spaces, then the queries; the target, each query's value.

    Source: ``pairs × ⌊length / pairs⌋`` tokens of blocks, then ``queries × (1 + 2)`` of queries; target
    ``queries × (1 + 2)``. As in the reference, a pair ``k k : v v ␣`` sits in its block after as many spaces as
    survive, before it, of a random deletion from a block twice the size with the pair in the middle."""
    alphabet = arguments.mqmtar_alphabet
    pairs = mqmtar_pairs(length, alphabet)
    if pairs < 1:
        raise ValueError(f"a MQMTAR string needs at least {math.ceil(PAIR_UNIT / PAIR_SHARE)} tokens, got {length}")
    keys = distinct_words(pairs, KEY_LETTERS, alphabet, generator) + FIRST_LETTER  # (pairs, 2)
    values = distinct_words(pairs, VALUE_LETTERS, alphabet, generator) + FIRST_LETTER  # (pairs, 2)
    block = length // pairs
    wide = 2 * (block + 1)  # the reference's block of spaces before deletion
    before = wide // 2 - (KEY_LETTERS + VALUE_LETTERS + 1) // 2  # spaces before the pair in it
    candidates = wide - PAIR_UNIT
    kept = torch.rand(pairs, candidates, generator=generator).argsort(dim=1)[:, : block - PAIR_UNIT]  # (pairs, kept)
    offsets = (kept < before).sum(dim=1)  # (pairs,) spaces left before each pair
    separator = torch.full((pairs, 1), KEY_VALUE_SEPARATOR)
    pair_tokens = torch.cat([keys, separator, values], dim=1)  # (pairs, 5); the closing space stays a space
    blocks = torch.full((pairs, block), SPACE)
    blocks.scatter_(1, offsets[:, None] + torch.arange(pair_tokens.shape[1]), pair_tokens)  # (pairs, block)
    asked = torch.randint(0, pairs, (arguments.mqmtar_queries,), generator=generator)  # (queries,)
    marks = torch.full((len(asked), 1), QUERY)
    source = torch.cat([blocks.flatten(), torch.cat([marks, keys[asked]], dim=1).flatten()])
    return source, torch.cat([marks, values[asked]], dim=1).flatten()


def sample_flip_flop(length: int, arguments: argparse.Namespace, generator: torch.Generator):
    """``length / 2`` (command, bit) pairs ending with `read` and no bit; the target, the last written bit."""
    steps = length // 2
    if steps < 2:
        raise ValueError(f"a flip-flop string needs at least 4 tokens, got {length}")
    bits = torch.randint(0, 2, (steps,), generator=generator)
    writes = torch.rand(steps - 2, generator=generator) < arguments.flip_flop_write_prob
    commands = torch.cat([torch.tensor([WRITE]), torch.where(writes, WRITE, IGNORE), torch.tensor([READ])])
    last_write = int((commands == WRITE).nonzero().max())
    source = torch.stack([commands, bits], dim=1).flatten()[:-1]  # (2 · steps − 1,)
    return source, bits[last_write : last_write + 1]


Sampler = Callable[[int, argparse.Namespace, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
TASKS: dict[str, Sampler] = {
    "copy": sample_copy,
    "reverse": sample_reverse,
    "sort": sample_sort,
    "mqmtar": sample_mqmtar,
    "flip-flop": sample_flip_flop,
}


def task_symbols(task: str, arguments: argparse.Namespace) -> int:
    """How many tokens of its own a task uses (its vocabulary without the special tokens)."""
    if task == "mqmtar":
        return FIRST_LETTER + arguments.mqmtar_alphabet
    if task == "flip-flop":
        return READ + 1
    return arguments.symbols


def filler_token(task: str, arguments: argparse.Namespace) -> int:
    """The token of ``--filler_max``'s fillers: the one after the task's own (the vocabulary has it only then)."""
    return FIRST_SYMBOL + task_symbols(task, arguments)


def with_fillers(pairs: list, arguments: argparse.Namespace, filler: int, generator: torch.Generator) -> list:
    """The pairs with 0 … ``--filler_max`` ``filler`` tokens (uniform, drawn per pair) before each source: a string's
    symbols then sit at no fixed index from ``<bos>``, so that counting from it cannot stand in for their content."""
    counts = torch.randint(0, arguments.filler_max + 1, (len(pairs),), generator=generator).tolist()
    return [
        (torch.cat([torch.full((count,), filler), source]), target)
        for count, (source, target) in zip(counts, pairs, strict=True)
    ]


def samples(task: str, lengths: Sequence[int], arguments: argparse.Namespace, generator: torch.Generator) -> list:
    """One ``(source, target)`` pair of the task per length, in the model's tokens (the task's shifted past the
    special ones)."""
    pairs = [TASKS[task](length, arguments, generator) for length in lengths]
    return [(source + FIRST_SYMBOL, target + FIRST_SYMBOL) for source, target in pairs]


def training_batch(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``<bos> source <sep> target <eos>`` per pair, padded on the right: ``input_ids``, ``attention_mask`` and
    ``labels``, each ``(batch, longest)``; ``labels`` is ``input_ids`` on the target and its ``<eos>`` and -100
    elsewhere (the model shifts it), so that the loss is on the target alone."""
    width = max(len(source) + len(target) + 3 for source, target in pairs)
    input_ids = torch.full((len(pairs), width), PAD)
    labels = torch.full((len(pairs), width), -100)
    for row, (source, target) in enumerate(pairs):
        sequence = torch.cat([torch.tensor([BOS]), source, torch.tensor([SEP]), target, torch.tensor([EOS])])
        input_ids[row, : len(sequence)] = sequence
        answer = len(source) + 2  # where the target starts
        labels[row, answer : len(sequence)] = sequence[answer:]
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels}


def prompts_and_answers(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompts, answers)``: ``<bos> source <sep>`` ``(batch, source + 2)`` and ``target <eos>``
    ``(batch, target + 1)``. The pairs of a test length all have the same lengths, so nothing is padded."""
    prompts = torch.stack([torch.cat([torch.tensor([BOS]), source, torch.tensor([SEP])]) for source, _ in pairs])
    answers = torch.stack([torch.cat([target, torch.tensor([EOS])]) for _, target in pairs])
    return prompts, answers


def score(outputs: torch.Tensor, answers: torch.Tensor) -> tuple[int, int, int]:
    """``(exact matches, right positions, right positions before each string's first wrong one)`` of generated
    ``outputs`` ``(batch, n)`` against ``answers`` ``(batch, length)`` (each ending with ``<eos>``).

    Nothing after an output's first ``<eos>`` counts (it stopped there), and positions it did not reach are wrong;
    a string matches exactly when all ``length`` positions are right, its ``<eos>`` included."""
    written = outputs[:, : answers.shape[1]]
    ended = (written == EOS).long().cumsum(dim=1) - (written == EOS).long() > 0  # after the first <eos>
    compared = torch.full_like(answers, PAD)
    compared[:, : written.shape[1]] = written.masked_fill(ended, PAD)
    right = compared == answers  # (batch, length)
    return int(right.all(dim=1).sum()), int(right.sum()), int(right.long().cumprod(dim=1).sum())


@torch.inference_mode()
def greedy_decode(
    model: AdaptiveEntmaxMarianForCausalLM, prompts: torch.Tensor, max_new_tokens: int, prefill_chunk: int
) -> torch.Tensor:
    """Greedy continuations ``(batch, ≤ max_new_tokens)`` of ``prompts`` ``(batch, prompt)`` (unpadded), with the
    key–value cache: the prompt is read ``prefill_chunk`` tokens at a time, then one token per step, until every row
    has written ``<eos>`` (rows that ended write ``<pad>``)."""
    batch, prompt_length = prompts.shape
    mask = torch.ones(batch, prompt_length + max_new_tokens, dtype=torch.long, device=prompts.device)
    cache = None
    for start in range(0, prompt_length, prefill_chunk):
        end = min(start + prefill_chunk, prompt_length)
        output = model(
            input_ids=prompts[:, start:end],
            attention_mask=mask[:, :end],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = output.cache
    finished = torch.zeros(batch, dtype=torch.bool, device=prompts.device)
    tokens = []
    for step in range(max_new_tokens):
        predicted = output.logits[:, -1].argmax(dim=-1)  # (batch,)
        tokens.append(predicted.masked_fill(finished, PAD))
        finished |= predicted == EOS
        if finished.all() or step == max_new_tokens - 1:
            break
        output = model(
            input_ids=predicted[:, None],
            attention_mask=mask[:, : prompt_length + step + 1],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = output.cache
    return torch.stack(tokens, dim=1)


def build_model(task: str, positions: str, variant: str, arguments: argparse.Namespace, seed: int):
    """The variant's decoder-only model; every parameter it shares (name and shape) with the softmax model of the
    same seed starts from that model's values, so that variants differ in their attention alone."""

    def draw(overrides: dict) -> AdaptiveEntmaxMarianForCausalLM:
        torch.manual_seed(seed)
        ffn = arguments.ffn_multiple * arguments.d_model
        config = AdaptiveEntmaxMarianConfig(
            vocab_size=filler_token(task, arguments) + (1 if arguments.filler_max else 0),
            d_model=arguments.d_model,
            decoder_layers=arguments.layers,
            decoder_attention_heads=arguments.heads,
            decoder_ffn_dim=ffn,
            # The encoder's sizes: unused by the decoder-only model, but the config checks them (and the key–value
            # cache is sized by `num_hidden_layers`, which a Marian config reads from `encoder_layers`).
            encoder_layers=arguments.layers,
            encoder_attention_heads=arguments.heads,
            encoder_ffn_dim=ffn,
            # Relative positions have no table; this only has to cover the longest sequence.
            max_position_embeddings=2 * max_test_length(arguments) + arguments.filler_max + 64,
            pad_token_id=PAD,
            eos_token_id=EOS,
            bos_token_id=BOS,
            decoder_start_token_id=BOS,
            forced_eos_token_id=None,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            position_embedding_type=positions,
            **layer_config(arguments),
            **overrides,
        )
        return AdaptiveEntmaxMarianForCausalLM(config)

    model = draw(variant_config(variant, arguments))
    if variant != "softmax":
        shared = draw(VARIANTS["softmax"]).state_dict()
        own = model.state_dict()
        model.load_state_dict(
            {
                name: shared[name] if name in shared and shared[name].shape == value.shape else value
                for name, value in own.items()
            }
        )
    return model


def variant_config(variant: str, arguments: argparse.Namespace) -> dict:
    """The variant's config overrides (`VARIANTS`), with biases in per-token ASEntmax's maps where
    ``--attention_scaling_projection_bias`` asks for them (as the reference's reproduction commands)."""
    overrides = VARIANTS[variant]
    if arguments.attention_scaling_projection_bias and overrides.get("attention_scaling") == "asentmax_per_token":
        overrides = {**overrides, "attention_scaling_projection_bias": True}
    return overrides


def layer_config(arguments: argparse.Namespace) -> dict:
    """The config's layer settings for ``--layer_style``: none for Marian's layers (the default); for ``gemma2`` also
    Gemma-2's GeGLU activation and its embeddings scaled by √d_model, as the reference's model."""
    if arguments.layer_style == "marian":
        return {}
    gemma2 = {"activation_function": "gelu_pytorch_tanh", "scale_embedding": True}
    return {"layer_style": arguments.layer_style, **(gemma2 if arguments.layer_style == "gemma2" else {})}


def max_test_length(arguments: argparse.Namespace) -> int:
    return max(arguments.test_multiples) * arguments.train_max_length


def training_lengths(arguments: argparse.Namespace, generator: torch.Generator) -> list[int]:
    """A training batch's string lengths, uniform in [--train_min_length, --train_max_length]."""
    bounds = (arguments.train_min_length, arguments.train_max_length + 1)
    return torch.randint(*bounds, (arguments.batch_size,), generator=generator).tolist()


def train(
    model, task: str, arguments: argparse.Namespace, seed: int, label: str, log, checkpoint: length_runs.Checkpoint
) -> dict:
    """Train for ``--steps`` steps (AdamW with the from-scratch recipe's settings, warm-up then cosine), going on from
    ``checkpoint`` if a stopped run left one; return the mean loss of the last 10% of steps and the steps per second.
    With ``--select_multiple`` the model ends with the weights that scored best on the validation strings of that
    multiple (`validation_pairs`), checked every ``--select_every`` steps and after the last."""
    optimizer = length_runs.recipe_optimizer(model, arguments.learning_rate)
    schedule = get_cosine_schedule_with_warmup(
        optimizer, num_warmup_steps=math.ceil(arguments.warmup * arguments.steps), num_training_steps=arguments.steps
    )
    data = torch.Generator().manual_seed(seed)

    def next_batch() -> dict[str, torch.Tensor]:
        pairs = samples(task, training_lengths(arguments, data), arguments, data)
        if arguments.filler_max:
            pairs = with_fillers(pairs, arguments, filler_token(task, arguments), data)
        return {name: tensor.to(model.device) for name, tensor in training_batch(pairs).items()}

    validate = None
    if arguments.select_multiple:
        validation = validation_pairs(task, arguments.select_multiple * arguments.train_max_length, arguments)

        def validate() -> tuple[float, float]:
            return pair_accuracy(model, validation, arguments)[:2]

    every = select_every(arguments)
    return length_runs.train_steps(
        model, optimizer, schedule, next_batch, arguments, label, log, validate, every, checkpoint, data
    )


def test_pairs(task: str, length: int, arguments: argparse.Namespace) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The test strings of ``length`` (`samples`). They depend only on the task, ``length`` and ``--test_seed``, so
    that every variant and seed gets the same ones."""
    data = torch.Generator().manual_seed(arguments.test_seed * 100_003 + length)
    return samples(task, [length] * length_runs.test_count(length, arguments), arguments, data)


def validation_pairs(task: str, length: int, arguments: argparse.Namespace) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``--select_strings`` strings of ``length`` to choose a checkpoint on: drawn from ``VALIDATION_SEED`` as the
    test strings are from ``--test_seed`` (which may not equal it), so that no test string is chosen on."""
    data = torch.Generator().manual_seed(VALIDATION_SEED * 100_003 + length)
    return samples(task, [length] * arguments.select_strings, arguments, data)


def select_every(arguments: argparse.Namespace) -> int:
    """Steps between validations: ``--select_every``, or a tenth of the steps (the reference's copy runs validate
    every tenth of an epoch)."""
    return arguments.select_every or max(1, arguments.steps // 10)


def decode_pairs(
    model, pairs: list[tuple[torch.Tensor, torch.Tensor]], arguments: argparse.Namespace
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(prompts, answers, outputs)`` of greedy decoding, a batch of ``pairs`` of one length at a time (as many as
    ``--eval_tokens`` prompt tokens allow); see `prompts_and_answers` and `greedy_decode`. Outputs are on the CPU."""
    size = max(1, arguments.eval_tokens // (len(pairs[0][0]) + 2))  # strings per decoding batch
    for start in range(0, len(pairs), size):
        prompts, answers = prompts_and_answers(pairs[start : start + size])
        outputs = greedy_decode(model, prompts.to(model.device), answers.shape[1], arguments.prefill_chunk)
        yield prompts, answers, outputs.cpu()


def pair_accuracy(
    model, pairs: list[tuple[torch.Tensor, torch.Tensor]], arguments: argparse.Namespace
) -> tuple[float, float, float]:
    """``(exact match, symbol accuracy, right prefix)`` of greedy decoding on ``pairs`` (of one length): the share of
    strings whose output is exactly the target and its ``<eos>``, the share of all answer positions right, and the
    share right before each string's first wrong position (where outputs lose their way)."""
    model.eval()
    correct, right_positions, prefix_positions, positions = 0, 0, 0, 0
    for _, answers, outputs in decode_pairs(model, pairs, arguments):
        exact, right, prefix = score(outputs, answers)
        correct, right_positions, prefix_positions = (
            correct + exact,
            right_positions + right,
            prefix_positions + prefix,
        )
        positions += answers.numel()
    return correct / len(pairs), right_positions / positions, prefix_positions / positions


def test_accuracy(model, task: str, length: int, arguments: argparse.Namespace) -> tuple[float, float, float]:
    """`pair_accuracy` on the test strings of ``length`` (`test_pairs`)."""
    return pair_accuracy(model, test_pairs(task, length, arguments), arguments)


def learned_attention(model) -> dict:
    """Mean α per attention type, and the mean of each learned scale parameter over the heads that scale (under
    NAPE, the heads without a position bias), with their number."""
    summary = {f"mean α {kind}": round(alphas.mean().item(), 3) for kind, alphas in model.get_alphas().items()}
    for kind, scales in model.get_attention_scales().items():
        scaled = scales.get("scaled")
        for name, values in scales.items():
            if name == "scaled" or not isinstance(values, torch.Tensor):
                continue
            if isinstance(scaled, torch.Tensor) and scaled.shape == values.shape and scaled.any():
                values = values[scaled.bool()]
            summary[f"mean {name} {kind}"] = round(values.float().mean().item(), 3)
        if isinstance(scaled, torch.Tensor):
            summary[f"scaled heads {kind}"] = int(scaled.sum())
    return summary


SETTINGS = (
    "train_min_length",
    "train_max_length",
    "test_multiples",
    "symbols",
    "mqmtar_alphabet",
    "mqmtar_queries",
    "flip_flop_write_prob",
    "steps",
    "batch_size",
    "learning_rate",
    "warmup",
    "d_model",
    "layers",
    "heads",
    "ffn_multiple",
    "test_strings",
    "min_test_strings",
    "test_tokens",
    "test_seed",
)


def run_settings(variant: str, arguments: argparse.Namespace) -> dict:
    """What a run's result depends on: the settings above, ``--filler_max``, ``--layer_style`` and the checkpoint
    selection where they are used, and the variant's config overrides. (Without them the settings are those of the
    runs measured before the options existed, which stay readable.)"""
    fillers = {"filler_max": arguments.filler_max} if arguments.filler_max else {}
    style = {"layer_settings": layer_config(arguments)} if layer_config(arguments) else {}
    selection = (
        {
            "select_multiple": arguments.select_multiple,
            "select_every": select_every(arguments),
            "select_strings": arguments.select_strings,
        }
        if arguments.select_multiple
        else {}
    )
    return {
        **{name: getattr(arguments, name) for name in SETTINGS},
        **fillers,
        **style,
        **selection,
        "variant": variant_config(variant, arguments),
    }


def run_one(task: str, positions: str, variant: str, seed: int, arguments: argparse.Namespace, log) -> dict:
    """Train and test one model, or read its result if this run already finished with the same settings."""
    label = f"{task} / {positions} / {variant} / seed {seed}"
    return length_runs.run_or_read(
        Path(arguments.output_dir) / task / positions / variant / f"seed{seed}",
        run_settings(variant, arguments),
        label,
        arguments,
        log,
        build=lambda: build_model(task, positions, variant, arguments, seed),
        train=lambda model, checkpoint: train(model, task, arguments, seed, label, log, checkpoint),
        accuracy=lambda model, length: test_accuracy(model, task, length, arguments),
        learned=learned_attention,
        train_length=arguments.train_max_length,
        unit="positions",
        load=AdaptiveEntmaxMarianForCausalLM.from_pretrained,
    )


def table(results: dict, arguments: argparse.Namespace) -> str:
    """Exact match (and position accuracy) in % per (task, positions, variant) and test length, mean over seeds."""
    lines = length_runs.table_rows(results, arguments, arguments.train_max_length)
    lines += [
        "",
        "Exact-match accuracy (%) of greedy decoding, and in parentheses the share of answer positions right (%, "
        f"position by position), mean over seeds {' '.join(map(str, arguments.seeds))}. Decoder-only "
        f"(`<bos> source <sep> target <eos>`, loss on the target), trained on lengths {arguments.train_min_length}–"
        f"{arguments.train_max_length}, {arguments.steps} steps × batch {arguments.batch_size}, AdamW "
        f"{arguments.learning_rate:g} with {arguments.warmup:.0%} warm-up then cosine; d_model {arguments.d_model}, "
        f"{arguments.layers} layers, {arguments.heads} heads, FFN {arguments.ffn_multiple}×, no dropout"
        + (
            f"; {LAYER_STYLE_DESCRIPTIONS[arguments.layer_style]}"
            + (", GeGLU, embeddings × √d_model" if arguments.layer_style == "gemma2" else "")
            if arguments.layer_style != "marian"
            else ""
        )
        + ". "
        "`nape`: ALiBi on half of the heads, no position on the others (SSMax and ASEntmax scale those only); `rope`: "
        "rotary positions on all heads."
        + (
            f" Each training source starts after 0–{arguments.filler_max} filler tokens (test sources after none)."
            if arguments.filler_max
            else ""
        )
        + (
            f" Each model is the checkpoint (every {select_every(arguments)} steps and the last) with the best exact"
            f" match on {arguments.select_strings} validation strings of"
            f" {arguments.select_multiple * arguments.train_max_length} symbols ({arguments.select_multiple}×), as the"
            " reference chooses its checkpoints."
            if arguments.select_multiple
            else ""
        ),
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    recipe = length_runs.RECIPE.settings  # the optimiser's defaults
    add("--output_dir", default="benchmarks/outputs/length-decoder-only")
    add("--tasks", nargs="+", choices=list(TASKS), default=list(DEFAULT_TASKS))
    add("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    add("--positions", nargs="+", choices=POSITIONS, default=["nape", "rope"])
    add("--seeds", nargs="+", type=int, default=[0, 1, 2])
    add("--train_min_length", type=int, default=32, help="shortest training string (the task's length)")
    add("--train_max_length", type=int, default=64, help="longest training string; tests are multiples of it")
    add("--test_multiples", nargs="+", type=int, default=[1, 2, 4, 8, 16, 64])
    add("--symbols", type=int, default=32, help="copy, reverse, sort: distinct symbols in the strings")
    add("--mqmtar_alphabet", type=int, default=32, help="MQMTAR: letters keys and values are made of")
    add("--mqmtar_queries", type=int, default=4, help="MQMTAR: queries per string")
    add("--flip_flop_write_prob", type=float, default=0.1, help="flip-flop: probability of a write command")
    add("--filler_max", type=int, default=0, help="up to this many filler tokens before each training source")
    add(
        "--layer_style",
        choices=LAYER_STYLES,
        default="marian",
        help="the layers: Marian's (post-norm), pre-norm, or Gemma-2's as in the reference (GeGLU, embeddings × √d)",
    )
    add(
        "--attention_scaling_projection_bias",
        action="store_true",
        help="asentmax_per_token: a bias per head in the maps of β and γ (the reference's attn_scale_proj_bias)",
    )
    add("--steps", type=int, default=2000)
    add("--batch_size", type=int, default=32)
    add("--learning_rate", type=float, default=recipe["learning_rate"])
    add("--warmup", type=float, default=recipe["warmup_steps"], help="share of the steps warming up")
    add("--d_model", type=int, default=64)
    add("--layers", type=int, default=2)
    add("--heads", type=int, default=4)
    add("--ffn_multiple", type=int, default=4, help="the feed-forward width, in multiples of d_model")
    add("--test_strings", type=int, default=100, help="test strings per length, at most")
    add("--min_test_strings", type=int, default=4, help="test strings per length, at least")
    add("--test_tokens", type=int, default=16384, help="test tokens per length, about")
    add("--test_seed", type=int, default=1234)
    add("--eval_tokens", type=int, default=32768, help="prompt tokens per decoding batch")
    add("--prefill_chunk", type=int, default=1024, help="prompt tokens read into the cache at once")
    add(
        "--select_multiple",
        type=int,
        default=0,
        help="keep the checkpoint with the best validation exact match at this multiple of the longest training "
        "string (the reference: 8 for copy, 4 for sort); 0, the default, keeps the last",
    )
    add("--select_every", type=int, default=0, help="steps between validations (0: a tenth of the steps)")
    add("--select_strings", type=int, default=32, help="validation strings to choose the checkpoint on")
    add("--log_every", type=int, default=250)
    add_threads_option(parser)
    length_runs.add_save_models_option(parser)
    length_runs.add_checkpoint_option(parser)
    add("--device", default="cpu", help="cpu, cuda or cuda:N (training and test)")
    add("--markdown", nargs="+", default=None, help="put the table into these Markdown files")
    return parser


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked: positive sizes, a training range that MQMTAR and flip-flop can fill."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    positive = ("train_min_length", "symbols", "mqmtar_alphabet", "mqmtar_queries", "steps", "batch_size")
    positive += ("d_model", "layers", "heads", "test_strings", "min_test_strings", "eval_tokens", "prefill_chunk")
    positive += ("log_every", "ffn_multiple", "test_tokens", "select_strings")
    length_runs.check_positive(parser, arguments, positive)
    for name in ("select_multiple", "select_every"):
        if getattr(arguments, name) < 0:
            parser.error(f"--{name} must be 0 or more, got {getattr(arguments, name)}")
    chosen = arguments.select_every or arguments.select_strings != parser.get_default("select_strings")
    if chosen and not arguments.select_multiple:
        parser.error("--select_every and --select_strings choose a checkpoint: give --select_multiple too")
    if arguments.select_multiple and arguments.test_seed == VALIDATION_SEED:
        parser.error(f"--test_seed {VALIDATION_SEED} would test on the validation strings; choose another")
    if arguments.train_max_length < arguments.train_min_length:
        parser.error(
            f"--train_max_length ({arguments.train_max_length}) is below --train_min_length "
            f"({arguments.train_min_length})"
        )
    if arguments.attention_scaling_projection_bias and "asentmax_per_token" not in arguments.variants:
        parser.error(
            "--attention_scaling_projection_bias is for per-token ASEntmax: add asentmax_per_token to --variants"
        )
    if arguments.filler_max < 0:
        parser.error(f"--filler_max is a number of tokens, 0 or more, got {arguments.filler_max}")
    if not 0 <= arguments.warmup <= 1:
        parser.error(f"--warmup is a share of the steps, in [0, 1], got {arguments.warmup}")
    if not 0 < arguments.flip_flop_write_prob < 1:
        parser.error(f"--flip_flop_write_prob must be in (0, 1), got {arguments.flip_flop_write_prob}")
    shortest = {"mqmtar": math.ceil(PAIR_UNIT / PAIR_SHARE), "flip-flop": 4}
    for task, length in shortest.items():
        if task in arguments.tasks and arguments.train_min_length < length:
            parser.error(f"--train_min_length must be at least {length} for {task}, got {arguments.train_min_length}")
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    length_runs.use_device(arguments, sys.exit)
    length_runs.run_all(arguments, "bench_length_decoder_only.py", argv, run_one, table, TABLE)


if __name__ == "__main__":
    stop_in_one_line(main)
