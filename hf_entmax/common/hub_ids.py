"""Hub repo ids: telling one from a local path, and checking one given on the command line."""

from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..errors import HfEntmaxValueError, one_line


def is_hub_id(name: str) -> bool:
    """Whether ``name`` names a Hub repo rather than a local folder (a path that exists here is a folder)."""
    if name.startswith((".", "~", "/")) or Path(name).expanduser().exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def check_repo_id(repo_id: str, flag: str) -> str:
    """``repo_id`` if it is a valid Hub repo id (``name`` or ``namespace/name``); a one-line error naming ``flag``."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise HfEntmaxValueError(
            f"{flag} {repo_id!r} is not a Hub repo id (expected user/name or organisation/name): {one_line(error)}"
        ) from None
    return repo_id
