"""The encoder–decoder length benchmark (benchmarks/bench_length_synthetic.py) at tiny sizes: a run of relative
positions writes its own table, beside (not over) the sinusoidal one, cross-attention positions a third, and a run
of two kinds with --markdown is refused before anything trains; a finished run is read at the lengths it was tested
at, not tested at new ones; a stopped run resumes from its checkpoint."""

import argparse
import json
import os
import sys
from pathlib import Path

import pytest


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_length_synthetic as bench  # noqa: E402


TINY = [
    "--tasks", "copy", "--variants", "asentmax", "--seeds", "0", "--train_length", "4", "--test_multiples", "1", "2",
    "--symbols", "4", "--steps", "2", "--batch_size", "4", "--d_model", "16", "--layers", "1", "--heads", "2",
    "--test_strings", "2", "--min_test_strings", "2", "--log_every", "1",
]  # fmt: skip
DOCUMENT = """# Benchmarks

<!-- table:length-synthetic -->
sinusoidal rows
<!-- /table:length-synthetic -->

<!-- table:length-synthetic-relative -->
old relative
<!-- /table:length-synthetic-relative -->

<!-- table:length-synthetic-cross -->
old cross
<!-- /table:length-synthetic-cross -->
"""


@pytest.mark.parametrize(
    ("positions", "name", "other"),
    [
        ("nape-split", "length-synthetic-relative", "old cross"),
        ("nape-split-cross", "length-synthetic-cross", "old relative"),
    ],
)
def test_relative_and_cross_attention_positions_have_their_own_tables(tmp_path, positions, name, other):
    document = tmp_path / "benchmarks.md"
    document.write_text(DOCUMENT)
    command = [*TINY, "--positions", positions, "--output_dir", str(tmp_path / "out")]
    bench.main([*command, "--markdown", str(document)])
    text = document.read_text()
    assert "sinusoidal rows" in text and other in text
    table = text[text.index(f"<!-- table:{name} -->") : text.index(f"<!-- /table:{name} -->")]
    rows = [line.split(" | ")[:3] for line in table.splitlines() if line.startswith("| copy")]
    assert rows == [["| copy", positions, "asentmax"]] and "old" not in table
    assert f"--positions {positions}" in table
    # The command is recorded as a reader retypes it: the measuring machine's absolute paths made relative.
    assert f" {tmp_path}" not in text and f"--output_dir {os.path.relpath(tmp_path / 'out')}" in table


@pytest.mark.parametrize("positions", [["offset", "rope"], ["rope", "rope-cross"]])
def test_a_run_of_two_kinds_of_positions_with_markdown_is_refused(tmp_path, capsys, positions):
    document = tmp_path / "benchmarks.md"
    document.write_text(DOCUMENT)
    command = [*TINY, "--positions", *positions, "--output_dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        bench.main([*command, "--markdown", str(document)])
    assert "go to separate tables; run them separately" in capsys.readouterr().err
    assert document.read_text() == DOCUMENT and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        ("rope", ("rope", "both", "none")),
        ("rope-cross", ("rope", "both", "rope")),
        ("nape-split", ("nape", "split", "none")),
        ("nape-split-cross", ("nape", "split", "nape")),
        ("alibi-cross", ("alibi", "both", "alibi")),
        ("rope-cross-nape", ("rope", "both", "nape")),
        ("offset", ("sinusoidal", "both", "none")),
    ],
)
def test_each_positions_option_builds_the_model_it_names(positions, expected):
    sizes = dict(symbols=4, d_model=16, layers=1, heads=2, dropout=0.0, train_length=4, test_multiples=[1, 2])
    config = bench.build_model("asentmax", argparse.Namespace(**sizes), seed=0, positions=positions).config
    assert (config.position_embedding_type, config.encoder_alibi_directions, config.cross_attention_positions) == (
        expected
    )


def test_a_finished_run_is_read_at_fewer_lengths_and_refused_at_new_ones(tmp_path, capsys):
    command = [*TINY, "--positions", "rope", "--output_dir", str(tmp_path / "out")]
    bench.main(command)
    capsys.readouterr()
    bench.main([*command, "--test_multiples", "2"])
    assert "finished before" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not tested at 4×, and this benchmark tests runs as it trains them only"):
        bench.main([*command, "--test_multiples", "1", "4"])
    with pytest.raises(
        SystemExit, match=r"tested on other strings .*, and this benchmark tests runs as it trains them"
    ):
        bench.main([*command, "--test_seed", "7"])


def test_a_stopped_run_resumes_from_its_checkpoint_as_if_it_never_stopped(tmp_path, monkeypatch):
    command = [*TINY, "--positions", "rope", "--steps", "5", "--checkpoint_every", "2"]
    bench.main([*command, "--output_dir", str(tmp_path / "whole")])
    drawn = []
    make_batch = bench.make_batch

    def interrupted(*batch_arguments):
        drawn.append(1)
        if len(drawn) == 4:
            raise KeyboardInterrupt
        return make_batch(*batch_arguments)

    with monkeypatch.context() as patch:
        patch.setattr(bench, "make_batch", interrupted)
        with pytest.raises(KeyboardInterrupt, match="stopped in step 4; the same command resumes it from step 2"):
            bench.main([*command, "--output_dir", str(tmp_path / "stopped")])
    bench.main([*command, "--output_dir", str(tmp_path / "stopped")])
    whole, resumed = (
        json.loads((tmp_path / run / "copy" / "rope" / "asentmax" / "seed0" / "result.json").read_text())
        for run in ("whole", "stopped")
    )
    assert resumed["final training loss"] == whole["final training loss"] and resumed["learned"] == whole["learned"]
