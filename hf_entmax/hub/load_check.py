"""The load check: a model folder loads without hf_entmax and computes what hf_entmax computes from it.

`check_folder_loads` loads the folder in a fresh Python process where hf_entmax cannot be imported, as someone
without it would from the Hub, and compares its logits and translations with this process's. That process runs the
folder's own code, so it gets a scrubbed environment and a home folder of its own (`load_check_environment`).
`export`, `convert` and `push` run it.
"""

import os
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

import torch

from ..common.model_folder import check_model_folder, load_pretrained, load_tokenizer
from ..common.outputs import is_write_failure
from ..errors import HfEntmaxError, HfEntmaxValueError, HfEntmaxWriteError, describe_os_error, last_line, one_line
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel


# The only variables of this process the load check's child gets: what Python, torch and the dynamic loader need
# to start as they do here. Nothing else passes (HF_TOKEN, AWS_*, GITHUB_TOKEN, HOME, XDG_*, NETRC, …): the child
# runs the folder's code, and gets a home folder of its own (`load_check_environment`).
_LOAD_CHECK_VARIABLES = (
    "PATH",
    "SYSTEMROOT",
    "WINDIR",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONUSERBASE",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "KMP_DUPLICATE_LIB_OK",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
# Any text works to compare two implementations of the same model; a few languages, short and long.
CHECK_SENTENCES = [
    "The small dog runs fast.",
    "Zwei Katzen schlafen im Haus, während draußen der Regen fällt.",
    "Le musée ouvre à neuf heures.",
    "a man reads a book",
]
# Here the model may run on the native CPU kernel, there on the PyTorch implementation: both are accurate to
# float32 rounding, which the network amplifies to ~1e-5 in the logits. A different function (a wrong α, a
# lost mask) differs by orders of magnitude more.
_LOAD_CHECK_TOLERANCE = 1e-4

# Run in a fresh interpreter: load the folder the way a Hub user would, with hf_entmax made unimportable.
_FRESH_PROCESS_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["hf_entmax"] = None  # as if hf_entmax were not installed
    import torch
    from transformers import AutoModelForSeq2SeqLM

    folder, inputs_path, results_path = sys.argv[1:]
    inputs = torch.load(inputs_path, weights_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    if not type(model).__module__.startswith("transformers_modules."):
        raise SystemExit(f"the model was not loaded from the folder's own code but from {type(model).__module__}")
    with torch.no_grad():
        logits = model(**inputs).logits
        generated = model.generate(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=1, do_sample=False,
            max_length=inputs["decoder_input_ids"].shape[1],
        )
    torch.save({"logits": logits, "generated": generated}, results_path)
    """
)


def check_folder_loads(
    folder: str | os.PathLike, sentences: list[str] | None = None, files: Sequence[str] | None = None
) -> float:
    """Check that ``folder`` loads without hf_entmax and computes what hf_entmax computes from it.

    A fresh Python process, where ``import hf_entmax`` fails, loads the folder with
    ``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)``; its logits on ``sentences``
    (teacher-forced on this process's greedy translations) and its greedy translations are compared with
    those of the folder loaded here by `AdaptiveEntmaxMarianMTModel`.

    The child runs the folder's code, so it gets a scrubbed environment (`load_check_environment`): only the
    variables in `_LOAD_CHECK_VARIABLES` (no tokens, keys or secrets), ``HF_HUB_OFFLINE=1``, an empty home folder of
    its own (so no stored Hub login, ``.netrc``, git or cloud credentials are found where libraries look for them)
    and no standard input. It still runs as you: code you do not trust should not be loaded at all.

    Args:
        folder: The model folder.
        sentences: Source sentences to compare on (default `CHECK_SENTENCES`).
        files: Only these files of ``folder`` (relative paths), e.g. what `hf-entmax push` uploads: the check
            loads exactly them. Default: the whole folder.

    Returns:
        The largest absolute logit difference (at most 1e-4).

    Raises:
        HfEntmaxValueError: with a one-line reason, if the folder is not a complete AdaptiveEntmaxMarian
            folder, fails to load without hf_entmax, or computes something else there.
        HfEntmaxWriteError: if the temporary folder is full or cannot be written.
    """
    folder = Path(folder).resolve()
    try:
        scratch = Path(tempfile.mkdtemp(prefix="hf_entmax_load_check_"))
    except OSError as error:
        raise _scratch_error(folder, error) from None
    try:
        model_folder = folder if files is None else _link_files(folder, files, scratch / "model")
        return _check_model_folder(model_folder, folder, sentences, scratch)
    except (OSError, RuntimeError) as error:
        if isinstance(error, HfEntmaxError) or not is_write_failure(error, scratch):
            raise
        raise _scratch_error(folder, error) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _scratch_error(folder: Path, error: BaseException) -> HfEntmaxWriteError:
    """The load check of ``folder`` could not write its temporary files (a full or read-only temporary folder)."""
    reason = describe_os_error(error) if isinstance(error, OSError) else one_line(error, 200)
    return HfEntmaxWriteError(
        f"cannot check that {folder} loads: writing to the temporary folder {tempfile.gettempdir()} failed "
        f"({reason}); set TMPDIR to a folder with room"
    )


def _link_files(folder: Path, files: Sequence[str], destination: Path) -> Path:
    """``destination`` holding ``files`` of ``folder`` (links where the system allows them, copies elsewhere)."""
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.symlink_to(folder / name)
        except OSError:  # e.g. Windows without the symlink privilege
            shutil.copyfile(folder / name, target)
    return destination


def _check_model_folder(model_folder: Path, folder: Path, sentences: list[str] | None, scratch: Path) -> float:
    """`check_folder_loads` on ``model_folder``, with ``folder`` in the messages and ``scratch`` for the child."""
    config = check_model_folder(model_folder, str(folder), (AdaptiveEntmaxMarianConfig.model_type,))
    if "auto_map" not in config:
        raise HfEntmaxValueError(
            f"{folder}/config.json has no auto_map, so it cannot load without hf_entmax; "
            "write the folder with `hf-entmax export`"
        )
    model = load_pretrained(AdaptiveEntmaxMarianMTModel, model_folder, str(folder), use_safetensors=True).eval()
    # With the config given, the tokenizer does not load the folder's remote code into this process.
    tokenizer = load_tokenizer(model_folder, str(folder), config=model.config)

    inputs = tokenizer(sentences or CHECK_SENTENCES, return_tensors="pt", padding=True, truncation=True)
    with torch.no_grad():
        # max_length (16 new tokens after the start token), not max_new_tokens: a saved generation config carries
        # max_length, and generate warns when both are set.
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_length=17)
        logits = model(**inputs, decoder_input_ids=generated).logits  # (B, T, vocab)

    torch.save({**inputs, "decoder_input_ids": generated}, scratch / "inputs.pt")
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_PROCESS_SCRIPT,
            str(model_folder),
            str(scratch / "inputs.pt"),
            str(scratch / "out.pt"),
        ],
        cwd=scratch,  # not the project folder: hf_entmax must not be importable from the working directory
        env=load_check_environment(scratch / "home"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if completed.returncode != 0:
        raise HfEntmaxValueError(f"{folder} does not load without hf_entmax installed: {last_line(completed.stderr)}")
    loaded = torch.load(scratch / "out.pt", weights_only=True)

    if loaded["logits"].shape != logits.shape:
        raise HfEntmaxValueError(
            f"{folder} loads without hf_entmax but gives logits of shape {tuple(loaded['logits'].shape)} "
            f"instead of {tuple(logits.shape)}"
        )
    difference = (loaded["logits"] - logits).abs().max().item()
    if not difference <= _LOAD_CHECK_TOLERANCE:
        raise HfEntmaxValueError(
            f"{folder} loads without hf_entmax but computes different logits there "
            f"(max difference {difference:.2e} > {_LOAD_CHECK_TOLERANCE:.0e})"
        )
    if not torch.equal(loaded["generated"], generated):
        raise HfEntmaxValueError(f"{folder} loads without hf_entmax but translates differently there")
    return difference


def load_check_environment(home: Path) -> dict[str, str]:
    """The environment of the load check's child: `_LOAD_CHECK_VARIABLES` from this one, the Hub switched off, and
    ``home`` (created empty) as its home folder, HF_HOME inside it: neither a stored Hub login (``HF_HOME/token``)
    nor ``~/.netrc``, ``~/.git-credentials``, ``~/.aws``, ``~/.config`` or a cached module is found there. Python's
    user site-packages, where this process imports from them, stay importable (a path, no secret)."""
    hf_home = home / ".cache" / "huggingface"  # the remote-code module cache (HF_HOME/modules) is fresh too
    hf_home.mkdir(parents=True, exist_ok=True)
    environment = {name: os.environ[name] for name in _LOAD_CHECK_VARIABLES if name in os.environ}
    if site.ENABLE_USER_SITE and "PYTHONUSERBASE" not in environment:  # found through HOME otherwise
        environment["PYTHONUSERBASE"] = site.getuserbase()
    return {
        **environment,
        "HOME": str(home),
        "USERPROFILE": str(home),  # Windows' HOME
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }


__all__ = [
    "CHECK_SENTENCES",
    "check_folder_loads",
    "load_check_environment",
]
