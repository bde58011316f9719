"""Reliability probes of item 10 (nothing of the user's overwritten: marked outputs, one writer, atomic saves);
registered on import by tests/test_reliability.py.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import torch
from probing import CLEAR, DOCUMENTED, PROGRESS_BAR, Outcome, api, cli, documented, first_line, probe, run_command
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import Seq2SeqTrainingArguments

from hf_entmax.common.outputs import LOCK_FILE, MARKER_FILE
from hf_entmax.training import run as training_run
from hf_entmax.training.arguments import DataArguments, ModelArguments


ITEM = 10
# What safetensors raises when the disk fills while it writes (measured on a 512 kB tmpfs).
DISK_FULL = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def transformers_trainer_run(bench) -> Path:
    """A folder as a plain transformers Trainer run of another model leaves it: its weights, config, state, card and
    a checkpoint."""
    folder = bench.folder("bert-run")
    bench.write(folder / "config.json", json.dumps({"model_type": "bert", "hidden_size": 8}))
    save_file({"weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    bench.write(folder / "trainer_state.json", json.dumps({"global_step": 10, "log_history": []}))
    bench.write(folder / "README.md", "# my BERT run\n")
    bench.write(folder / "checkpoint-10" / "trainer_state.json", json.dumps({"global_step": 10}))
    bench.write(folder / "checkpoint-10" / "config.json", json.dumps({"model_type": "bert"}))
    return folder


@probe(ITEM)
def probe_train_into_another_models_trainer_run(bench):
    """train --output_dir: a plain transformers Trainer run of another model (state, config, weights, card)"""
    folder = transformers_trainer_run(bench)
    bench.keep(folder)
    return cli(bench.train_argv(folder), "--output_dir", str(folder), "--overwrite_output_dir")


@probe(ITEM)
def probe_demo_into_another_models_trainer_run(bench):
    """demo --output_dir: a plain transformers Trainer run of another model"""
    folder = transformers_trainer_run(bench)
    bench.keep(folder)
    return cli(["demo", "--output_dir", str(folder), "--max_steps", "1"], "--output_dir", str(folder))


@probe(ITEM)
def probe_train_into_a_folder_with_checkpoint_notes(bench):
    """train --output_dir: a user's folder whose files are README.md and checkpoint-notes.md"""
    folder = bench.folder("notes")
    bench.write(folder / "README.md", "# my notes\n")
    bench.write(folder / "checkpoint-notes.md", "what to try next\n")
    bench.keep(folder)
    return cli(bench.train_argv(folder), "--output_dir", str(folder))


@probe(ITEM)
def probe_train_into_a_folder_with_a_checkpoint_like_folder(bench):
    """train --output_dir: a user's folder holding checkpoint-1/ of their own (no model in it)"""
    folder = bench.folder("mine")
    bench.write(folder / "checkpoint-1" / "notes.txt", "mine\n")
    bench.keep(folder)
    return cli(bench.train_argv(folder), "--output_dir", str(folder))


@probe(ITEM)
def probe_train_into_an_edited_export(bench):
    """train --output_dir: a Hub-ready export (with the run's records) whose card the user edited"""
    folder = bench.hub_folder()
    bench.write(folder / "training_summary.json", json.dumps({"model_name": "model"}))
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\nMy own notes on this model.\n")
    bench.keep(folder)
    return cli(bench.train_argv(folder), "--output_dir", str(folder), "the output of hf-entmax export")


def _edited_export(bench) -> Path:
    folder = bench.hub_folder()
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\nMy own notes on this model.\n")
    bench.keep(folder)
    return folder


@probe(ITEM)
def probe_export_over_an_edited_export(bench):
    """export --output: an earlier export whose card the user edited since"""
    folder = _edited_export(bench)
    return cli(bench.export_argv("--output", str(folder), "--no-check_load"), "README.md", "--overwrite")


@probe(ITEM)
def probe_export_over_an_export_with_an_added_file(bench):
    """export --output: an earlier export the user added a file to (notes.txt)"""
    folder = bench.hub_folder()
    bench.write(folder / "notes.txt", "keep me\n")
    bench.keep(folder)
    return cli(bench.export_argv("--output", str(folder), "--no-check_load"), "notes.txt", "--overwrite")


