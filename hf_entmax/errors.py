"""Errors that hf_entmax reports to users: one line naming what is wrong and how to fix it."""


class HfEntmaxError(Exception):
    """Base class of the errors hf_entmax raises for bad input; the CLI prints them without a traceback."""


class HfEntmaxValueError(HfEntmaxError, ValueError):
    """A value (argument, field, file content) is not what was expected."""


class HfEntmaxFileNotFoundError(HfEntmaxError, FileNotFoundError):
    """A file or folder the user named does not exist."""
