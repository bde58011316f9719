"""Reliability probes: bad or unusual inputs to every user-facing entry point, and what each one gives (the
outcomes, the workbench and the table are in tests/probing.py).

The items number the probes; those of items 4 and 6 (the mappings' numerics) are owned by tests/test_entmax.py and
tests/test_kernels.py: they run here only for the table. Items 1-9 are here; the later ones in the ``probes_*.py``
modules imported below.

    python -m pytest -q tests/test_reliability.py          # the probes as tests (-m "not slow": without training)
    python tests/test_reliability.py --table                # the table of outcomes, measured now
    python tests/test_reliability.py --markdown docs/reliability.md   # the same, into the docs
"""

import json
import math
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import probes_api  # noqa: F401  (the third pass's probes register themselves on import)
import probes_data  # noqa: F401
import probes_faults  # noqa: F401
import probes_leaks  # noqa: F401
import probes_new_entry_points  # noqa: F401  (the entry points added since)
import probes_outputs  # noqa: F401
import pytest
import torch
from helpers import SENTENCES, tiny_config, tiny_model
from probing import (
    CLEAR,
    DOCUMENTED,
    ITEMS,
    MAPPING_TESTS,
    PROBES,
    REPOSITORY,
    SILENT,
    TRACEBACK,
    FakeHfApi,
    NotATensor,
    Outcome,
    Probe,
    Workbench,
    api,
    cli,
    documented,
    first_line,
    offline_environment,
    probe,
    push,
    register_config_probes,
    reliability_table,
    run_command,
    run_probe,
)
from safetensors.torch import load_file
from torch.autograd.gradcheck import GradcheckError
from transformers import Seq2SeqTrainingArguments, pipeline

from hf_entmax import AdaptiveEntmaxMarianMTModel, entmax, entmax15, sparsemax
from hf_entmax.commands.train import parse_arguments
from hf_entmax.common.records import RUN_RECORD_FILES
from hf_entmax.hub import convert_marian, export_hub_folder
from hf_entmax.hub.push import HubTransportError
from hf_entmax.training.trainer import AdaptiveEntmaxTrainer


# Item 1: nothing lost.


@probe(1)
def probe_train_into_a_folder_of_other_files(bench):
    """train --output_dir: a folder with a README.md and code it did not write"""
    folder = bench.folder("project")
    bench.write(folder / "README.md", "# my project\n")
    bench.write(folder / "code.py", "print('mine')\n")
    bench.keep(folder)
    return cli(bench.train_argv(folder), "--output_dir", str(folder), "--overwrite_output_dir")


@probe(1)
def probe_train_into_the_model_it_starts_from(bench):
    """train --output_dir equal to --model_name_or_path"""
    model = bench.hub_folder()
    bench.keep(model)
    return cli(bench.train_argv(model, "--model_name_or_path", str(model), fresh=False), "--output_dir")


@probe(1)
def probe_train_into_a_file(bench):
    """train --output_dir: an existing file"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(bench.train_argv(file), "--output_dir", str(file))


@probe(1)
def probe_train_into_an_unwritable_path(bench):
    """train --output_dir: a path that cannot be created (under a file)"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(bench.train_argv(file / "run"), "--output_dir", str(file / "run"))


@probe(1)
def probe_demo_into_a_folder_of_other_files(bench):
    """demo --output_dir: a folder of files it did not write"""
    folder = bench.folder("project")
    bench.write(folder / "README.md", "# my project\n")
    bench.keep(folder)
    return cli(["demo", "--output_dir", str(folder)], "--output_dir", str(folder))


@probe(1)
def probe_export_into_a_folder_of_other_files(bench):
    """export --output: a folder of files it did not write"""
    folder = bench.folder("project")
    bench.write(folder / "notes.txt", "keep me\n")
    bench.keep(folder)
    return cli(["export", "--model", str(bench.hub_folder()), "--output", str(folder), "--no-check_load"], str(folder))


@probe(1)
def probe_export_into_a_file(bench):
    """export --output: an existing file"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(["export", "--model", str(bench.hub_folder()), "--output", str(file), "--no-check_load"], str(file))


@probe(1)
def probe_export_over_a_training_run(bench):
    """export --output: the training run it exports (checkpoints, optimizer state)"""
    run = bench.hub_folder()
    shutil.copytree(run, run / "checkpoint-2")
    bench.write(run / "checkpoint-2" / "trainer_state.json", '{"global_step": 2}')
    (run / "checkpoint-2" / "optimizer.pt").write_bytes(b"optimizer state")
    bench.write(run / "trainer_state.json", '{"global_step": 2}')
    bench.keep(run)
    return cli(["export", "--model", str(run), "--output", str(run), "--no-check_load"], str(run))


@probe(1, DOCUMENTED)
def probe_export_into_its_own_folder(bench):
    """export --output equal to --model (an earlier export): written again in place, the same model"""
    folder = bench.hub_folder()
    expected = AdaptiveEntmaxMarianMTModel.from_pretrained(folder).state_dict()
    code, _, stderr = run_command(["export", "--model", str(folder), "--output", str(folder), "--no-check_load"])
    if code != 0:
        return Outcome(TRACEBACK if code != 1 else CLEAR, first_line(stderr))
    loaded = AdaptiveEntmaxMarianMTModel.from_pretrained(folder).state_dict()
    return documented(all(torch.equal(loaded[name], tensor) for name, tensor in expected.items()), "weights differ")


@probe(1)
def probe_export_api_into_a_folder_of_other_files(bench):
    """export_hub_folder(): a folder of files it did not write"""
    folder = bench.folder("project")
    bench.write(folder / "notes.txt", "keep me\n")
    bench.keep(folder)
    return api(
        lambda: export_hub_folder(tiny_model(vocab_size=len(bench.tokenizer)), bench.tokenizer, folder), str(folder)
    )


@probe(1)
def probe_convert_into_a_folder_of_other_files(bench):
    """convert --output: a folder of files it did not write"""
    folder = bench.folder("project")
    bench.write(folder / "notes.txt", "keep me\n")
    bench.keep(folder)
    return cli(
        ["convert", "--model", str(bench.marian_folder()), "--output", str(folder), "--no-check_load"], str(folder)
    )


@probe(1)
def probe_convert_into_its_source(bench):
    """convert --output equal to --model (the Marian folder)"""
    marian = bench.marian_folder()
    bench.keep(marian)
    return cli(["convert", "--model", str(marian), "--output", str(marian), "--no-check_load"], str(marian))


@probe(1)
def probe_analyze_into_a_folder_of_other_files(bench):
    """analyze --output: a folder holding the user's own report.md"""
    folder = bench.folder("project")
    bench.write(folder / "report.md", "# my own report\n")
    bench.keep(folder)
    argv = ["analyze", str(bench.hub_folder()), "--source_file", bench.sentences(), "--output", str(folder)]
    return cli([*argv, "--no-progress"], "--output", str(folder))


