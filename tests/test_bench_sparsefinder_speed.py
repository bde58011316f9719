"""The Sparsefinder speed benchmark (benchmarks/bench_sparsefinder_speed.py): its decoding section, at a tiny size,
writes its table between its markers and leaves the other section's alone."""

import sys
from pathlib import Path

import pytest


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_sparsefinder_speed as bench  # noqa: E402


def test_decoding_inputs_are_padded_sources_ending_with_the_end_token():
    inputs = bench.decoding_inputs(20, vocab_size=50, pad_token_id=0)
    lengths = inputs["attention_mask"].sum(-1)
    assert inputs["input_ids"].shape == (bench.DECODING_BATCH, 20)
    assert ((lengths >= 17) & (lengths <= 20)).all()
    assert are_padded_sources(inputs["input_ids"], lengths)


def are_padded_sources(input_ids, lengths) -> bool:
    return all(
        row[length - 1] == 1 and (row[length:] == 0).all() and (row[: length - 1] >= 3).all()
        for row, length in zip(input_ids, lengths.tolist(), strict=True)
    )


def test_the_decoding_section_times_full_and_restricted_decoding_and_writes_its_table(tmp_path, monkeypatch, capsys):
    if not bench.cpu.kernel_available():
        pytest.skip("the benchmark measures the native kernel")
    markdown = tmp_path / "benchmarks.md"
    markdown.write_text(
        "<!-- table:sparsefinder-speed -->\nkept\n<!-- /table:sparsefinder-speed -->\n\n"
        "<!-- table:sparsefinder-decoding -->\nold\n<!-- /table:sparsefinder-decoding -->\n"
    )
    argv = [
        "bench_sparsefinder_speed.py",
        "--sections",
        "decoding",
        "--model_size",
        "tiny",
        "--source_lengths",
        "12",
        "60",
        "--nearest_keys",
        "4",
        "--new_tokens",
        "3",
        "--repeats",
        "1",
        "--markdown",
        str(markdown),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    text = markdown.read_text()
    assert "kept" in text and "old" not in text
    rows = [line for line in text.splitlines() if line.startswith("| 12 |") or line.startswith("| 60 |")]
    assert len(rows) == 2
    # 4 keys of 11–12 real ones and of 51–60: the share the table reports.
    shares = [float(row.split("|")[2].strip().rstrip("%")) for row in rows]
    assert 33 <= shares[0] <= 37 and 6 <= shares[1] <= 8
    assert "cross=nearest:keys=4" in text and "--model_size tiny" in text
