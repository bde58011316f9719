"""Looking inside a kept decoder-only run (benchmarks/inspect_length_decoder_only.py): the kinds of first errors,
the heads table, and the command on a tiny run of the benchmark, whose errors table agrees with the run's score."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_length_decoder_only as bench  # noqa: E402
import inspect_length_decoder_only as inspect_run  # noqa: E402
from test_bench_length_decoder_only import TINY  # noqa: E402


def tokens(*symbols) -> torch.Tensor:
    """The model's tokens of task symbols (ints) and ``"eos"``."""
    return torch.tensor([bench.EOS if value == "eos" else value + bench.FIRST_SYMBOL for value in symbols])


@pytest.mark.parametrize(
    ("task", "source", "output", "kind"),
    [
        ("copy", (5, 1, 2, 5, 3), (5, 1, 2, 5, 3, "eos"), None),
        ("copy", (5, 1, 2, 5, 3), (5, 1, "eos"), "stops early"),
        ("copy", (5, 1, 2, 5, 3), (5, 1, 2, 5, 1), "jumps to another copy"),  # 1 follows the first 5
        ("copy", (5, 1, 2, 5, 3), (5, 1, 2, 5, 4), "other"),
        ("copy", (5, 1, 2, 5, 3), (5, 1, 2, 5, 5), "runs on"),
        ("reverse", (1, 5, 2, 5, 3), (3, 5, 1), "jumps to another copy"),  # 1 comes before the other 5
        ("reverse", (1, 5, 2, 5, 3), (3, 5, 3), "other"),  # 3 follows that 5, which reverse does not look for
    ],
)
def test_first_errors_are_sorted_into_their_kinds(task, source, output, kind):
    answer = tokens(*(source if task == "copy" else reversed(source)), "eos")
    error = inspect_run.first_error(task, tokens(*source), answer, tokens(*output))
    assert (error and error[0]) == kind


def test_a_sort_that_moves_on_from_a_run_says_how_many_copies_it_wrote():
    source = tokens(2, 0, 2, 1, 2)
    answer = tokens(0, 1, 2, 2, 2, "eos")
    assert inspect_run.first_error("sort", source, answer, tokens(0, 1, 2, 2, "eos")) == (
        "stops early",
        "at 5 of 6: expected 2, wrote <eos>",
    )
    assert inspect_run.first_error("sort", source, answer, tokens(0, 1, 2, 2, 1)) == (
        "ends a run early",
        "at 5 of 6: expected 2, wrote 1; 2 of 3",
    )
    assert inspect_run.first_error("sort", source, answer, tokens(0, 1, 1))[0] == "runs on"
    assert inspect_run.first_error("sort", source, answer, tokens(0, 1, 2, 2, 2, "eos")) is None


def heads_rows(lines: list[str]) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.parametrize("variant", ["softmax", "asentmax"])
def test_the_heads_table_says_where_each_heads_attention_goes(variant):
    arguments = bench.parse_arguments([*TINY, "--heads", "4"])
    model = bench.build_model("copy", "nape", variant, arguments, seed=0).eval()
    pairs = bench.test_pairs("copy", 12, arguments)
    rows = heads_rows(inspect_run.heads_table(model, pairs, inspect_run.head_labels(model)))
    assert [(row[0], row[1]) for row in rows] == [(str(layer), str(head)) for layer in range(2) for head in range(4)]
    scaled = ", scaled" if variant == "asentmax" else ""
    assert [row[2] for row in rows] == ["ALiBi 1", "ALiBi 0.5", f"none{scaled}", f"none{scaled}"] * 2
    seen = sum(range(14, 27)) / 13  # the 13 answer queries (<sep> … last symbol) see 14 … 26 keys each
    for row in rows:
        kept, shares = float(row[3]), [float(cell.rstrip("%")) for cell in row[5:]]
        assert float(row[4]) == round(seen)
        assert 1 <= kept <= seen and all(0 <= share <= 100 for share in shares)
        assert sum(shares) <= 100.15  # <bos>, the source's and the answer's copies are different keys
    if variant == "softmax":  # softmax keeps every key it sees
        assert all(abs(float(row[3]) - seen) < 0.05 for row in rows)


def test_the_command_looks_into_a_kept_run_and_its_errors_match_the_runs_score(tmp_path, capsys):
    output_dir = tmp_path / "out"
    command = [*TINY, "--output_dir", str(output_dir), "--tasks", "sort", "--positions", "nape"]
    bench.main([*command, "--variants", "entmax15", "--seeds", "0", "--save_models"])
    run = output_dir / "sort" / "nape" / "entmax15" / "seed0"
    result = json.loads((run / "result.json").read_text())
    capsys.readouterr()
    inspect_run.main([str(run), "--head_strings", "1"])
    out = capsys.readouterr().out
    arguments = bench.parse_arguments(TINY)
    for multiple in ("1", "2"):
        length = int(multiple) * arguments.train_max_length
        section = out.split(f"## {multiple}× ({length} symbols)")[1].split("## ")[0]
        assert "Heads, on 1 strings" in section and "| 1 | 1 | none |" in section
        count = len(bench.test_pairs("sort", length, arguments))
        right = re.search(r"\| right \| (\d+) \|", section)
        assert (int(right.group(1)) if right else 0) == round(result["exact match"][multiple] * count)
        assert len(re.findall(r"^- string \d+: ", section, flags=re.MULTILINE)) == count - (
            int(right.group(1)) if right else 0
        )


def test_a_folder_that_is_not_a_kept_run_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        inspect_run.main([str(tmp_path)])
    assert "result.json does not exist: RUN is a run folder" in capsys.readouterr().err
    run = tmp_path / "copy" / "nape" / "softmax" / "seed0"
    run.mkdir(parents=True)
    (run / "result.json").write_text("{}")
    with pytest.raises(SystemExit):
        inspect_run.main([str(run)])
    assert "model does not exist: the run was trained without --save_models" in capsys.readouterr().err
    (run / "model").mkdir()
    with pytest.raises(SystemExit):
        inspect_run.main([str(run)])
    assert "is not a run's result (no 'settings'" in capsys.readouterr().err
    elsewhere = tmp_path / "notes" / "a" / "b" / "seed0"
    (elsewhere / "model").mkdir(parents=True)
    (elsewhere / "result.json").write_text(json.dumps({"settings": {}}))
    with pytest.raises(SystemExit):
        inspect_run.main([str(elsewhere)])
    assert "is not in a task's folder ('notes' is not one of copy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        inspect_run.main([str(run), "--multiples", "0"])
    assert "--multiples are positive multiples" in capsys.readouterr().err
