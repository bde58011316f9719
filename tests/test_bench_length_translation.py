"""The long-input translation benchmark (benchmarks/bench_length_translation.py) at tiny sizes: runs named by their
variant, positions and training data, trained through bench_quality with those flags, checked, translated on joined
test sentences and tabulated against softmax of the same positions and data."""

import json
import os
import subprocess
import sys
from pathlib import Path

from test_bench_quality import TINY

from hf_entmax.training.synthetic import generate_pairs


ROOT = Path(__file__).resolve().parent.parent


def write_multi30k_like_corpus(folder: Path) -> None:
    """Multi30k's file names (train, val, test_2016_flickr) for a synthetic ja→en pair."""
    folder.mkdir()
    pairs = generate_pairs(132, seed=4)
    for name, rows in (("train", pairs[:120]), ("val", pairs[120:124]), ("test_2016_flickr", pairs[124:])):
        for index, language in enumerate(("ja", "en")):
            (folder / f"{name}.{language}").write_text("".join(f"{row[index]}\n" for row in rows), encoding="utf-8")


def test_runs_of_each_position_and_data_option_are_trained_checked_and_compared(tmp_path):
    write_multi30k_like_corpus(tmp_path / "corpus")
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_length_translation.py"), "--data_dir", "corpus"]
    command += ["--direction", "ja-en", "--variants", "softmax", "adaptive", "--positions", "nape-split"]
    command += ["--document_context", "2", "--seeds", "0", "--max_steps", "2", "--batch_size", "8"]
    command += ["--joins", "1", "2", "--test_sentences", "4", "--max_new_tokens_per_join", "4"]
    command += ["--runs_dir", "runs", "--output_dir", "out", "--extra", TINY]
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    completed = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]

    for name in ("softmax+nape-split+doc2", "adaptive+nape-split+doc2"):
        folder = tmp_path / "runs" / "2-steps" / "ja-en" / name / "seed0"
        config = json.loads((folder / "config.json").read_text())
        assert (config["position_embedding_type"], config["encoder_alibi_directions"]) == ("nape", "split")
        summary = json.loads((folder / "training_summary.json").read_text())
        assert summary["preprocessing"]["document_context"]["max_sentences"] == 2
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "+doc2" in line]
    assert [(row[0], row[3]) for row in rows] == [
        ("| 1", "softmax+nape-split+doc2"),
        ("| 1", "adaptive+nape-split+doc2"),
        ("| 2", "softmax+nape-split+doc2"),
        ("| 2", "adaptive+nape-split+doc2"),
    ]
    results = json.loads((tmp_path / "out" / "results.json").read_text())["scores"]
    for k, row in ((1, rows[1]), (2, rows[3])):
        adaptive, softmax = (
            results[f"{variant}+nape-split+doc2 seed0 k{k}"]["bleu"] for variant in ("adaptive", "softmax")
        )
        assert row[6] == f"{adaptive - softmax:+.2f}" and rows[0][6] == "–"
