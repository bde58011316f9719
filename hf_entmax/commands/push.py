"""`hf-entmax push`: upload a Hub-ready folder to a model repo on the Hugging Face Hub.

The repo is created if needed. The token comes from the usual places (HF_TOKEN, `hf auth login`). The folder is
refused if it holds pickle files or does not load in a fresh process without hf_entmax.
"""

import argparse
import sys
from collections.abc import Sequence

from ..conversion.push import push_folder


HELP = "upload a Hub-ready folder to the Hugging Face Hub (after checking it loads without hf_entmax)"


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="A Hub-ready folder (from hf-entmax export or hf-entmax convert).")
    parser.add_argument("--repo_id", required=True, help="The model repo: user/name or organisation/name.")
    parser.add_argument("--private", action="store_true", help="Create the repo as private.")
    parser.add_argument("--create_pr", action="store_true", help="Open a pull request instead of committing.")
    parser.add_argument("--revision", default=None, help="The branch to commit to (created if missing).")
    parser.add_argument("--commit_message", default=None, help="The commit message.")


def run(args: argparse.Namespace) -> int:
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
    parser = argparse.ArgumentParser(prog="hf-entmax push", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
