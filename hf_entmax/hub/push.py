"""Publish a model folder to the Hub: the logic behind `hf-entmax push`.

Only what a model repository needs is uploaded, the files `hf_entmax.hub.repo_files.select_upload_files` selects (and
checks: regular files of the folder only, no names of hidden files or credentials, no pickled weights); the command
says what it skipped. Before anything goes over the network those files must load without hf_entmax
(`hf_entmax.hub.load_check`). Hub failures (offline, unreachable, no token, a rejected token, …) become one-line
errors.
"""

import glob
import os
from pathlib import Path

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.errors import HTTPError as HubTransportError  # the HTTP library's base error (httpx)

from ..common.hub_ids import check_repo_id
from ..errors import HfEntmaxError, HfEntmaxValueError, one_line
from .load_check import check_folder_loads
from .repo_files import select_upload_files


LOGIN_HINT = "log in with `hf auth login`, or set HF_TOKEN to a token with write access"


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    create_pr: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    api: HfApi | None = None,
    check_load: bool = True,
) -> str:
    """Upload the model files of ``folder`` (`select_upload_files`) to the Hub model repo ``repo_id``.

    The repo is created if needed.

    Args:
        folder: A model folder: from `hf-entmax export`, `convert` or `train` (checkpoints and training state in it
            are left out).
        repo_id: ``user/name`` or ``organisation/name``.
        private: Create the repo as private (an existing repo keeps its visibility).
        create_pr: Open a pull request instead of committing to the branch.
        revision: The branch to commit to (created if missing); the default branch when None.
        commit_message: Defaults to "Upload AdaptiveEntmaxMarian model".
        token: A Hub token; by default the usual places (``HF_TOKEN``, the cached login).
        api: The `HfApi` to use (tests substitute one that records calls).
        check_load: Check that the selected files load without hf_entmax before uploading (a fresh Python process).

    Returns:
        The URL of the commit, or of the pull request with ``create_pr``.

    Raises:
        HfEntmaxValueError: a bad repo id, pickled weights, or files that do not load without hf_entmax.
        HfEntmaxError: offline, unreachable, no token, a rejected token, or another Hub failure (one line).
    """
    check_repo_id(repo_id, "--repo_id")
    selection = select_upload_files(folder)
    if _offline():
        raise HfEntmaxError(
            "cannot push: the Hub is disabled by HF_HUB_OFFLINE=1 (unset it on a machine with network access)"
        )
    token = token or get_token()
    if token is None:
        raise HfEntmaxError(f"cannot push: no Hugging Face token found; {LOGIN_HINT}")
    if check_load:
        try:
            check_folder_loads(folder, files=selection.files)
        except HfEntmaxError as error:
            raise HfEntmaxValueError(f"refusing to upload: {error}") from error

    api = api or HfApi()
    try:
        api.create_repo(repo_id, token=token, private=private, repo_type="model", exist_ok=True)
        if revision is not None and not create_pr:
            api.create_branch(repo_id, branch=revision, token=token, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=Path(folder),
            repo_type="model",
            token=token,
            revision=revision,
            create_pr=create_pr,
            commit_message=commit_message or "Upload AdaptiveEntmaxMarian model",
            # Exactly the files selected and checked above (escaped: the patterns are fnmatch patterns).
            allow_patterns=[glob.escape(path) for path in selection.files],
        )
    except OfflineModeIsEnabled as error:
        raise HfEntmaxError("cannot push: the Hub is disabled by HF_HUB_OFFLINE=1") from error
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        if status in (401, 403):
            raise HfEntmaxError(
                f"cannot push to {repo_id!r}: the Hub rejected the token (HTTP {status}); {LOGIN_HINT}, "
                f"and check that it may write to {repo_id.split('/')[0]!r}"
            ) from error
        raise HfEntmaxError(
            f"cannot push to {repo_id!r}: the Hub answered HTTP {status}: {one_line(error)}"
        ) from error
    except (HubTransportError, OSError) as error:  # connection refused, DNS failure, timeout, TLS failure
        raise HfEntmaxError(
            f"cannot push: could not reach the Hub at {api.endpoint} ({one_line(error) or type(error).__name__})"
        ) from error
    url = getattr(commit, "pr_url", None) if create_pr else None
    return url or commit.commit_url


def _offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it once, at import)."""
    value = os.environ.get("HF_HUB_OFFLINE")
    return constants.HF_HUB_OFFLINE or (value is not None and value.strip().upper() in {"1", "ON", "YES", "TRUE"})


__all__ = [
    "LOGIN_HINT",
    "push_folder",
]