@probe(1)
def probe_translate_output_over_the_reference(bench):
    """translate --output equal to --reference"""
    reference = bench.write(bench.folder() / "reference.txt", "\n".join(SENTENCES[4:8]) + "\n")
    bench.keep(reference)
    argv = ["translate", "--model", str(bench.hub_folder()), "--input", bench.sentences(), "--reference"]
    return cli([*argv, str(reference), "--output", str(reference), "--no-progress"], "--output", "--reference")


@probe(1)
def probe_translate_metrics_over_the_input(bench):
    """translate --metrics_file equal to --input"""
    sources = Path(bench.sentences())
    reference = bench.write(bench.folder() / "reference.txt", "\n".join(SENTENCES[4:8]) + "\n")
    bench.keep(sources, reference)
    argv = ["translate", "--model", str(bench.hub_folder()), "--input", str(sources), "--reference", str(reference)]
    return cli([*argv, "--metrics_file", str(sources), "--no-progress"], "--metrics_file", "--input")


# Item 2: no stale weights.


def _weights_equal(folder: Path, expected: Path) -> bool:
    loaded = AdaptiveEntmaxMarianMTModel.from_pretrained(folder).state_dict()
    reference = AdaptiveEntmaxMarianMTModel.from_pretrained(expected).state_dict()
    return all(torch.equal(loaded[name], tensor) for name, tensor in reference.items())


@probe(2, DOCUMENTED)
def probe_export_sharded_over_a_single_file_export(bench):
    """export --max_shard_size into an earlier export with one model.safetensors: the new weights load"""
    earlier, newer = bench.hub_folder(seed=0), bench.hub_folder(seed=1)
    code, _, stderr = run_command(
        ["export", "--model", str(newer), "--output", str(earlier), "--max_shard_size", "30KB", "--no-check_load"]
    )
    if code != 0:
        return Outcome(TRACEBACK, first_line(stderr))
    names = sorted(path.name for path in earlier.iterdir())
    ok = "model.safetensors" not in names and "model.safetensors.index.json" in names
    return documented(ok and _weights_equal(earlier, newer), f"files after the export: {names}")


@probe(2, DOCUMENTED, slow=True)
def probe_convert_over_a_sharded_export(bench):
    """convert into an earlier sharded export: no shard of the earlier model is left"""
    earlier = bench.hub_folder()
    export_hub_folder(tiny_model(vocab_size=len(bench.tokenizer)), bench.tokenizer, earlier, max_shard_size="30KB")
    convert_marian(str(bench.marian_folder()), earlier)
    names = sorted(path.name for path in earlier.iterdir())
    return documented(names.count("model.safetensors") == 1 and not any("-of-" in name for name in names), str(names))


def _two_weight_sets(bench) -> Path:
    folder = bench.hub_folder()
    sharded = bench.folder("sharded")
    export_hub_folder(
        tiny_model(seed=1, vocab_size=len(bench.tokenizer)), bench.tokenizer, sharded / "model", max_shard_size="30KB"
    )
    for path in (sharded / "model").glob("model*.safetensors*"):
        shutil.copy(path, folder / path.name)
    return folder


@probe(2)
def probe_push_a_folder_with_two_weight_sets(bench):
    """push: a folder holding model.safetensors and a sharded index (one of them stale)"""
    folder = _two_weight_sets(bench)
    return api(lambda: push(folder), "model.safetensors.index.json")


@probe(2)
def probe_export_from_a_folder_with_two_weight_sets(bench):
    """export --model: a folder holding model.safetensors and a sharded index"""
    folder = _two_weight_sets(bench)
    output = bench.folder("out") / "hub"
    return cli(
        ["export", "--model", str(folder), "--output", str(output), "--no-check_load"], "model.safetensors.index.json"
    )


@probe(2)
def probe_translate_with_two_weight_sets(bench):
    """translate --model: a folder holding model.safetensors and a sharded index"""
    folder = _two_weight_sets(bench)
    argv = ["translate", "--model", str(folder), "--input", bench.sentences(), "--no-progress"]
    return cli(argv, "model.safetensors.index.json")


# Item 3: secrets and local paths stay local (the load check's environment and the upload allow-list are tested in
# tests/test_export.py and tests/test_push.py).


