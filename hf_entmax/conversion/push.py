"""Publish a Hub-ready folder: the logic behind `hf-entmax push`.

Before anything goes over the network the folder is checked: no pickle files, and it loads without hf_entmax
(see `check_folder_loads`). Hub failures (offline, no token, a rejected token, …) become one-line errors.
"""

import os
from pathlib import Path

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from ..errors import HfEntmaxError, HfEntmaxFileNotFoundError, HfEntmaxValueError
from .export import check_folder_loads, find_pickle_files


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
    """Upload ``folder`` to the Hub model repo ``repo_id``, creating the repo if needed.

    Args:
        folder: A Hub-ready folder (from `export_hub_folder`, `hf-entmax export` or `hf-entmax convert`).
        repo_id: ``user/name`` or ``organisation/name``.
        private: Create the repo as private (an existing repo keeps its visibility).
        create_pr: Open a pull request instead of committing to the branch.
        revision: The branch to commit to (created if missing); the default branch when None.
        commit_message: Defaults to "Upload AdaptiveEntmaxMarian model".
        token: A Hub token; by default the usual places (``HF_TOKEN``, the cached login).
        api: The `HfApi` to use (tests substitute one that records calls).
        check_load: Check that the folder loads without hf_entmax before uploading (a fresh Python process).

    Returns:
        The URL of the commit, or of the pull request with ``create_pr``.

    Raises:
        HfEntmaxValueError: the folder holds pickle files or does not load without hf_entmax.
        HfEntmaxError: offline, no token, a rejected token, or another Hub failure (one line).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HfEntmaxFileNotFoundError(f"{folder}: no such folder")
    if pickles := find_pickle_files(folder):
        raise HfEntmaxValueError(
            f"refusing to upload {folder}: it holds pickle files ({', '.join(pickles)}), which run code when loaded; "
            "publish a folder written by `hf-entmax export` (safetensors only)"
        )
    files = upload_file_list(folder)
    if _offline():
        raise HfEntmaxError(
            "cannot push: the Hub is disabled by HF_HUB_OFFLINE=1 (unset it on a machine with network access)"
        )
    token = token or get_token()
    if token is None:
        raise HfEntmaxError(f"cannot push: no Hugging Face token found; {LOGIN_HINT}")
    if check_load:
        try:
            check_folder_loads(folder)
        except HfEntmaxError as error:
            raise HfEntmaxValueError(f"refusing to upload: {error}") from error

    api = api or HfApi()
    try:
        api.create_repo(repo_id, token=token, private=private, repo_type="model", exist_ok=True)
        if revision is not None and not create_pr:
            api.create_branch(repo_id, branch=revision, token=token, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            repo_type="model",
            token=token,
            revision=revision,
            create_pr=create_pr,
            commit_message=commit_message or "Upload AdaptiveEntmaxMarian model",
            # Exactly the files checked above, even if something lands in the folder meanwhile.
            allow_patterns=files,
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
            f"cannot push to {repo_id!r}: the Hub answered HTTP {status}: {_one_line(error)}"
        ) from error
    except OSError as error:  # connection failures (httpx's transport errors are OSErrors too)
        raise HfEntmaxError(f"cannot push: could not reach the Hub ({_one_line(error)})") from error
    url = getattr(commit, "pr_url", None) if create_pr else None
    return url or commit.commit_url


def upload_file_list(folder: str | os.PathLike) -> list[str]:
    """The files `push_folder` uploads: everything in ``folder`` except version-control and cache folders."""
    folder = Path(folder)
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and not ({".git", ".cache"} & set(path.relative_to(folder).parts[:-1]))
    )


def _offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it once, at import)."""
    value = os.environ.get("HF_HUB_OFFLINE")
    return constants.HF_HUB_OFFLINE or (value is not None and value.strip().upper() in {"1", "ON", "YES", "TRUE"})


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:300]


__all__ = ["push_folder", "upload_file_list"]
