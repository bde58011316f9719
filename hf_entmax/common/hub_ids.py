"""The identifiers a model card's metadata holds: Hub repo ids (told from a local path, checked when given) and
language codes."""

import re
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..errors import HfEntmaxValueError, one_line


# Language codes: ISO 639 with optional subtags (de, pt-BR, zh_Hans), or a short code of one's own (syn).
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*")


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


def check_language_code(value: object, name: str) -> str:
    """``value`` if it is a language code (`LANGUAGE_CODE`: de, en, pt-BR, zh_Hans)."""
    if not isinstance(value, str) or not LANGUAGE_CODE.fullmatch(value):
        raise HfEntmaxValueError(
            f"{name} {value!r} is not a language code: expected a code such as de, en or pt-BR (letters, then "
            "optional '-' or '_' parts)"
        )
    return value