@probe(3)
def probe_push_code_outside_the_folder(bench):
    """push: config.json's auto_map names a code file outside the folder"""
    folder = bench.hub_folder()
    bench.write(folder.parent / "outside.py", "SECRET = 'not for the Hub'\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoConfig"] = "../outside.AdaptiveEntmaxMarianConfig"
    bench.write(folder / "config.json", json.dumps(config))
    return api(lambda: push(folder), "outside")


@probe(3, DOCUMENTED)
def probe_push_card_figures_outside_the_folder(bench):
    """push: README.md shows images outside the folder (../, absolute): they are not uploaded"""
    folder = bench.hub_folder()
    (folder.parent / "private.png").write_bytes(b"\x89PNG private")
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![a](../private.png) ![b](/etc/private.png)\n")
    uploaded = push(folder).calls[-1][1]["allow_patterns"]
    return documented(not any("private" in name for name in uploaded), f"uploaded: {uploaded}")


@probe(3, DOCUMENTED, slow=True)
def probe_run_records_hold_no_local_paths(bench):
    """train from a local folder: the records push uploads name no absolute path of this machine"""
    folder = bench.runs.frozen
    leaks = [
        name
        for name in (*RUN_RECORD_FILES, "README.md")
        if (folder / name).is_file() and str(bench.root.resolve()) in (folder / name).read_text(encoding="utf-8")
    ]
    return documented(not leaks, f"absolute paths in {leaks}")


# Item 4: the mappings on the whole float range (owned by tests/test_entmax.py and tests/test_kernels.py).


@probe(4, DOCUMENTED, owned_by=MAPPING_TESTS)
def probe_extreme_spread(bench):
    """sparsemax, entmax15, entmax(·, 1.5) of [[1e8, 0, -1e8]] give [1, 0, 0]"""
    scores = torch.tensor([[1e8, 0.0, -1e8]])
    results = [sparsemax(scores), entmax15(scores), entmax(scores, 1.5), entmax(scores, 1.3)]
    expected = torch.tensor([[1.0, 0.0, 0.0]])
    return documented(all(torch.equal(result, expected) for result in results), str(results))


@probe(4, DOCUMENTED, owned_by=MAPPING_TESTS)
def probe_infinite_scores(bench):
    """+inf entries share the mass: entmax15([[inf, 0, inf]]) = [0.5, 0, 0.5]"""
    scores = torch.tensor([[math.inf, 0.0, math.inf]])
    results = [entmax15(scores), sparsemax(scores), entmax(scores, 1.3), entmax(scores, 1.0)]
    expected = torch.tensor([[0.5, 0.0, 0.5]])
    return documented(all(torch.allclose(result, expected) for result in results), str(results))


@probe(4, DOCUMENTED, owned_by=MAPPING_TESTS)
def probe_nan_scores(bench):
    """NaN in a row gives NaN in that row only, on every mapping"""
    scores = torch.tensor([[math.nan, 0.0, 1.0], [0.0, 1.0, 2.0]])
    results = [entmax15(scores), sparsemax(scores), entmax(scores, 1.3)]
    ok = all(result[0].isnan().all() and torch.isclose(result[1].sum(), torch.tensor(1.0)) for result in results)
    return documented(bool(ok), str(results))


# Item 5: α learning rates.


@probe(5)
def probe_alpha_learning_rate_negative(bench):
    """train --alpha_learning_rate -1"""
    return cli(bench.train_argv(bench.folder() / "run", "--alpha_learning_rate", "-1"), "--alpha_learning_rate", "-1")


@probe(5)
def probe_alpha_learning_rate_nan(bench):
    """train --alpha_learning_rate nan"""
    return cli(
        bench.train_argv(bench.folder() / "run", "--alpha_learning_rate", "nan"), "--alpha_learning_rate", "nan"
    )


@probe(5)
def probe_alpha_learning_rate_infinite(bench):
    """train --alpha_learning_rate inf"""
    return cli(
        bench.train_argv(bench.folder() / "run", "--alpha_learning_rate", "inf"), "--alpha_learning_rate", "inf"
    )


@probe(5)
def probe_alpha_learning_rate_text_in_a_config_file(bench):
    """train run.json with "alpha_learning_rate": "fast\""""
    config = bench.write(bench.folder() / "run.json", json.dumps({"alpha_learning_rate": "fast"}))
    return cli(["train", str(config)], "alpha_learning_rate", "fast")


def _trainer(bench, **kwargs) -> AdaptiveEntmaxTrainer:
    arguments = Seq2SeqTrainingArguments(output_dir=str(bench.folder()), report_to="none", use_cpu=True)
    return AdaptiveEntmaxTrainer(model=tiny_model(), args=arguments, **kwargs)


@probe(5)
def probe_trainer_alpha_learning_rate_nan(bench):
    """AdaptiveEntmaxTrainer(alpha_learning_rate=nan)"""
    return api(lambda: _trainer(bench, alpha_learning_rate=math.nan), "alpha_learning_rate", "nan")


@probe(5)
def probe_trainer_alpha_learning_rate_negative(bench):
    """AdaptiveEntmaxTrainer(alpha_learning_rate=-1)"""
    return api(lambda: _trainer(bench, alpha_learning_rate=-1.0), "alpha_learning_rate", "-1")


@probe(5, DOCUMENTED, slow=True)
def probe_alpha_learning_rate_zero_freezes_alpha(bench):
    """train --alpha_learning_rate 0: α does not move, and the summary says 0"""
    start = json.loads((bench.runs.first / "training_summary.json").read_text())
    summary = json.loads((bench.runs.frozen / "training_summary.json").read_text())
    ok = summary["alphas"] == start["alphas"] and summary["hyperparameters"]["alpha_learning_rate"] == 0
    return documented(ok, f"α learning rate {summary['hyperparameters']['alpha_learning_rate']}")


