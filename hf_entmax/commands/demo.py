"""`hf-entmax demo`: train a small adaptively sparse translation model on the built-in synthetic language
pair (offline, a few minutes on two CPU cores), report BLEU on held-out sentences, and translate through
`pipeline("translation")` from the saved folder in a fresh process where hf_entmax cannot be imported.

Any `hf-entmax train` flag can be added to change the defaults, e.g. `hf-entmax demo --max_steps 300`.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

from ..errors import HfEntmaxValueError, last_line
from ..hub.load_check import load_check_environment
from ..training import synthetic
from .train import parse_arguments, print_summary, run_training


DEMO_DEFAULTS = [
    "--output_dir", "outputs/demo",
    "--model_size", "tiny",
    "--vocab_size", "1000",
    "--synthetic_train_size", "20000",
    "--max_source_length", "64",
    "--max_target_length", "64",
    "--max_eval_samples", "300",
    "--max_predict_samples", "300",
    "--max_steps", "1200",
    "--per_device_train_batch_size", "64",
    "--learning_rate", "2e-3",
    "--alpha_learning_rate", "2e-2",
    "--lr_scheduler_type", "inverse_sqrt",
    "--warmup_steps", "150",
    "--weight_decay", "0.01",
    "--logging_steps", "50",
    "--save_strategy", "no",
    "--eval_strategy", "no",
    "--generation_num_beams", "4",
    "--per_device_eval_batch_size", "100",
    "--report_to", "none",
    "--seed", "0",
]  # fmt: skip


def translate_without_hf_entmax(folder: Path, sources: list[str]) -> list[dict[str, str]]:
    """Translate through `pipeline("translation", model=folder, trust_remote_code=True)` without hf_entmax."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_entmax"] = None  # as on a machine without hf_entmax
        from transformers import pipeline
        translator = pipeline("translation", model={str(folder.resolve())!r}, trust_remote_code=True)
        print(json.dumps(translator({sources!r})))
        """
    )
    # The child runs the folder's code: it gets the load check's environment (no tokens, an empty home folder).
    with tempfile.TemporaryDirectory(prefix="hf_entmax_demo_") as home:
        completed = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=load_check_environment(Path(home)),
            cwd=home,  # not the project folder: hf_entmax must not be importable from the working directory
            stdin=subprocess.DEVNULL,
        )
    if completed.returncode != 0:
        raise HfEntmaxValueError(f"{folder} did not translate without hf_entmax: {last_line(completed.stderr)}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(
        DEMO_DEFAULTS + list(sys.argv[1:] if argv is None else argv), prog="hf-entmax demo", description=__doc__
    )
    print(textwrap.dedent(synthetic.__doc__).split("\n\n")[0])
    summary = run_training(model_args, data_args, training_args)
    print_summary(summary, training_args.output_dir)

    examples = synthetic.synthetic_splits(num_train=data_args.synthetic_train_size)["test"].select(range(3))
    sources = [pair[synthetic.SOURCE_LANG] for pair in examples["translation"]]
    print(
        f'\nTranslations of unseen sentences by pipeline("translation", model="{training_args.output_dir}", '
        "trust_remote_code=True), loaded without hf_entmax:"
    )
    results = translate_without_hf_entmax(Path(training_args.output_dir), sources)
    for pair, result in zip(examples["translation"], results, strict=True):
        print(f"  {pair[synthetic.SOURCE_LANG]}\n    -> {result['translation_text']}")
        print(f"    (reference: {pair[synthetic.TARGET_LANG]})")
    return 0
