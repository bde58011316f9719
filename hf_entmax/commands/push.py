"""`hf-entmax push`: upload a model folder to a model repo on the Hugging Face Hub.

Only the files a model repository needs go up: safetensors weights (and their index), config.json,
generation_config.json, the tokenizer files, the code files the config loads, README.md and the figures it shows,
LICENSE, and the training run's records (training_summary.json, alpha_history.json, Trainer's *_results.json and
trainer_state.json, generated_predictions.txt). Everything else (checkpoint-*/, optimizer/scheduler/RNG states,
training_args.bin, dotfiles, other files) is skipped, and the command lists what it uploads and what it skips.
Pickled weights (e.g. pytorch_model.bin) are refused, and so is a selected file that is a symbolic link (or under
one) or whose name is hidden or looks like a credential (id_rsa*, *.pem, *token*, *secret*, …: see docs/hub.md).
The upload is refused too if those files do not load in a fresh process without hf_entmax (with a home folder and
an environment of its own: no credentials). The repo is created if needed; the token comes from the usual places
(HF_TOKEN, `hf auth login`).
"""

import argparse
import sys
from collections.abc import Sequence

from ..common.hub_ids import check_repo_id
from ..hub.push import push_folder
from ..hub.repo_files import select_upload_files
from .parsing import CommandParser


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder", help="A model folder (from hf-entmax export, convert or train: checkpoints are left out)."
    )
    parser.add_argument("--repo_id", required=True, help="The model repo: user/name or organisation/name.")
    parser.add_argument("--private", action="store_true", help="Create the repo as private.")
    parser.add_argument("--create_pr", action="store_true", help="Open a pull request instead of committing.")
    parser.add_argument("--revision", default=None, help="The branch to commit to (created if missing).")
    parser.add_argument("--commit_message", default=None, help="The commit message.")


def run(args: argparse.Namespace) -> int:
    check_repo_id(args.repo_id, "--repo_id")  # before listing files: a typo is the first thing to hear about
    print(select_upload_files(args.folder).describe(args.folder))
    url = push_folder(
        args.folder,
        args.repo_id,
        private=args.private,
        create_pr=args.create_pr,
        revision=args.revision,
        commit_message=args.commit_message,
    )
    print(f"Pushed {args.folder} to {args.repo_id}: {url}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax push", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