@probe(5, slow=True)
def probe_diverging_run_stops(bench):
    """train --learning_rate 1e30: the run stops with one line naming the step, nothing saved"""
    output = bench.folder() / "run"
    outcome = cli(bench.train_argv(output, "--learning_rate", "1e30", "--max_steps", "6"), "diverged at step")
    if outcome.kind == CLEAR and (output / "model.safetensors").exists():
        return Outcome(SILENT, "a model was saved")
    return outcome


# Item 6: double backward (owned by tests/test_entmax.py and tests/test_kernels.py).


@probe(6, DOCUMENTED, owned_by=MAPPING_TESTS)
def probe_double_backward(bench):
    """float64 gradgradcheck of entmax15 and entmax(·, 1.3), or a clear error"""
    scores = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    try:
        for mapping in (entmax15, lambda x: entmax(x, 1.3)):
            torch.autograd.gradgradcheck(mapping, (scores,))
    except GradcheckError as error:
        return Outcome(SILENT, first_line(error))
    except RuntimeError as error:
        named = "double backward" in str(error) or "second" in str(error)
        return Outcome(DOCUMENTED if named else TRACEBACK, first_line(error))
    return Outcome(DOCUMENTED, "gradgradcheck passes")


# Item 7: one line instead of a traceback.

ARGUMENTS_PY = "hf_entmax/training/arguments.py TrainingArguments.__post_init__"
# train flags with a value that must be refused (the last flag is the one the message must name).
TRAIN_MISTAKES = {
    "learning_rate_negative": (("--learning_rate", "-1"), None),
    "learning_rate_nan": (("--learning_rate", "nan"), None),
    "dropout_above_one": (("--dropout", "1.5"), None),
    "train_batch_size_zero": (("--per_device_train_batch_size", "0"), None),
    "eval_batch_size_zero": (("--per_device_eval_batch_size", "0"), None),
    "gradient_accumulation_zero": (("--gradient_accumulation_steps", "0"), None),
    "vocab_size_zero": (("--vocab_size", "0"), None),
    "vocab_size_five": (("--vocab_size", "5"), None),
    "max_target_length_negative": (("--max_target_length", "-1"), None),
    "max_steps_zero": (("--max_steps", "0"), None),
    "max_steps_not_a_number": (("--max_steps", "1.5"), None),
    "warmup_steps_negative": (("--warmup_steps", "-1"), None),
    "label_smoothing_one": (("--label_smoothing_factor", "1"), None),
    "num_beams_zero": (("--num_beams", "0"), None),
    "max_train_samples_zero": (("--max_train_samples", "0"), None),
    "alpha_init_above_two": (("--alpha_init", "2.5"), None),
    "alpha_max_above_two": (("--alpha_max", "3"), None),
    "learn_alpha_not_a_bool": (("--learn_alpha", "maybe"), None),
    "seed_negative": (("--seed", "-1"), None),
    "generation_num_beams_zero": (("--generation_num_beams", "0"), None),
    "generation_max_length_zero": (("--generation_max_length", "0"), None),
    "logging_steps_zero": (("--logging_steps", "0"), None),
    "lr_scheduler_unknown": (("--lr_scheduler_type", "cosine_annealing"), None),
    "report_to_missing_integration": (("--report_to", "wandb"), None),
    # transformers never saves with save_steps 0, and takes eval_steps 0 as "not given" (logging_steps then).
    "save_steps_zero": (("--save_strategy", "steps", "--save_steps", "0"), None),
    "eval_steps_zero": (("--validation_file", None, "--eval_strategy", "steps", "--eval_steps", "0"), None),
}


def _train_mistake(flags: tuple[str | None, ...]) -> Callable[[Workbench], Outcome]:
    def run(bench):
        given = [bench.train_file if value is None else value for value in flags]  # None: the training data file
        # The flag, or the config field of the same name (α bounds are checked with the model's config).
        return cli(bench.train_argv(bench.folder() / "run", *given), flags[-2].removeprefix("--"))

    return run


for _name, (_flags, _pending) in TRAIN_MISTAKES.items():
    _shown = " ".join("data.tsv" if flag is None else flag for flag in _flags)
    PROBES.append(Probe(7, f"train_{_name}", f"train {_shown}", _train_mistake(_flags), CLEAR, pending=_pending))

