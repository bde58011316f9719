"""The alignment benchmark (benchmarks/bench_alignment.py): the symmetrisation it applies to eflomal's two directions,
and one tiny synthetic run end to end that writes the gold files and its table between the markers."""

import sys
from pathlib import Path

from helpers import tiny_model

from hf_entmax.alignment.pharaoh import parse_links
from hf_entmax.training.synthetic import generate_aligned_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_alignment as bench  # noqa: E402


def test_grow_diag_final_and_keeps_the_intersection_and_grows_into_the_union_next_to_it():
    forward = {(0, 0), (1, 1), (2, 1), (3, 3)}
    backward = {(0, 0), (1, 1), (3, 2), (2, 3)}
    # From the intersection {(0, 0), (1, 1)}: (2, 1) neighbours (1, 1) and source word 2 is unaligned; then (3, 2),
    # a diagonal neighbour of (2, 1), for source word 3; then (3, 3) for target word 3. (2, 3) is the union's too,
    # but by then both of its words are aligned.
    assert bench.grow_diag_final_and(forward, backward) == {(0, 0), (1, 1), (2, 1), (3, 2), (3, 3)}
    # Without neighbours, the final step adds a directional link only where both of its words are unaligned.
    assert bench.grow_diag_final_and({(0, 0), (2, 2)}, {(0, 0), (2, 1)}) == {(0, 0), (2, 2)}
    assert bench.grow_diag_final_and(forward, forward) == forward


def test_a_tiny_synthetic_run_writes_gold_files_and_its_table(tmp_path, monkeypatch):
    pairs = generate_aligned_pairs(30)
    tokenizer = train_joint_tokenizer([text for pair in pairs for text in (pair.source, pair.target)], vocab_size=120)
    for name in ("adaptive", "softmax"):
        overrides = {"alpha_init": 1.0, "learn_alpha": False} if name == "softmax" else {}
        tiny_model(vocab_size=len(tokenizer), init_std=0.5, **overrides).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    markdown = tmp_path / "alignment.md"
    markdown.write_text(
        "before\n<!-- table:alignment-synthetic -->\nSTALE\n<!-- /table:alignment-synthetic -->\n"
        "<!-- table:alignment-synthetic-heads -->\n<!-- /table:alignment-synthetic-heads -->\n"
    )
    arguments = ["bench_alignment.py", "synthetic", "--num_pairs", "12", "--output_dir", str(tmp_path / "out")]
    arguments += ["--model", f"adaptive={tmp_path / 'adaptive'}", "--model", f"softmax={tmp_path / 'softmax'}"]
    monkeypatch.setattr(sys, "argv", [*arguments, "--markdown", str(markdown)])
    assert bench.main() == 0

    gold = (tmp_path / "out" / "test.gold").read_text().splitlines()
    assert len(gold) == 12 and parse_links(gold[0], "test.gold")[0] == set(pairs[0].alignment)
    assert (tmp_path / "out" / "test.en").read_text().splitlines()[0] == pairs[0].source
    table = markdown.read_text()
    assert table.startswith("before\n<!-- table:alignment-synthetic -->\n| model |") and "STALE" not in table
    assert "| adaptive |" in table and "| softmax |" in table and "12 synthetic test pairs" in table
    # Every (step, layer, head) of both models in the per-head table: 2 steps × 2 layers × 4 heads each.
    heads = table[table.index("<!-- table:alignment-synthetic-heads -->") :]
    assert heads.count("| adaptive |") == heads.count("| softmax |") == 16
