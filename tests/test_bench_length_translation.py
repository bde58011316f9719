"""The long-input translation benchmark (benchmarks/bench_length_translation.py) at tiny sizes: runs named by their
variant, positions and training data, trained through bench_quality with those flags, checked, translated on joined
test sentences and tabulated against softmax of the same positions and data."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from test_bench_quality import TINY

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.training.synthetic import generate_pairs


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_length_translation as bench  # noqa: E402


def write_multi30k_like_corpus(folder: Path) -> None:
    """Multi30k's file names (train, val, test_2016_flickr) for a synthetic ja→en pair."""
    folder.mkdir()
    pairs = generate_pairs(132, seed=4)
    for name, rows in (("train", pairs[:120]), ("val", pairs[120:124]), ("test_2016_flickr", pairs[124:])):
        for index, language in enumerate(("ja", "en")):
            (folder / f"{name}.{language}").write_text("".join(f"{row[index]}\n" for row in rows), encoding="utf-8")


def test_runs_of_each_position_and_data_option_are_trained_checked_and_compared(tmp_path):
    """Two runs (softmax and adaptive, NAPE with split directions and in cross-attention, trained with
    --document_context 2), test inputs of k = 2 sentences, and Sparsefinder trained on validation pairs and used at
    k = 2, its points chosen by the attention mass they keep."""
    write_multi30k_like_corpus(tmp_path / "corpus")
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_length_translation.py"), "--data_dir", "corpus"]
    command += ["--direction", "ja-en", "--variants", "softmax", "adaptive", "--positions", "nape-split-cross"]
    command += ["--document_context", "2", "--seeds", "0", "--max_steps", "2", "--batch_size", "8"]
    command += ["--joins", "2", "--test_sentences", "4", "--max_new_tokens_per_join", "4"]
    command += ["--sparsefinder_k", "2", "--sparsefinder_train", "1", "--sparsefinder_heldout", "1"]
    command += [
        "--sparsefinder_target_recall",
        "0",
        "--sparsefinder_target_mass",
        "0.9",
        "--equal_tokens_per_join",
        "2",
    ]
    command += ["--runs_dir", "runs", "--output_dir", "out", "--extra", TINY]
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    completed = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]

    for name in ("softmax+nape-split-cross+doc2", "adaptive+nape-split-cross+doc2"):
        folder = tmp_path / "runs" / "2-steps" / "ja-en" / name / "seed0"
        config = json.loads((folder / "config.json").read_text())
        positions = (config["position_embedding_type"], config["encoder_alibi_directions"])
        assert (*positions, config["cross_attention_positions"]) == ("nape", "split", "nape")
        summary = json.loads((folder / "training_summary.json").read_text())
        assert summary["preprocessing"]["document_context"]["max_sentences"] == 2
    lines = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "+doc2" in line]
    rows = [line for line in lines if len(line) == 9 and "`" not in line[3]]  # the first table's (no points)
    assert [(row[0], row[3]) for row in rows] == [
        ("| 2", "softmax+nape-split-cross+doc2"),
        ("| 2", "adaptive+nape-split-cross+doc2"),
    ]
    results = json.loads((tmp_path / "out" / "results.json").read_text())["scores"]
    adaptive, softmax = (
        results[f"{variant}+nape-split-cross+doc2 seed0 k2"]["bleu"] for variant in ("adaptive", "softmax")
    )
    assert rows[1][6] == f"{adaptive - softmax:+.2f}" and rows[0][6] == "–"

    # Sparsefinder: a predictor per run, and k = 2 translated with full and with restricted attention.
    sparse_rows = [line for line in lines if "`" in line[3]]  # the second table's: k, model, seed, points, ...
    assert [row[1] for row in sparse_rows] == ["softmax+nape-split-cross+doc2", "adaptive+nape-split-cross+doc2"]
    timings = json.loads((tmp_path / "out" / "results.json").read_text())["sparsefinder"]
    for row in sparse_rows:
        full, restricted = (timings[f"{row[1]} seed0 k2"][name] for name in ("full", "restricted"))
        assert "cross `" in row[3] and row[7] == f"{restricted['seconds'] / full['seconds']:.2f}"
        # Each translation's words over the references' (a restricted one that ends earlier shows it): with full
        # attention, those of the first table's translation of the same input.
        assert full["length_ratio"] == pytest.approx(results[f"{row[1]} seed0 k2"]["length_ratio"])
        assert row[6] == f"{full['length_ratio']:.2f} / {restricted['length_ratio']:.2f}"
        # Decoding exactly 2 tokens a sentence: both timed, the ratio in the last column.
        equal = restricted["equal_length_seconds"] / full["equal_length_seconds"]
        assert row[-1].rstrip(" |") == f"{equal:.2f}" and "exactly k × 2 tokens" in completed.stdout
        assert row[4:6] == [f"{full['bleu']:.2f}", f"{restricted['bleu']:.2f}"]
        report = tmp_path / "out" / "sparsefinder" / row[1] / "seed0" / "val-k2-recall0-mass0.9" / "report.json"
        assert (report.parent / "sparsefinder.safetensors").is_file()
        attention = json.loads(report.read_text())["attention"]
        for kind, result in attention.items():
            chosen = next(point for point in result["points"] if point["point"] == result["chosen"]["distance"])
            # The chosen point keeps 90% of the mass, and the table gives its sparsity, recall and mass.
            assert chosen["mass"] >= 0.9 or chosen["mass"] == max(point["mass"] for point in result["points"])
            shares = f"({chosen['sparsity']:.0%} / {chosen['recall']:.0%} / {chosen['mass']:.1%})"
            assert f"{kind} `{chosen['point']}` {shares}" in row[3]