# Mistakes with the other commands: (name, description, argv from the workbench, what the message must name).
COMMAND_MISTAKES = [
    (
        "train_file_missing",
        "train --train_file no/such/train.tsv",
        lambda bench: bench.train_argv(bench.folder() / "run", "--train_file", "no/such/train.tsv"),
        ("no/such/train.tsv",),
    ),
    (
        "train_resume_from_missing_checkpoint",
        "train --resume_from_checkpoint no/such/checkpoint-2",
        lambda bench: bench.train_argv(bench.folder() / "run", "--resume_from_checkpoint", "no/such/checkpoint-2"),
        ("--resume_from_checkpoint", "no/such/checkpoint-2"),
    ),
    (
        "push_missing_folder",
        "push no/such/folder",
        lambda bench: ["push", str(bench.root / "no" / "such"), "--repo_id", "someone/model"],
        ("no such folder",),
    ),
    (
        "translate_unknown_device",
        "translate --device tpu",
        lambda bench: bench.translate_argv("--device", "tpu"),
        ("--device", "tpu"),
    ),
    (
        "translate_missing_input",
        "translate --input no/such/file.txt",
        lambda bench: bench.translate_argv("--input", "no/such/file.txt"),
        ("--input", "no/such/file.txt"),
    ),
    (
        "analyze_missing_comparison",
        "analyze --compare no/such/folder",
        lambda bench: bench.analyze_argv("--compare", "no/such/folder"),
        ("--compare", "no/such/folder"),
    ),
    (
        "analyze_sample_size_zero",
        "analyze --sample_size 0",
        lambda bench: bench.analyze_argv("--sample_size", "0"),
        ("--sample_size", "0"),
    ),
    (
        "convert_missing_model",
        "convert --model ./no/such/folder",
        lambda bench: bench.convert_argv("--model", "./no/such/folder"),
        ("--model", "./no/such/folder"),
    ),
    (
        "convert_alpha_init_above_two",
        "convert --alpha_init 3",
        lambda bench: bench.convert_argv("--alpha_init", "3"),
        ("--alpha_init", "3"),
    ),
    (
        "convert_learned_alpha_without_start",
        "convert --learn_alpha (without --alpha_init)",
        lambda bench: bench.convert_argv("--learn_alpha"),
        ("learn_alpha", "alpha_init"),
    ),
    (
        "export_missing_analysis",
        "export --analysis no/such/folder",
        lambda bench: bench.export_argv("--analysis", "no/such/folder"),
        ("--analysis", "no/such/folder"),
    ),
    (
        "export_missing_sparsity_sentences",
        "export --sparsity_sentences no/such/file.txt",
        lambda bench: bench.export_argv("--sparsity_sentences", "no/such/file.txt"),
        ("--sparsity_sentences", "no/such/file.txt"),
    ),
]


def _command_mistake(make_argv: Callable[[Workbench], list[str]], named: tuple[str, ...]):
    return lambda bench: cli(make_argv(bench), *named)


for _name, _description, _make_argv, _named in COMMAND_MISTAKES:
    PROBES.append(Probe(7, _name, _description, _command_mistake(_make_argv, _named), CLEAR))


@probe(7)
def probe_train_unknown_flag(bench):
    """train --lerning_rate 1e-3 (a misspelled flag)"""
    return cli(bench.train_argv(bench.folder() / "run", "--lerning_rate", "1e-3"), "--lerning_rate", "--learning_rate")


@probe(7)
def probe_train_missing_local_model(bench):
    """train --model_name_or_path ./no/such/folder"""
    missing = str(bench.folder() / "no" / "such" / "folder")
    return cli(bench.train_argv(bench.folder() / "run", "--model_name_or_path", missing, fresh=False), missing)


@probe(7)
def probe_train_from_a_truncated_config(bench):
    """train --model_name_or_path: a folder whose config.json is cut off"""
    model = bench.hub_folder()
    (model / "config.json").write_text('{"model_type": "adaptive_entmax_mar')
    return cli(
        bench.train_argv(bench.folder() / "run", "--model_name_or_path", str(model), fresh=False), "config.json"
    )


@probe(7, DOCUMENTED)
def probe_train_yaml_numbers_in_exponent_notation(bench):
    """train run.yaml with learning_rate: 1e-3 (YAML reads it as text): the number 0.001"""
    config = bench.write(bench.folder() / "run.yaml", "learning_rate: 1e-3\nalpha_learning_rate: 2e-2\n")
    model_args, _, training_args = parse_arguments([str(config)])
    ok = training_args.learning_rate == 1e-3 and model_args.alpha_learning_rate == 2e-2
    return documented(ok, f"learning_rate {training_args.learning_rate!r}")


@probe(7)
def probe_train_missing_relative_model(bench):
    """train --model_name_or_path "runs/my model" (a relative folder that does not exist)"""
    argv = bench.train_argv(bench.folder() / "run", "--model_name_or_path", "runs/my model", fresh=False)
    return cli(argv, "runs/my model", "no such folder")


@probe(7)
def probe_train_truncated_config_file(bench):
    """train run.json: a cut-off JSON file of arguments"""
    config = bench.write(bench.folder() / "run.json", '{"max_steps": 3, "learning_')
    return cli(["train", str(config)], "run.json")


@probe(7)
def probe_convert_truncated_config(bench):
    """convert --model: a Marian folder whose config.json is cut off"""
    marian = bench.marian_folder()
    (marian / "config.json").write_text('{"model_type": "mar')
    return cli(["convert", "--model", str(marian), "--output", str(bench.folder() / "out")], "config.json")


@probe(7)
def probe_export_truncated_config(bench):
    """export --model: a folder whose config.json is cut off"""
    model = bench.hub_folder()
    (model / "config.json").write_text('{"model_type": "adaptive_entmax_mar')
    return cli(["export", "--model", str(model), "--output", str(bench.folder() / "out")], "config.json")


@probe(7)
def probe_analyze_truncated_config(bench):
    """analyze: a model folder whose config.json is cut off"""
    model = bench.hub_folder()
    (model / "config.json").write_text('{"model_type": "adaptive_entmax_mar')
    argv = ["analyze", str(model), "--source_file", bench.sentences(), "--output", str(bench.folder() / "out")]
    return cli(argv, "config.json")


@probe(7)
def probe_translate_truncated_config(bench):
    """translate --model: a folder whose config.json is cut off"""
    model = bench.hub_folder()
    (model / "config.json").write_text('{"model_type": "adaptive_entmax_mar')
    return cli(["translate", "--model", str(model), "--input", bench.sentences()], "config.json")


@probe(7)
def probe_export_truncated_weights(bench):
    """export --model: a folder whose model.safetensors is cut off"""
    model = bench.hub_folder()
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return cli(["export", "--model", str(model), "--output", str(bench.folder() / "out")], "model.safetensors")


