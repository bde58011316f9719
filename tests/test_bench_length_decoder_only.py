"""The decoder-only length benchmark (benchmarks/bench_length_decoder_only.py): its tasks, batches, decoding and
scoring, the reuse of finished runs, checkpoint choice, stopped runs resumed, and one tiny run end to end that writes
its table between the markers.

The task checks read the generated strings with rules restated here (sorted order, the key–value pairs found by
scanning the source), not with the generators' own code."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hf_entmax.cli import EXIT_INTERRUPTED


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_length_decoder_only as bench  # noqa: E402


TINY = [
    "--d_model", "32", "--layers", "2", "--heads", "2", "--steps", "3", "--batch_size", "4",
    "--train_min_length", "8", "--train_max_length", "12", "--test_multiples", "1", "2",
    "--test_strings", "3", "--min_test_strings", "2", "--symbols", "6", "--log_every", "1",
]  # fmt: skip


@pytest.fixture
def arguments():
    return bench.parse_arguments(TINY)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_model(arguments, task: str = "copy", positions: str = "nape", variant: str = "softmax", seed: int = 0):
    return bench.build_model(task, positions, variant, arguments, seed).eval()


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_string_tasks_answer_what_they_claim(task, arguments):
    data = generator()
    for length in (1, 8, 30):
        source, target = bench.TASKS[task](length, arguments, data)
        assert source.shape == target.shape == (length,)
        assert 0 <= source.min() and source.max() < arguments.symbols
        expected = {
            "copy": source.tolist(),
            "reverse": source.tolist()[::-1],
            "sort": sorted(source.tolist()),
        }[task]
        assert target.tolist() == expected


def test_training_lengths_cover_the_range_and_nothing_else(arguments):
    arguments.batch_size = 500
    lengths = bench.training_lengths(arguments, generator())
    assert set(lengths) == set(range(arguments.train_min_length, arguments.train_max_length + 1))


@pytest.mark.parametrize("length", [8, 48, 64, 700])
def test_mqmtar_targets_are_the_values_of_the_queried_keys(length, arguments):
    queries = arguments.mqmtar_queries
    source, target = bench.sample_mqmtar(length, arguments, generator(length))
    source, target = source.tolist(), target.tolist()
    query_part, pairs_part = source[-3 * queries :], source[: -3 * queries]
    assert len(pairs_part) <= length
    # Scan the pairs part: spaces, and `k k : v v` followed by a space.
    values, position = {}, 0
    while position < len(pairs_part):
        if pairs_part[position] == bench.SPACE:
            position += 1
            continue
        key, separator = tuple(pairs_part[position : position + 2]), pairs_part[position + 2]
        value, closing = tuple(pairs_part[position + 3 : position + 5]), pairs_part[position + 5]
        assert separator == bench.KEY_VALUE_SEPARATOR and closing == bench.SPACE
        assert min(key + value) >= bench.FIRST_LETTER and key not in values
        values[key] = value
        position += 6
    assert len(values) == bench.mqmtar_pairs(length, arguments.mqmtar_alphabet) >= 1
    assert len(set(values.values())) == len(values)  # values distinct too
    expected = []
    for start in range(0, 3 * queries, 3):
        assert query_part[start] == bench.QUERY
        expected += [bench.QUERY, *values[tuple(query_part[start + 1 : start + 3])]]
    assert target == expected


def test_mqmtar_pairs_sit_at_varied_offsets_of_equal_blocks(arguments):
    source, _ = bench.sample_mqmtar(480, arguments, generator())
    pairs = bench.mqmtar_pairs(480, arguments.mqmtar_alphabet)
    block = 480 // pairs
    blocks = torch.tensor(source[: pairs * block].tolist()).view(pairs, block)
    offsets = (blocks != bench.SPACE).long().argmax(dim=1)  # the first letter of each block's key
    assert ((blocks != bench.SPACE).sum(dim=1) == 5).all()  # one pair (5 tokens) per block
    assert len(set(offsets.tolist())) > 1


def test_flip_flop_answers_the_last_written_bit(arguments):
    data = generator()
    for length in (4, 5, 48, 200):
        source, target = bench.sample_flip_flop(length, arguments, data)
        source = source.tolist()
        assert len(source) == 2 * (length // 2) - 1 and source[-1] == bench.READ and source[0] == bench.WRITE
        commands, bits = source[0::2], source[1::2]
        last_write = max(index for index, command in enumerate(commands) if command == bench.WRITE)
        assert target.tolist() == [bits[last_write]]


def test_the_training_batch_labels_the_target_and_its_eos_only(arguments):
    pairs = bench.samples("reverse", [3, 5], arguments, generator())
    batch = bench.training_batch(pairs)
    for row, (source, target) in enumerate(pairs):
        sequence = [bench.BOS, *source.tolist(), bench.SEP, *target.tolist(), bench.EOS]
        width = batch["input_ids"].shape[1]
        assert batch["input_ids"][row].tolist() == sequence + [bench.PAD] * (width - len(sequence))
        assert batch["attention_mask"][row].sum() == len(sequence)
        labelled = (batch["labels"][row] != -100).nonzero().flatten().tolist()
        assert labelled == list(range(len(source) + 2, len(sequence)))
        assert batch["labels"][row, labelled].tolist() == [*target.tolist(), bench.EOS]


def test_fillers_come_between_bos_and_the_source_and_their_number_varies(arguments):
    arguments.filler_max = 3
    filler = bench.filler_token("copy", arguments)
    assert filler == bench.FIRST_SYMBOL + arguments.symbols  # after every symbol of the task
    pairs = bench.samples("copy", [5] * 200, arguments, generator())
    filled = bench.with_fillers(pairs, arguments, filler, generator(1))
    counts = set()
    for (source, target), (filled_source, filled_target) in zip(pairs, filled, strict=True):
        count = len(filled_source) - len(source)
        counts.add(count)
        assert filled_source.tolist() == [filler] * count + source.tolist() and torch.equal(filled_target, target)
    assert counts == {0, 1, 2, 3}
    # The loss stays on the target: the fillers are part of the prompt.
    batch = bench.training_batch(filled[:2])
    for row, (source, target) in enumerate(filled[:2]):
        labelled = (batch["labels"][row] != -100).nonzero().flatten().tolist()
        assert labelled == list(range(len(source) + 2, len(source) + len(target) + 3))
    model = tiny_model(arguments)
    assert model.config.vocab_size == filler + 1
    assert torch.isfinite(model(**batch).loss)


def test_fillers_are_a_setting_of_the_runs_that_use_them_only(arguments):
    assert "filler_max" not in bench.run_settings("softmax", arguments)  # as runs measured before the option
    assert tiny_model(arguments).config.vocab_size == bench.filler_token("copy", arguments)
    arguments.filler_max = 4
    assert bench.run_settings("softmax", arguments)["filler_max"] == 4
    with pytest.raises(SystemExit):
        bench.parse_arguments([*TINY, "--filler_max", "-1"])


def test_projection_biases_are_a_setting_of_per_token_runs_that_ask_for_them(arguments):
    assert "attention_scaling_projection_bias" not in bench.run_settings("asentmax_per_token", arguments)["variant"]
    biased = bench.parse_arguments([*TINY, "--attention_scaling_projection_bias"])
    assert bench.run_settings("asentmax_per_token", biased)["variant"]["attention_scaling_projection_bias"] is True
    assert bench.run_settings("asentmax", biased) == bench.run_settings("asentmax", arguments)
    model = tiny_model(biased, variant="asentmax_per_token")
    assert model.model.decoder.layers[0].self_attn.scale_beta_proj.bias is not None
    with pytest.raises(SystemExit):  # a flag that no variant of the run would use
        bench.parse_arguments([*TINY, "--attention_scaling_projection_bias", "--variants", "softmax", "asentmax"])


def test_the_layer_style_is_a_setting_of_the_runs_that_change_it(arguments):
    assert "layer_settings" not in bench.run_settings("softmax", arguments)  # as runs measured before the option
    gemma2 = bench.parse_arguments([*TINY, "--layer_style", "gemma2"])
    assert bench.run_settings("softmax", gemma2)["layer_settings"]["layer_style"] == "gemma2"
    assert bench.run_settings("softmax", gemma2)["layers"] == 2
    config = tiny_model(gemma2).config
    assert (config.layer_style, config.activation_function, config.scale_embedding) == (
        "gemma2",
        "gelu_pytorch_tanh",
        True,
    )
    assert "no dropout; Gemma-2's layers (RMSNorm before and after each block" in bench.table({}, gemma2)


def test_the_loss_is_the_cross_entropy_of_the_target_positions(arguments):
    model = tiny_model(arguments)
    batch = bench.training_batch(bench.samples("copy", [4, 7], arguments, generator()))
    output = model(**batch)
    # The model predicts token t + 1 at position t: the labelled positions, shifted by one.
    logits, labels = output.logits[:, :-1], batch["labels"][:, 1:]
    expected = torch.nn.functional.cross_entropy(logits[labels != -100], labels[labels != -100])
    torch.testing.assert_close(output.loss, expected)
    # A loss over every position (the source's too) would be another number.
    everything = batch["input_ids"][:, 1:][batch["attention_mask"][:, 1:] == 1]
    assert not torch.isclose(
        output.loss, torch.nn.functional.cross_entropy(logits[batch["attention_mask"][:, 1:] == 1], everything)
    )


def test_score_counts_exact_matches_and_positions():
    eos, pad = bench.EOS, bench.PAD
    answers = torch.tensor([[5, 6, 7, eos], [5, 6, 7, eos], [5, 6, 7, eos], [5, 6, 7, eos]])
    outputs = torch.tensor(
        [
            [5, 6, 7, eos],  # right: exact, 4 positions, all before the first wrong one
            [5, 9, 7, eos],  # one wrong symbol: 3 positions, 1 before it
            [5, eos, 7, eos],  # stopped early: what follows <eos> does not count, 1 position
            [5, 6, 7, 7],  # no <eos>: 3 positions
        ]
    )
    assert bench.score(outputs, answers) == (1, 4 + 3 + 1 + 3, 4 + 1 + 1 + 3)
    # Shorter outputs (every string of the batch stopped) count the missing positions as wrong.
    assert bench.score(torch.tensor([[5, eos], [5, 6]]), answers[:2]) == (0, 1 + 2, 1 + 2)
    assert bench.score(torch.tensor([[5, 6, 7, eos, pad]]), answers[:1]) == (1, 4, 4)


def test_greedy_decoding_matches_generate_whatever_the_prefill_chunk(arguments):
    model = tiny_model(arguments, positions="nape", variant="asentmax")
    prompts, answers = bench.prompts_and_answers(bench.samples("copy", [9, 9, 9], arguments, generator()))
    expected = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=answers.shape[1],
        do_sample=False,
        num_beams=1,
        eos_token_id=bench.EOS,
        pad_token_id=bench.PAD,
    )[:, prompts.shape[1] :]
    for chunk in (1, 4, 100):
        outputs = bench.greedy_decode(model, prompts, answers.shape[1], prefill_chunk=chunk)
        assert torch.equal(outputs, expected[:, : outputs.shape[1]]), chunk


def test_variants_start_from_the_softmax_weights_where_shapes_allow(arguments):
    softmax = tiny_model(arguments).state_dict()
    asentmax = tiny_model(arguments, variant="asentmax_per_token").state_dict()
    shared = [name for name in softmax if name in asentmax]
    assert shared and all(torch.equal(softmax[name], asentmax[name]) for name in shared)
    assert set(asentmax) - set(softmax)  # the scale's own parameters
    other_seed = tiny_model(arguments, seed=1).state_dict()
    assert not all(torch.equal(softmax[name], other_seed[name]) for name in softmax)


@pytest.mark.parametrize("positions", ["nape", "rope"])
def test_every_variant_builds_trains_and_reports_what_it_learns(positions, arguments):
    batch = bench.training_batch(bench.samples("sort", [8, 12], arguments, generator()))
    for variant, overrides in bench.VARIANTS.items():
        model = tiny_model(arguments, "sort", positions, variant)
        model(**batch).loss.backward()
        learned = bench.learned_attention(model)
        alpha = learned["mean α decoder_self"]
        assert alpha == overrides["alpha_init"] if overrides["learn_alpha"] is False else 1 <= alpha <= 2, variant
        if overrides.get("attention_scaling") in ("asentmax", "ssmax"):
            heads = arguments.layers * arguments.heads
            assert learned["scaled heads decoder_self"] == (heads // 2 if positions == "nape" else heads), variant


def test_a_finished_run_is_read_and_one_with_other_settings_refused(arguments, tmp_path, monkeypatch):
    arguments.output_dir = str(tmp_path)
    folder = tmp_path / "copy" / "nape" / "softmax" / "seed0"
    folder.mkdir(parents=True)
    finished = {"settings": bench.run_settings("softmax", arguments), "exact match": {"1": 0.5, "2": 0.25}}
    (folder / "result.json").write_text(json.dumps(finished))

    def no_training(*_):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "build_model", no_training)
    assert bench.run_one("copy", "nape", "softmax", 0, arguments, print) == finished
    arguments.test_multiples = [1]  # fewer test lengths: the same run
    assert bench.run_one("copy", "nape", "softmax", 0, arguments, print) == finished
    arguments.steps += 1
    with pytest.raises(SystemExit, match="other settings"):
        bench.run_one("copy", "nape", "softmax", 0, arguments, print)


def test_the_command_line_refuses_an_empty_training_range():
    with pytest.raises(SystemExit):
        bench.parse_arguments(["--train_min_length", "70", "--train_max_length", "64"])
    with pytest.raises(SystemExit):
        bench.parse_arguments(["--tasks", "mqmtar", "--train_min_length", "4", "--train_max_length", "8"])


def test_a_tiny_benchmark_writes_its_table_between_the_markers_and_reuses_its_runs(tmp_path, capsys):
    document = tmp_path / "benchmarks.md"
    document.write_text(
        "# Benchmarks\n\n<!-- table:length-decoder-only -->\nold\n<!-- /table:length-decoder-only -->\n"
    )
    command = [*TINY, "--output_dir", str(tmp_path / "out"), "--tasks", "copy", "mqmtar", "--positions", "nape"]
    command += ["--variants", "asentmax", "--seeds", "0", "--markdown", str(document)]
    bench.main(command)
    text = document.read_text()
    assert "old" not in text and text.startswith("# Benchmarks")
    table = text[text.index("<!-- table:length-decoder-only -->") : text.index("<!-- /table:length-decoder-only -->")]
    rows = [line for line in table.splitlines() if line.startswith(("| copy", "| mqmtar"))]
    assert [row.split(" | ")[:3] for row in rows] == [["| copy", "nape", "asentmax"], ["| mqmtar", "nape", "asentmax"]]
    assert "bench_length_decoder_only.py" in table and "--tasks copy mqmtar" in table
    result = json.loads((tmp_path / "out" / "copy" / "nape" / "asentmax" / "seed0" / "result.json").read_text())
    assert set(result["exact match"]) == set(result["right prefix"]) == {"1", "2"} and result["steps per second"] > 0
    assert all(result["right prefix"][k] <= result["symbol accuracy"][k] for k in ("1", "2"))
    capsys.readouterr()
    bench.main(command)  # everything finished: read, not trained
    output = capsys.readouterr().out
    assert output.count("finished before") == 2 and "training 3 steps" not in output


def test_a_run_with_fillers_trains_on_them_and_says_so_in_its_table(tmp_path, monkeypatch):
    seen = []
    training_batch = bench.training_batch
    monkeypatch.setattr(bench, "training_batch", lambda pairs: seen.append(pairs) or training_batch(pairs))
    document = tmp_path / "benchmarks.md"
    document.write_text("<!-- table:length-decoder-only -->\n<!-- /table:length-decoder-only -->\n")
    command = [*TINY, "--output_dir", str(tmp_path / "out"), "--tasks", "copy", "--positions", "nape"]
    bench.main([*command, "--variants", "softmax", "--seeds", "0", "--filler_max", "5", "--markdown", str(document)])
    filler = bench.filler_token("copy", bench.parse_arguments(TINY))
    assert len(seen) == 3 and any(source[0] == filler for pairs in seen for source, _ in pairs)
    assert "after 0–5 filler tokens" in document.read_text() and "--filler_max 5" in document.read_text()


def test_a_saved_model_is_the_one_that_was_scored(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    output_dir = tmp_path / "out"
    command = [*TINY, "--output_dir", str(output_dir), "--tasks", "copy", "--positions", "nape"]
    command += ["--variants", "asentmax", "--seeds", "0", "--save_models"]
    bench.main(command)
    folder = output_dir / "copy" / "nape" / "asentmax" / "seed0"
    result = json.loads((folder / "result.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder / "model")
    arguments = bench.parse_arguments(TINY)
    untrained = tiny_model(arguments, "copy", "nape", "asentmax").state_dict()
    saved = model.state_dict()
    assert saved.keys() == untrained.keys()
    assert not all(torch.equal(saved[name], untrained[name]) for name in saved)  # trained, not only built
    for multiple in ("1", "2"):
        length = int(multiple) * arguments.train_max_length
        assert bench.test_accuracy(model, "copy", length, arguments) == (
            result["exact match"][multiple],
            result["symbol accuracy"][multiple],
            result["right prefix"][multiple],
        )
    capsys.readouterr()
    bench.main([*command[:-1], "--output_dir", str(tmp_path / "other")])  # trained without saving
    bench.main([*command[:-1], "--output_dir", str(tmp_path / "other"), "--save_models"])
    assert "no model saved" in capsys.readouterr().out


@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    """A tiny softmax run finished with its model kept (``command``) and one without (``unsaved``); training again
    fails, and ``tested`` lists the lengths tested from then on."""
    output_dir = tmp_path / "out"
    command = [*TINY, "--output_dir", str(output_dir), "--tasks", "copy", "--positions", "nape"]
    command += ["--variants", "softmax", "--seeds", "0", "--save_models"]
    unsaved = [*command[:-1], "--output_dir", str(tmp_path / "unsaved")]
    bench.main(command)
    bench.main(unsaved)
    result_file = output_dir / "copy" / "nape" / "softmax" / "seed0" / "result.json"

    def no_training(*_):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "build_model", no_training)
    tested = []
    test_accuracy = bench.test_accuracy
    monkeypatch.setattr(bench, "test_accuracy", lambda *given: tested.append(given[2]) or test_accuracy(*given))
    return SimpleNamespace(
        command=command,
        unsaved=unsaved,
        result_file=result_file,
        before=json.loads(result_file.read_text()),
        tested=tested,
        test_accuracy=test_accuracy,
    )


def test_a_finished_run_is_tested_on_its_kept_model_at_new_lengths_only(finished_run, capsys):
    capsys.readouterr()
    bench.main([*finished_run.command, "--test_multiples", "1", "2", "3"])
    out = capsys.readouterr().out
    assert finished_run.tested == [36] and "testing its kept model at 3×" in out  # 3 × the longest, 12
    after = json.loads(finished_run.result_file.read_text())
    model = bench.AdaptiveEntmaxMarianForCausalLM.from_pretrained(finished_run.result_file.parent / "model")
    measured = finished_run.test_accuracy(model, "copy", 36, bench.parse_arguments(TINY))
    assert (after["exact match"]["3"], after["symbol accuracy"]["3"], after["right prefix"]["3"]) == measured
    for name in ("exact match", "symbol accuracy", "right prefix"):
        assert {key: after[name][key] for key in ("1", "2")} == finished_run.before[name]
    assert after["settings"] == {**finished_run.before["settings"], "test_multiples": [1, 2, 3]}
    assert after["test seconds"] > finished_run.before["test seconds"]

    bench.main([*finished_run.command, "--test_multiples", "3", "1"])  # lengths it was tested at: read, nothing tested
    assert finished_run.tested == [36] and "| 3× (36) | 1× (12) |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"not tested at 4×, and its model was not kept \(--save_models\)"):
        bench.main([*finished_run.unsaved, "--test_multiples", "1", "4"])


def test_a_kept_model_tested_on_other_strings_replaces_the_result(finished_run, capsys):
    other_strings = ["--test_multiples", "2", "--test_seed", "7", "--test_strings", "4"]
    bench.main([*finished_run.command, *other_strings])
    assert finished_run.tested == [24]  # every length asked for, though 2× was tested before
    after = json.loads(finished_run.result_file.read_text())
    model = bench.AdaptiveEntmaxMarianForCausalLM.from_pretrained(finished_run.result_file.parent / "model")
    exact, right, prefix = finished_run.test_accuracy(
        model, "copy", 24, bench.parse_arguments([*TINY, *other_strings])
    )
    measured = {"exact match": {"2": exact}, "symbol accuracy": {"2": right}, "right prefix": {"2": prefix}}
    assert {name: after[name] for name in measured} == measured  # 1× went with the old strings
    assert after["settings"] == {
        **finished_run.before["settings"],
        "test_multiples": [2],
        "test_seed": 7,
        "test_strings": 4,
    }

    bench.main([*finished_run.command, *other_strings])  # the same strings again: read, nothing tested
    assert finished_run.tested == [24]
    capsys.readouterr()
    bench.main(finished_run.command)  # back to the first strings: tested again at both lengths
    assert finished_run.tested == [24, 12, 24] and "on other strings" in capsys.readouterr().out
    again = json.loads(finished_run.result_file.read_text())
    # the same strings, the same scores
    assert {**again, "test seconds": None} == {**finished_run.before, "test seconds": None}
    with pytest.raises(SystemExit, match=r"tested on other strings .*, and its model was not kept \(--save_models\)"):
        bench.main([*finished_run.unsaved, "--test_seed", "7"])


def test_training_ends_with_the_best_validated_weights_the_earliest_of_equals(arguments):
    model = tiny_model(arguments)
    arguments.steps, arguments.log_every = 7, 100
    scores = iter([(0.25, 0.9), (0.5, 0.1), (0.5, 0.1), (0.5, 0.05)])  # at steps 2, 4, 6 and the last, 7
    snapshots = []

    def validate():
        model.eval()  # as decoding does; training must go on in training mode
        snapshots.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
        return next(scores)

    pairs = bench.samples("copy", [8] * 4, arguments, generator())
    batch = bench.training_batch(pairs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    figures = bench.length_runs.train_steps(
        model, optimizer, schedule, lambda: batch, arguments, "t", print, validate, validate_every=2
    )
    assert figures["selected step"] == 4 and [row[0] for row in figures["validation"]] == [2, 4, 6, 7]
    assert figures["validation"][1] == [4, 0.5, 0.1] and figures["validation seconds"] >= 0
    weights = model.state_dict()
    assert all(torch.equal(weights[name], snapshots[1][name]) for name in weights)
    assert not all(torch.equal(weights[name], snapshots[3][name]) for name in weights)  # not the last
    assert model.training


def test_validation_strings_are_fixed_and_never_the_test_strings():
    arguments = bench.parse_arguments([*TINY, "--select_multiple", "2", "--select_strings", "5"])
    validation = bench.validation_pairs("copy", 24, arguments)
    assert len(validation) == 5 and all(len(source) == 24 for source, _ in validation)
    again = bench.validation_pairs("copy", 24, arguments)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(validation, again, strict=True))
    tests = {tuple(source.tolist()) for source, _ in bench.test_pairs("copy", 24, arguments)}
    assert not tests & {tuple(source.tolist()) for source, _ in validation}
    assert bench.select_every(arguments) == 1  # a tenth of 3 steps, at least 1
    assert bench.run_settings("softmax", arguments)["select_multiple"] == 2
    assert "select_multiple" not in bench.run_settings("softmax", bench.parse_arguments(TINY))


@pytest.mark.parametrize(
    "options, message",
    [
        (["--select_every", "5"], "give --select_multiple too"),
        (["--select_strings", "8"], "give --select_multiple too"),
        (["--select_multiple", "-1"], "--select_multiple must be 0 or more"),
        (["--select_multiple", "2", "--select_strings", "0"], "--select_strings must be a positive integer"),
        (["--select_multiple", "2", "--test_seed", str(bench.VALIDATION_SEED)], "would test on the validation"),
    ],
)
def test_the_command_line_refuses_a_checkpoint_selection_it_would_ignore(options, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_arguments([*TINY, *options])
    assert message in capsys.readouterr().err


def test_a_run_keeps_and_saves_the_checkpoint_it_chose_and_says_so(tmp_path, capsys):
    output_dir = tmp_path / "out"
    document = tmp_path / "benchmarks.md"
    document.write_text("<!-- table:length-decoder-only -->\n<!-- /table:length-decoder-only -->\n")
    selection = ["--select_multiple", "2", "--select_every", "1", "--select_strings", "3"]
    command = [*TINY, "--output_dir", str(output_dir), "--tasks", "copy", "--positions", "nape", *selection]
    bench.main([*command, "--variants", "softmax", "--seeds", "0", "--save_models", "--markdown", str(document)])
    folder = output_dir / "copy" / "nape" / "softmax" / "seed0"
    result = json.loads((folder / "result.json").read_text())
    assert [row[0] for row in result["validation"]] == [1, 2, 3]
    assert result["settings"]["select_every"] == 1 and result["settings"]["select_strings"] == 3
    best = max((row[1], row[2]) for row in result["validation"])
    first_best = next(row[0] for row in result["validation"] if (row[1], row[2]) == best)
    assert result["selected step"] == first_best
    model = bench.AdaptiveEntmaxMarianForCausalLM.from_pretrained(folder / "model")
    arguments = bench.parse_arguments([*TINY, *selection])
    assert bench.pair_accuracy(model, bench.validation_pairs("copy", 24, arguments), arguments)[:2] == best
    assert "best exact match on 3 validation strings of 24 symbols (2×)" in document.read_text()
    assert f"selected the weights of step {first_best}" in capsys.readouterr().out


RESUMABLE = [
    *TINY, "--steps", "7", "--checkpoint_every", "2", "--tasks", "copy", "--positions", "nape",
    "--variants", "asentmax", "--seeds", "0", "--save_models",
    "--select_multiple", "2", "--select_every", "3", "--select_strings", "3",
]  # fmt: skip
TIMINGS = ("steps per second", "training seconds", "test seconds", "validation seconds")


def stop_at_step(monkeypatch, step: int) -> None:
    """Ctrl-C while drawing the batch of ``step`` (a training batch draws its lengths first)."""
    drawn = []
    training_lengths = bench.training_lengths

    def interrupted(arguments, generator):
        drawn.append(1)
        if len(drawn) == step:
            raise KeyboardInterrupt
        return training_lengths(arguments, generator)

    monkeypatch.setattr(bench, "training_lengths", interrupted)


def test_a_stopped_run_resumes_from_its_checkpoint_and_ends_as_if_it_never_stopped(tmp_path, monkeypatch, capsys):
    bench.main([*RESUMABLE, "--output_dir", str(tmp_path / "whole")])
    command = [*RESUMABLE, "--output_dir", str(tmp_path / "stopped")]
    folder = tmp_path / "stopped" / "copy" / "nape" / "asentmax" / "seed0"
    with monkeypatch.context() as patch:
        stop_at_step(patch, 6)
        with pytest.raises(KeyboardInterrupt, match="stopped in step 6; the same command resumes it from step 4"):
            bench.main(command)
    assert (folder / bench.length_runs.CHECKPOINT_FILE).is_file() and not (folder / "result.json").exists()
    with pytest.raises(SystemExit, match="saved by a run with other settings"):
        bench.main([*command, "--steps", "8"])
    partial = folder / f"{bench.length_runs.CHECKPOINT_FILE}.partial"
    partial.write_bytes(b"cut short")  # as a stop while writing one leaves it
    capsys.readouterr()
    bench.main([*command, "--test_multiples", "1"])  # what the run is tested on is not what it learned
    assert "resuming from the checkpoint of step 4" in capsys.readouterr().out
    assert not list(folder.glob("checkpoint*"))  # gone once the result is written

    whole_folder = tmp_path / "whole" / "copy" / "nape" / "asentmax" / "seed0"
    whole, resumed = (json.loads((run / "result.json").read_text()) for run in (whole_folder, folder))
    assert [row[0] for row in resumed["validation"]] == [3, 6, 7]
    for name in ("final training loss", "selected step", "validation", "learned"):
        assert resumed[name] == whole[name], name
    assert resumed["exact match"]["1"] == whole["exact match"]["1"]
    assert set(resumed) == set(whole) and all(resumed[name] >= 0 for name in TIMINGS)
    load = bench.AdaptiveEntmaxMarianForCausalLM.from_pretrained
    weights, resumed_weights = (load(run / "model").state_dict() for run in (whole_folder, folder))
    assert all(torch.equal(weights[name], resumed_weights[name]) for name in weights)


def test_a_run_stopped_before_its_first_checkpoint_starts_over(tmp_path, monkeypatch):
    command = [*RESUMABLE, "--output_dir", str(tmp_path), "--checkpoint_every", "0"]
    stop_at_step(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt, match="resumes it from the start"):
        bench.main(command)
    assert not list(tmp_path.rglob(bench.length_runs.CHECKPOINT_FILE))


def test_ctrl_c_ends_a_benchmark_in_one_line(capsys, monkeypatch):
    message = "copy / nape / softmax / seed 0: stopped in step 6; the same command resumes it from step 4"

    def stopped():
        raise KeyboardInterrupt(message)

    monkeypatch.delenv("HF_ENTMAX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        bench.stop_in_one_line(stopped)
    assert exit_.value.code == EXIT_INTERRUPTED and capsys.readouterr().err == f"interrupted: {message}\n"
    monkeypatch.setenv("HF_ENTMAX_DEBUG", "1")
    with pytest.raises(KeyboardInterrupt):
        bench.stop_in_one_line(stopped)


def test_the_command_line_refuses_a_negative_checkpoint_interval(capsys):
    with pytest.raises(SystemExit):
        bench.parse_arguments([*TINY, "--checkpoint_every", "-1"])
    assert "--checkpoint_every: a number of steps, 0 or more, got '-1'" in capsys.readouterr().err