@probe(ITEM)
def probe_convert_over_an_edited_export(bench):
    """convert --output: an earlier export whose card the user edited since"""
    folder = _edited_export(bench)
    return cli(bench.convert_argv("--output", str(folder), "--no-check_load"), "README.md", "--overwrite")


@probe(ITEM)
def probe_export_api_over_an_edited_export(bench):
    """export_hub_folder(): an earlier export whose card the user edited since"""
    from hf_entmax.hub import export_hub_folder
    from hf_entmax.modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel

    folder = _edited_export(bench)
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(folder)
    return api(lambda: export_hub_folder(model, bench.tokenizer, folder), "README.md", "overwrite")


@probe(ITEM, DOCUMENTED)
def probe_export_overwrite_replaces_an_edited_export(bench):
    """export --overwrite over an edited earlier export: replaced whole, the card rendered again"""
    folder = bench.hub_folder()
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\nMy own notes on this model.\n")
    code, _, stderr = run_command(bench.export_argv("--output", str(folder), "--no-check_load", "--overwrite"))
    ok = code == 0 and "My own notes" not in (folder / "README.md").read_text(encoding="utf-8")
    return documented(ok, f"exit code {code}: {first_line(stderr)}")


@probe(ITEM)
def probe_train_api_into_another_models_trainer_run(bench):
    """training.run.train() from Python: output_dir a Trainer run of another model"""
    folder = transformers_trainer_run(bench)
    bench.keep(folder)
    arguments = (
        ModelArguments(model_size="tiny", vocab_size=300),
        DataArguments(train_file=bench.train_file, source_lang="en", target_lang="syn"),
        Seq2SeqTrainingArguments(output_dir=str(folder), max_steps=1, report_to="none", use_cpu=True),
    )
    return api(lambda: training_run.train(*arguments), str(folder))


@contextlib.contextmanager
def lock_held_by_another_process(folder: Path):
    """``folder``'s lock held by a second Python process, as a second `hf-entmax train` would hold it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
            "print('held', flush=True); time.sleep(600)",
            str(folder / LOCK_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdout.readline()  # "held": the lock is taken
        yield
    finally:
        holder.kill()
        holder.wait()


@probe(ITEM)
def probe_second_train_while_the_first_runs(bench):
    """train --output_dir: a folder another hf-entmax train is writing into (its lock held by that process)"""
    folder = bench.folder("shared")
    bench.write(folder / MARKER_FILE, json.dumps({"command": "train"}))
    with lock_held_by_another_process(folder):
        bench.keep(folder)
        return cli(bench.train_argv(folder), "--output_dir", str(folder), "another")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_train_again_into_its_own_output(bench):
    """train --output_dir: an earlier train run's folder (its marker): trains again in it"""
    folder = Path(shutil.copytree(bench.runs.first, bench.folder("again") / "run"))
    code, _, stderr = run_command(bench.train_argv(folder))
    ok = code == 0 and (folder / "model.safetensors").is_file() and not (folder / ".hf_entmax_staging").exists()
    return documented(ok, f"exit code {code}: {first_line(stderr)}")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_overwrite_flag_writes_into_a_foreign_folder(bench):
    """train --overwrite_output_dir into a user's folder: trains there and leaves the user's other files"""
    folder = bench.folder("allowed")
    notes = bench.write(folder / "notes.txt", "keep me\n")
    code, _, stderr = run_command(bench.train_argv(folder, "--overwrite_output_dir", "True"))
    ok = code == 0 and notes.read_text() == "keep me\n" and (folder / "model.safetensors").is_file()
    return documented(ok, f"exit code {code}: {first_line(stderr)}")


@probe(ITEM, slow=True)
def probe_disk_full_while_saving_over_an_earlier_run(bench):
    """train into an earlier run's folder, the disk full while the model is saved: one line, the earlier model kept"""
    folder = Path(shutil.copytree(bench.runs.first, bench.folder("full") / "run"))
    bench.keep(folder)
    with mock.patch("transformers.modeling_utils.safe_save_file", side_effect=DISK_FULL):
        return cli(bench.train_argv(folder), "--output_dir", str(folder), "no space left")