@probe(7)
def probe_translate_truncated_weights(bench):
    """translate --model: a folder whose model.safetensors is cut off"""
    model = bench.hub_folder()
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return cli(
        ["translate", "--model", str(model), "--input", bench.sentences(), "--no-progress"], "model.safetensors"
    )


@probe(7)
def probe_convert_without_tokenizer(bench):
    """convert --model: a Marian folder without tokenizer files"""
    marian = bench.marian_folder()
    for path in marian.glob("tokenizer*"):
        path.unlink()
    return cli(["convert", "--model", str(marian), "--output", str(bench.folder() / "out")], str(marian), "tokenizer")


@probe(7)
def probe_convert_blocked_pickle(bench):
    """convert --allow_pickle: pytorch_model.bin holding an object torch's weights_only loader refuses"""
    marian = bench.marian_folder()
    (marian / "model.safetensors").unlink()
    torch.save({"model.shared.weight": NotATensor()}, marian / "pytorch_model.bin")
    argv = ["convert", "--model", str(marian), "--output", str(bench.folder() / "out"), "--allow_pickle"]
    return cli(argv, "pytorch_model.bin")


@probe(7)
def probe_convert_shard_size_not_a_size(bench):
    """convert --max_shard_size big"""
    argv = ["convert", "--model", str(bench.marian_folder()), "--output", str(bench.folder() / "out")]
    return cli([*argv, "--max_shard_size", "big"], "--max_shard_size", "big")


@probe(7)
def probe_export_shard_size_not_a_size(bench):
    """export --max_shard_size big"""
    argv = ["export", "--model", str(bench.hub_folder()), "--output", str(bench.folder() / "out")]
    return cli([*argv, "--max_shard_size", "big"], "--max_shard_size", "big")


@probe(7)
def probe_export_api_shard_size_not_a_size(bench):
    """export_hub_folder(max_shard_size="big")"""
    model = tiny_model(vocab_size=len(bench.tokenizer))
    output = bench.folder() / "out"
    return api(lambda: export_hub_folder(model, bench.tokenizer, output, max_shard_size="big"), "big")


@probe(7)
def probe_push_unreachable_hub(bench):
    """push_folder(): the Hub cannot be reached (a transport error)"""
    unreachable = FakeHfApi(HubTransportError("[Errno 111] Connection refused"))
    folder = bench.hub_folder()
    return api(lambda: push(folder, unreachable), "reach")


@probe(7)
def probe_push_bad_repo_id(bench):
    """push --repo_id 'my model!'"""
    return cli(["push", str(bench.hub_folder()), "--repo_id", "my model!"], "--repo_id", "my model!")


@probe(7)
def probe_export_bad_repo_id(bench):
    """export --repo_id a/b/c"""
    argv = ["export", "--model", str(bench.hub_folder()), "--output", str(bench.folder() / "out")]
    return cli([*argv, "--repo_id", "a/b/c"], "--repo_id", "a/b/c")


@probe(7)
def probe_push_without_repo_id(bench):
    """push without --repo_id (an argparse error)"""
    return cli(["push", str(bench.hub_folder())], "--repo_id")


@probe(7)
def probe_export_unknown_flag(bench):
    """export --modle (a misspelled flag)"""
    return cli(["export", "--modle", str(bench.hub_folder()), "--output", str(bench.folder() / "out")], "--modle")


@probe(7)
def probe_translate_beams_not_a_number(bench):
    """translate --num_beams four"""
    argv = ["translate", "--model", str(bench.hub_folder()), "--input", bench.sentences(), "--num_beams", "four"]
    return cli(argv, "--num_beams", "four")


@probe(7)
def probe_analyze_without_output(bench):
    """analyze without --output (an argparse error)"""
    return cli(["analyze", str(bench.hub_folder()), "--source_file", bench.sentences()], "--output")


@probe(7)
def probe_unknown_command(bench):
    """hf-entmax trian (a misspelled command)"""
    code, _, stderr = run_command(["trian"])
    lines = [line for line in stderr.splitlines() if line.strip()]
    if code == 2 and len(lines) == 1 and lines[0].startswith("hf-entmax: error: ") and "'trian'" in lines[0]:
        return Outcome(CLEAR, lines[0])
    return Outcome(TRACEBACK if code else SILENT, f"exit code {code}, {len(lines)} stderr line(s)")


CONFIG_VALUES = {
    "d_model_zero": {"d_model": 0},
    "heads_zero": {"encoder_attention_heads": 0},
    "heads_negative": {"decoder_attention_heads": -4},
    "d_model_not_divisible": {"d_model": 30},
    "alpha_init_text": {"alpha_init": "fast"},
    "alpha_init_none": {"alpha_init": None},
    "learn_alpha_text": {"learn_alpha": "yes"},
    "alpha_min_none": {"alpha_min": None},
}


register_config_probes(7, CONFIG_VALUES)


@probe(7)
def probe_from_pretrained_truncated_config(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: config.json cut off"""
    model = bench.hub_folder()
    (model / "config.json").write_text('{"model_type": "adaptive_entmax_mar')
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model), "config.json")


@probe(7)
def probe_from_pretrained_zero_heads(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: config.json with 0 attention heads"""
    model = bench.hub_folder()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "encoder_attention_heads": 0}))
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model), "encoder_attention_heads")


@probe(7)
def probe_from_pretrained_without_weights(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: a folder without weights"""
    model = bench.hub_folder()
    (model / "model.safetensors").unlink()
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model), str(model))


@probe(7)
def probe_from_pretrained_truncated_weights(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: model.safetensors cut off"""
    model = bench.hub_folder()
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model), "model.safetensors")