def test_lines_per_input_translates_each_group_as_a_paragraph_a_few_lines_at_a_time(tmp_path):
    """--lines_per_input 1: each group of k = 2 test sentences is translated one line at a time, so its output line is
    the two k = 1 translations joined, and it is scored against the group's joined references. The model is the
    paper's (adaptive-unscaled: learned α, no query scaling); beside it, the same with sparsemax cross-attention."""
    write_multi30k_like_corpus(tmp_path / "corpus")
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_length_translation.py"), "--data_dir", "corpus"]
    command += ["--direction", "ja-en", "--variants", "adaptive-unscaled", "sparsemax-cross"]
    command += ["--seeds", "0", "--max_steps", "2"]
    command += ["--batch_size", "8", "--joins", "1", "2", "--test_sentences", "4", "--max_new_tokens_per_join", "4"]
    command += ["--lines_per_input", "1", "--runs_dir", "runs", "--output_dir", "out", "--extra", TINY]
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    completed = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]

    config = json.loads(
        (tmp_path / "runs" / "2-steps" / "ja-en" / "adaptive-unscaled" / "seed0" / "config.json").read_text()
    )
    assert (config["learn_alpha"], config["attention_scaling"]) == (True, "none")
    sparsemax_cross = AdaptiveEntmaxMarianMTModel.from_pretrained(
        tmp_path / "runs" / "2-steps" / "ja-en" / "sparsemax-cross" / "seed0"
    )
    assert sparsemax_cross.config.attention_scaling == "none"
    alphas = sparsemax_cross.get_alphas()
    assert torch.equal(alphas["cross"], torch.full_like(alphas["cross"], 2.0))
    assert (sparsemax_cross.config.learn_alpha, sparsemax_cross.config.cross_learn_alpha) == (True, False)
    translations = (
        tmp_path / "out" / "translations" / "2-steps" / "ja-en" / "adaptive-unscaled" / "seed0" / "4-sentences"
    )
    singles = (translations / "k1-lines1.txt").read_text(encoding="utf-8").split("\n\n")
    pairs = (translations / "k2-lines1.txt").read_text(encoding="utf-8").split("\n\n")
    singles = [line.strip() for line in singles]
    assert [line.strip() for line in pairs] == [f"{singles[0]} {singles[1]}", f"{singles[2]} {singles[3]}"]
    references = (tmp_path / "corpus" / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:4]
    scores = json.loads((translations / "k2-lines1.json").read_text())
    expected = sacrebleu.corpus_bleu(pairs, [[f"{references[0]} {references[1]}", f"{references[2]} {references[3]}"]])
    assert scores["bleu"] == pytest.approx(expected.score)
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| 2 | 2 |")]
    assert [row[3] for row in rows] == ["adaptive-unscaled", "sparsemax-cross"]
    assert "--lines_per_input 1" in completed.stdout