@probe(ITEM, slow=True)
def probe_disk_full_while_saving_a_checkpoint(bench):
    """train: the disk full while a checkpoint's optimizer state is saved (torch's own error): one line"""
    folder = bench.folder("checkpoints") / "run"
    full = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    disk = shutil.disk_usage(bench.root)._replace(free=1000)
    with (
        mock.patch("transformers.trainer.torch.save", side_effect=full),
        mock.patch("hf_entmax.common.outputs.shutil.disk_usage", return_value=disk),
    ):
        argv = bench.train_argv(folder, "--save_strategy", "steps", "--save_steps", "1")
        return cli(argv, "--output_dir", str(folder), "no space left", "needed")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_train_interrupted_keeps_the_earlier_run(bench):
    """train into an earlier run's folder, stopped by Ctrl-C while saving: exit 130, one line, earlier model kept"""
    folder = Path(shutil.copytree(bench.runs.first, bench.folder("stopped") / "run"))
    earlier = load_file(folder / "model.safetensors")
    with mock.patch("transformers.modeling_utils.safe_save_file", side_effect=KeyboardInterrupt):
        code, _, stderr = run_command(bench.train_argv(folder))
    lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    kept = load_file(folder / "model.safetensors")
    same = kept.keys() == earlier.keys() and all((kept[name] == earlier[name]).all() for name in earlier)
    ok = code == 130 and len(lines) == 1 and lines[0].startswith("hf-entmax train: interrupted") and same
    return documented(ok, f"exit code {code}, {len(lines)} line(s): {' | '.join(lines)[:300]}")


def _hard_link(bench, name: str) -> tuple[Path, Path]:
    original = Path(bench.sentences())
    link = original.parent / name
    os.link(original, link)
    return original, link


@probe(ITEM)
def probe_translate_output_a_hard_link_to_the_input(bench):
    """translate --output: a hard link to --input"""
    sources, link = _hard_link(bench, "linked.txt")
    bench.keep(sources)
    argv = ["translate", "--model", str(bench.hub_folder()), "--input", str(sources), "--output", str(link)]
    return cli([*argv, "--no-progress"], "--output", "--input")


@probe(ITEM)
def probe_translate_output_a_symbolic_link_to_the_input(bench):
    """translate --output: a symbolic link to --input"""
    sources = Path(bench.sentences())
    link = sources.parent / "symlinked.txt"
    link.symlink_to(sources)
    bench.keep(sources)
    argv = ["translate", "--model", str(bench.hub_folder()), "--input", str(sources), "--output", str(link)]
    return cli([*argv, "--no-progress"], "--output", "--input")


@probe(ITEM)
def probe_translate_metrics_a_hard_link_to_the_reference(bench):
    """translate --metrics_file: a hard link to --reference"""
    reference, link = _hard_link(bench, "reference-link.txt")
    bench.keep(reference)
    argv = bench.translate_argv("--reference", str(reference), "--metrics_file", str(link))
    return cli(argv, "--metrics_file", "--reference")


@probe(ITEM, DOCUMENTED)
def probe_translate_interrupted_keeps_the_lines_done(bench):
    """translate stopped by Ctrl-C: exit 130, one line, --output holds the lines translated before, in order"""
    from hf_entmax import AdaptiveEntmaxMarianMTModel

    model = bench.hub_folder()
    sources = bench.sentences()
    complete = bench.folder() / "complete.txt"
    argv = ["translate", "--model", str(model), "--input", sources, "--batch_size", "1", "--no-progress"]
    code, _, stderr = run_command([*argv, "--output", str(complete)])
    if code != 0:
        return Outcome(CLEAR, f"the uninterrupted run failed: {first_line(stderr)}")
    calls = []
    generate = AdaptiveEntmaxMarianMTModel.generate

    def stopped_at_the_third_batch(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return generate(self, *args, **kwargs)

    output = complete.parent / "stopped.txt"
    with (
        mock.patch.object(AdaptiveEntmaxMarianMTModel, "generate", stopped_at_the_third_batch),
        mock.patch("hf_entmax.commands.translate.BATCHES_PER_BLOCK", 1),
    ):
        code, _, stderr = run_command([*argv, "--output", str(output)])
    lines = [line for line in stderr.splitlines() if line.strip()]
    kept = output.read_text(encoding="utf-8").splitlines() if output.is_file() else None
    ok = (
        code == 130
        and len(lines) == 1
        and "first 2 of 4 lines" in lines[0]
        and kept == complete.read_text(encoding="utf-8").splitlines()[:2]
        and sorted(path.name for path in output.parent.iterdir()) == ["complete.txt", "stopped.txt"]
    )
    return documented(ok, f"exit code {code}, {' | '.join(lines)[:200]}, kept {kept}")