def _translator(bench):
    model = bench.hub_folder()
    return pipeline("translation", model=str(model), trust_remote_code=True)


@probe(7)
def probe_pipeline_input_not_text(bench):
    """pipeline("translation")(42)"""
    translator = _translator(bench)
    return api(lambda: translator(42), "42")


@probe(7)
def probe_pipeline_max_length_zero(bench):
    """pipeline("translation")(text, max_length=0)"""
    translator = _translator(bench)
    return api(lambda: translator(SENTENCES[0], max_length=0), "max_length")


@probe(7)
def probe_pipeline_num_beams_zero(bench):
    """pipeline("translation")(text, num_beams=0)"""
    translator = _translator(bench)
    return api(lambda: translator(SENTENCES[0], num_beams=0), "num_beams")


@probe(7)
def probe_entmax_dim_out_of_range(bench):
    """entmax(scores of 2 dimensions, 1.5, dim=5)"""
    return api(lambda: entmax(torch.randn(2, 3), 1.5, dim=5), "dim", "5")


@probe(7)
def probe_entmax_alpha_above_two(bench):
    """entmax(scores, 2.5)"""
    return api(lambda: entmax(torch.randn(2, 3), 2.5), "alpha", "2.5")


@probe(7)
def probe_entmax_alpha_nan(bench):
    """entmax(scores, tensor(nan))"""
    return api(lambda: entmax(torch.randn(2, 3), torch.tensor(math.nan)), "alpha", "nan")


@probe(7)
def probe_convert_api_alpha_init_text(bench):
    """convert_marian(alpha_init="fast")"""
    marian, output = bench.marian_folder(), bench.folder() / "out"
    return api(lambda: convert_marian(str(marian), output, alpha_init="fast"), "alpha_init", "fast")


@probe(7)
def probe_convert_api_unknown_option(bench):
    """convert_marian(alpha_initt=1.2) (a misspelled option)"""
    marian, output = bench.marian_folder(), bench.folder() / "out"
    return api(lambda: convert_marian(str(marian), output, alpha_initt=1.2), "alpha_initt")


@probe(7)
def probe_entmax_complex_scores(bench):
    """entmax(complex scores, 1.5)"""
    return api(lambda: entmax(torch.randn(2, 3, dtype=torch.complex64), 1.5), "complex64")


@probe(7)
def probe_entmax15_integer_scores(bench):
    """entmax15(integer scores)"""
    return api(lambda: entmax15(torch.tensor([[1, 2, 3]])), "int64")


@probe(7)
def probe_entmax_alpha_text(bench):
    """entmax(scores, "1.5")"""
    return api(lambda: entmax(torch.randn(2, 3), "1.5"), "alpha")


@probe(7)
def probe_entmax_alpha_none(bench):
    """entmax(scores, None)"""
    return api(lambda: entmax(torch.randn(2, 3), None), "alpha")


@probe(7, DOCUMENTED)
def probe_mappings_of_empty_rows(bench):
    """entmax, entmax15, sparsemax and softmax (α = 1) of scores of shape (3, 0) and (0, 4)"""
    mappings = {"entmax": lambda x: entmax(x, 1.5), "entmax15": entmax15, "sparsemax": sparsemax}
    mappings["softmax"] = lambda x: entmax(x, 1.0)
    for name, mapping in mappings.items():
        for shape in ((3, 0), (0, 4)):
            try:
                result = mapping(torch.empty(shape))
            except Exception as error:
                return Outcome(TRACEBACK, f"{name} of {shape}: {type(error).__name__}: {first_line(error)}")
            if result.shape != shape:
                return Outcome(SILENT, f"{name} of {shape} has shape {tuple(result.shape)}")
    return Outcome(DOCUMENTED, "empty results of the same shape")


# Item 8: no silent acceptance.


@probe(8)
def probe_config_misspelled_keyword(bench):
    """AdaptiveEntmaxMarianConfig(alph_init=1.2)"""
    return api(lambda: tiny_config(alph_init=1.2), "alph_init", "alpha_init")


@probe(8)
def probe_config_negative_layers(bench):
    """AdaptiveEntmaxMarianConfig(encoder_layers=-1)"""
    return api(lambda: tiny_config(encoder_layers=-1), "encoder_layers")