def test_outputs_are_measured_in_words_and_sentences_against_the_references(tmp_path):
    """An output that stops after its first sentences scores its words and its sentences (a full stop, question or
    exclamation mark before a space or the line's end) over the references'; a finished translation is read, not
    made again."""
    reference = tmp_path / "reference.txt"
    reference.write_text("A dog runs. A cat sleeps. Two men talk!\nIs it raining? It is.\n", encoding="utf-8")
    target = tmp_path / "translations"
    target.mkdir()
    (target / "k2.txt").write_text("A dog is running. A cat.\nIs it 3.5 m? No\n", encoding="utf-8")
    (target / "k2.json").write_text(json.dumps({"bleu": 12.5, "chrf": 40.0}), encoding="utf-8")
    arguments = argparse.Namespace(lines_per_input=None, match_sentences=False)
    files = {"source": tmp_path / "missing.de", "reference": reference}
    metrics = bench.translate(tmp_path / "no-model", 2, files, arguments, target)
    assert metrics["bleu"] == 12.5
    assert metrics["length_ratio"] == pytest.approx(11 / 14)
    assert metrics["sentence_ratio"] == pytest.approx(3 / 5)  # "3.5" ends no sentence, nor does "No" without a stop
    # With --match_sentences the outputs and scores are the "-matched" ones, kept apart from the plain ones.
    (target / "k2-matched.txt").write_text("A dog is running. A cat sleeps. Two men!\nIs it 3.5 m? No.\n", "utf-8")
    (target / "k2-matched.json").write_text(json.dumps({"bleu": 30.0, "chrf": 50.0}), encoding="utf-8")
    arguments.match_sentences = True
    metrics = bench.translate(tmp_path / "no-model", 2, files, arguments, target)
    assert metrics["bleu"] == 30.0 and metrics["sentence_ratio"] == pytest.approx(5 / 5)


def test_sparsefinder_types_restrict_only_the_types_named_at_the_sparsest_point_reaching_the_targets(tmp_path):
    """With --sparsefinder_types cross decoder_self, restricted translation uses those types' chosen points only (the
    other attends over every key), and the table says so: of the distance and nearest methods' chosen points, the
    sparsest that reaches the recall target. The predictor's report is read, not made again."""
    arguments = argparse.Namespace(
        sparsefinder_k=8,
        sparsefinder_target_recall=0.95,
        sparsefinder_target_mass=0.0,
        sparsefinder_train=80,
        sparsefinder_heldout=40,
        sparsefinder_types=["decoder_self", "cross"],
        equal_tokens_per_join=None,
        output_dir=str(tmp_path),
    )
    report = tmp_path / "sparsefinder" / "run" / "seed0" / "val-k8" / "report.json"
    report.parent.mkdir(parents=True)
    # (sparsity, recall) of each method's chosen point: in cross-attention the nearest point is sparser and reaches
    # the target, in decoder self-attention it is sparser but misses it.
    chosen = {
        "encoder_self": {"distance": (0.5, 0.96), "nearest": (0.6, 0.97)},
        "decoder_self": {"distance": (0.3, 0.95), "nearest": (0.7, 0.90)},
        "cross": {"distance": (0.4, 0.96), "nearest": (0.9, 0.96)},
    }
    attention = {
        kind: {
            "chosen": {method: f"{method}:{index}" for index, method in enumerate(points)},
            "points": [
                {"point": f"{method}:{index}", "sparsity": sparsity, "recall": recall, "mass": 0.99}
                for index, (method, (sparsity, recall)) in enumerate(points.items())
            ],
        }
        for kind, points in chosen.items()
    }
    report.write_text(json.dumps({"attention": attention}))

    predictor = bench.train_predictor(tmp_path / "no-model", "run", 0, arguments)
    assert predictor["points"] == {
        "decoder_self": ("distance:0", 0.3, 0.95, 0.99),
        "cross": ("nearest:1", 0.9, 0.96, 0.99),
    }
    full = {"bleu": 20.0, "seconds": 2.0, "length_ratio": 0.552}
    restricted = {"bleu": 19.5, "seconds": 1.5, "length_ratio": 0.512}
    timings = {("run", 0, 8): {"full": full, "restricted": restricted}}
    markdown = bench.sparsefinder_table(timings, {("run", 0): predictor}, arguments)
    row = "| 8 | run | 0 | decoder_self `distance:0` (30% / 95% / 99.0%); cross `nearest:1` (90% / 96% / 99.0%) |"
    assert f"{row} 20.00 | 19.50 | 0.55 / 0.51 | 0.75 |" in markdown
    assert "restricted attention in decoder_self, cross only" in markdown


def test_equal_length_decoding_generates_exactly_the_tokens_asked_for_in_batches():
    """Full and restricted attention are timed on the same work: every input decoded to exactly the number of new
    tokens asked for (no early end), in batches of the input order."""
    calls = []

    class Model(torch.nn.Module):
        def generate(self, **inputs):
            calls.append((inputs["input_ids"].shape[0], inputs["min_length"], inputs["max_length"]))

    def tokenizer(lines, return_tensors, padding):
        return {"input_ids": torch.ones(len(lines), 3, dtype=torch.long)}

    seconds = bench.equal_length_seconds(Model(), tokenizer, ["a", "b", "c"], new_tokens=5, batch_size=2)
    assert seconds >= 0 and calls == [(2, 6, 6), (1, 6, 6)]  # the decoder's start token counts in the lengths
