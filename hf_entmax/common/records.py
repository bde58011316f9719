"""What a training run or a conversion records next to the model: the run's file names, the card tag of a
conversion, the versions of the software that wrote it.

`hf-entmax train` writes the files (`hf_entmax.training.records` makes their contents), `hf-entmax export` copies
them into a Hub-ready folder, `hf-entmax push` uploads them and `hf-entmax analyze` plots the α history.
"""

import importlib.metadata


SUMMARY_FILE = "training_summary.json"
ALPHA_HISTORY_FILE = "alpha_history.json"
SCALE_HISTORY_FILE = "scale_history.json"  # ASEntmax runs only
PREDICTIONS_FILE = "generated_predictions.txt"
# Everything a run records (JSON and text, nothing that runs): they back the card's numbers. Trainer's own files
# are named as transformers' translation example writes them.
RUN_RECORD_FILES = (
    SUMMARY_FILE,
    ALPHA_HISTORY_FILE,
    SCALE_HISTORY_FILE,
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "test_results.json",
    "trainer_state.json",
    PREDICTIONS_FILE,
)
# training_summary.json's "data" when `hf-entmax train` used the built-in synthetic pair.
SYNTHETIC_DATA = "built-in synthetic pair"
# The tag of a card written by `hf-entmax convert`: tells a conversion from a fine-tuned model in the metadata.
CONVERTED_TAG = "converted-from-marian"
_VERSIONED_PACKAGES = ("hf_entmax", "transformers", "torch", "datasets", "tokenizers", "sacrebleu")


def framework_versions() -> dict[str, str]:
    """Installed versions of the packages a run depends on, for the summary and the model card."""
    versions = {}
    for package in _VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