@probe(8)
def probe_config_file_misspelled_field(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: config.json with "alph_init": 1.2"""
    model = bench.hub_folder()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "alph_init": 1.2}))
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model), "alph_init")


@probe(8)
def probe_from_pretrained_misspelled_keyword(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained(folder, alph_init=1.2)"""
    model = bench.hub_folder()
    return api(lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(model, alph_init=1.2), "alph_init")


@probe(8)
def probe_train_max_source_length_zero(bench):
    """train --max_source_length 0"""
    return cli(bench.train_argv(bench.folder() / "run", "--max_source_length", "0"), "--max_source_length", "0")


@probe(8)
def probe_alpha_of_one_dimension_on_the_pytorch_path(bench):
    """entmax(scores (4, 4), α of shape (4,)) on the PyTorch path: refused (α must have size 1 along `dim`)"""
    import hf_entmax.modeling.entmax as mappings

    native, mappings.native_entmax = mappings.native_entmax, None  # as the Hub copy runs, without hf_entmax
    try:
        return api(lambda: entmax(torch.randn(4, 4), torch.tensor([1.1, 1.5, 1.8, 2.0])), "alpha", "dim")
    finally:
        mappings.native_entmax = native


@probe(8)
def probe_alpha_of_one_dimension_on_the_kernel(bench):
    """entmax(scores (4, 4), α of shape (4,)) on the native kernel: refused, naming `alpha` and `dim`"""
    return api(lambda: entmax(torch.randn(4, 4), torch.tensor([1.1, 1.5, 1.8, 2.0])), "alpha", "dim")


def _summary(folder: Path) -> dict:
    return json.loads((folder / "training_summary.json").read_text())


@probe(8, DOCUMENTED, slow=True)
def probe_resumed_run_reports_the_whole_runs_loss(bench):
    """train --resume_from_checkpoint midway: train_loss covers every step, as the uninterrupted run's"""
    expected, resumed = _summary(bench.runs.first), _summary(bench.runs.resumed_midway)
    # A resumed run replays the same computation, so its steps have the same float32 losses; only their float64
    # recombination (a few operations) differs, by a few units of 2**-53.
    ok = math.isclose(resumed["metrics"]["train_loss"], expected["metrics"]["train_loss"], rel_tol=1e-12)
    return documented(ok, f"train_loss {resumed['metrics']['train_loss']} vs {expected['metrics']['train_loss']}")


@probe(8, DOCUMENTED, slow=True)
def probe_run_resumed_at_its_end(bench):
    """train --resume_from_checkpoint at the last step: no extra step, the same model and train_loss"""
    expected, resumed = _summary(bench.runs.first), _summary(bench.runs.resumed_at_end)
    same_model = all(
        torch.equal(tensor, load_file(bench.runs.first / "model.safetensors")[name])
        for name, tensor in load_file(bench.runs.resumed_at_end / "model.safetensors").items()
    )
    ok = (
        resumed["global_step"] == expected["global_step"] == 4
        and same_model
        and math.isclose(
            resumed["metrics"].get("train_loss", math.nan), expected["metrics"]["train_loss"], rel_tol=1e-12
        )
    )
    return documented(ok, f"steps {resumed['global_step']}, train_loss {resumed['metrics'].get('train_loss')}")


# A multi-process run described as giving equal or identical results (not "at equal global batch").
DDP_EQUALITY_CLAIM = re.compile(
    r"(DDP|torchrun|\d+-process|processes)[^.;]{0,80}?\b(equals?|identical)\b(?!\s+(global\s+)?batch)",
    re.IGNORECASE,
)


@probe(8, DOCUMENTED)
def probe_docs_call_ddp_equivalent_not_equal(bench):
    """README and docs: multi-process (DDP) results are called equivalent, never equal or identical"""
    documents = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
    claims = [
        f"{path.name}: {match.group(0)}"
        for path in documents
        if path.name != "reliability.md"  # the table of these probes quotes this one
        for match in DDP_EQUALITY_CLAIM.finditer(" ".join(path.read_text(encoding="utf-8").split()))
    ]
    return documented(not claims, "; ".join(claims))


# Item 9: torch.load never unpickles objects.


@probe(9, DOCUMENTED)
def probe_every_torch_load_is_weights_only(bench):
    """every torch.load in the package passes weights_only=True (torch < 2.6 defaults to False)"""
    calls = [
        f"{path.relative_to(REPOSITORY)}: {call}"
        for path in sorted((REPOSITORY / "hf_entmax").rglob("*.py"))
        for call in re.findall(r"torch\.load\([^)]*\)", path.read_text(encoding="utf-8"))
        if "weights_only=True" not in call
    ]
    return documented(not calls, "; ".join(calls))


# --- running the probes as tests, and the table ----------------------------------------------------------------


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return Workbench(tmp_path_factory.mktemp("reliability"))


def _parameters():
    for item in PROBES:
        marks = []
        if item.owned_by:
            marks.append(pytest.mark.skip(reason=f"owned by {item.owned_by}"))
        if item.slow:
            marks.append(pytest.mark.slow)
        if item.pending:
            marks.append(pytest.mark.xfail(strict=True, reason=f"fix due in {item.pending}"))
        yield pytest.param(item, id=f"{item.item}-{item.name}", marks=marks)


@pytest.mark.parametrize("item", list(_parameters()))
def test_probe(item, bench):
    with offline_environment():
        outcome = run_probe(item, bench)
    assert outcome.kind == item.expected, f"{item.description}: {outcome.kind}: {outcome.detail}"


def test_every_item_of_the_issue_has_probes():
    assert sorted({item.item for item in PROBES}) == sorted(ITEMS)
    assert len({item.name for item in PROBES}) == len(PROBES)


def main_table(argv: list[str]) -> int:
    """``--table``: print the table; ``--markdown PATH``: also put it between the markers in PATH."""
    results = []
    with tempfile.TemporaryDirectory(prefix="hf_entmax_reliability_") as root, offline_environment():
        bench = Workbench(Path(root))
        for item in PROBES:
            outcome = run_probe(item, bench)
            results.append((item, outcome))
            print(f"{item.item} {item.name}: {outcome.kind}: {outcome.detail}", file=sys.stderr)
    table = reliability_table(results)
    command = "python tests/test_reliability.py --table"
    print(table)
    if "--markdown" in argv:
        sys.path.insert(0, str(REPOSITORY))
        from benchmarks.tables import write_tables

        write_tables([argv[argv.index("--markdown") + 1]], {"reliability": f"{table}\n\nMeasured by `{command}`."})
    return 0


if __name__ == "__main__":
    if not {"--table", "--markdown"} & set(sys.argv):
        raise SystemExit("usage: python tests/test_reliability.py --table | --markdown docs/reliability.md")
    raise SystemExit(main_table(sys.argv[1:]))
