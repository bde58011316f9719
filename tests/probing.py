"""The reliability probes' framework: outcomes, the workbench probes start from, the registry and the table.

A probe is one input to `hf-entmax <command>` (run in this process through `hf_entmax.cli.main`), to the config, to
``from_pretrained`` of a broken folder, to the pipeline, `convert_marian`, `export_hub_folder`, `push_folder` (with
a fake Hub client) or the mappings. Its outcome is one of:

- **clear error**: the CLI exits with 1 and prints exactly one stderr line ``hf-entmax <command>: error: …`` that
  names the flag, file, field or value; the Python API raises a ValueError, TypeError, IndexError, OSError or
  HfEntmaxError (a config: huggingface_hub's StrictDataclassError, as transformers 5 configs) whose message names it;
- **as documented**: an unusual but valid input, handled as the documentation says (the probe checks the result);
- **traceback**: any other exception, several lines, or a message that does not name what is wrong;
- **silent**: a mistake accepted without a word, or a wrong result;
- **lost**: a file that existed before the probe was changed or removed (checked for every probe).

The probes themselves live in tests/test_reliability.py (items 1-9) and the ``probes_*.py`` modules it imports.
"""

import contextlib
import io
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

import torch
from helpers import SENTENCES, tiny_config, tiny_model
from huggingface_hub import constants
from huggingface_hub.errors import StrictDataclassError
from transformers import MarianConfig, MarianMTModel

from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxError
from hf_entmax.hub import export_hub_folder, push_folder
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer


REPOSITORY = Path(__file__).resolve().parent.parent

CLEAR = "clear error"
DOCUMENTED = "as documented"
TRACEBACK = "traceback"
SILENT = "silent"
LOST = "lost"
OUTCOMES = (CLEAR, DOCUMENTED, TRACEBACK, SILENT, LOST)
PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's bars, e.g. "Loading weights: 100%|##| 92/92 [00:00<00:00]"

ITEMS = {
    1: "Nothing lost: output folders and files",
    2: "No stale weights",
    3: "Secrets and local paths stay local",
    4: "Mappings on the whole float range (tests/test_entmax.py, tests/test_kernels.py)",
    5: "α learning rates",
    6: "Double backward (tests/test_entmax.py, tests/test_kernels.py)",
    7: "One line instead of a traceback",
    8: "No silent acceptance",
    9: "torch.load never unpickles objects",
    # The third pass: what the first two lists never reached.
    10: "Nothing of the user's overwritten: marked outputs, one writer, atomic saves",
    11: "Nothing leaked: uploads, exports, cards and the load check",
    12: "Disk, permission, encoding and signal faults: one line",
    13: "Data the tokenizer or the columns would drop",
    14: "The Python API as strict as the CLI",
    15: "Attention weights keep their gradient",
    # After the third pass: the entry points added since.
    16: "Entry points added since: align, --paragraphs, --document_context, decoder-only folders",
}
MAPPING_TESTS = "tests/test_entmax.py and tests/test_kernels.py"

# The smallest `hf-entmax train` that runs: a tiny model for two steps, nothing saved on the way.
TRAIN_FAST = [
    "--model_size", "tiny",
    "--vocab_size", "300",
    "--max_steps", "2",
    "--per_device_train_batch_size", "8",
    "--max_source_length", "32",
    "--max_target_length", "32",
    "--generation_max_length", "8",
    "--save_strategy", "no",
    "--report_to", "none",
    "--disable_tqdm", "True",
    "--seed", "0",
]  # fmt: skip


# --- outcomes ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str


def documented(ok: bool, detail: str) -> Outcome:
    """The outcome of a probe of a valid input: as documented, or silently wrong."""
    return Outcome(DOCUMENTED if ok else SILENT, detail)


def first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


@contextlib.contextmanager
def warnings_kept_apart():
    """Log records go to a handler of their own while the block runs, not to stderr: a warning the run gave before
    its error (a truncation report, a reused tokenizer) is not part of the error's one line. Under pytest its log
    capture does this; here it holds for the table too."""
    handler = logging.NullHandler()  # with a handler on the root logger, logging's last resort (stderr) is not used
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def run_command(argv: list[str]) -> tuple[int, str, str]:
    """``hf-entmax argv`` in this process: ``(exit code, stdout, stderr)``, log records apart
    (`warnings_kept_apart`). An exception that escapes is raised."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings_kept_apart():
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own exit (usage errors)
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, stdout.getvalue(), stderr.getvalue()


def cli(argv: list[str], *named: str) -> Outcome:
    """A command that must refuse its input: one stderr line ``hf-entmax <command>: error: …`` naming ``named``
    (progress bars of work done before the mistake showed, e.g. of a run that diverged, are not counted)."""
    try:
        code, _, stderr = run_command(argv)
    except Exception as error:
        return Outcome(TRACEBACK, f"{type(error).__name__}: {first_line(error)}")
    lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    if code == 0:
        return Outcome(SILENT, "exit code 0")
    prefix = f"hf-entmax {argv[0]}: error: "
    if code == 1 and len(lines) == 1 and lines[0].startswith(prefix) and all(name in lines[0] for name in named):
        return Outcome(CLEAR, lines[0])
    return Outcome(TRACEBACK, f"exit code {code}, {len(lines)} stderr line(s): {' | '.join(lines)[:300]}")


def api(call: Callable[[], object], *named: str) -> Outcome:
    """A Python entry point that must refuse its input: a ValueError, TypeError, IndexError (a dimension), OSError or
    HfEntmaxError (or, for a config, huggingface_hub's StrictDataclassError, which transformers 5 configs raise)
    whose message names ``named``."""
    try:
        call()
    except (ValueError, TypeError, IndexError, OSError, HfEntmaxError, StrictDataclassError) as error:
        message = str(error)
        if all(name in message for name in named):
            return Outcome(CLEAR, f"{type(error).__name__}: {first_line(message)}")
        return Outcome(TRACEBACK, f"{type(error).__name__} not naming {named}: {first_line(message)}")
    except Exception as error:
        return Outcome(TRACEBACK, f"{type(error).__name__}: {first_line(error)}")
    return Outcome(SILENT, "accepted")


# --- the probes' materials ---------------------------------------------------------------------------------------


def _contents(path: Path) -> dict[str, bytes] | bytes | None:
    if path.is_file():
        return path.read_bytes()
    if path.is_dir():
        return {str(item.relative_to(path)): item.read_bytes() if item.is_file() else b"/" for item in path.rglob("*")}
    return None


class FakeHfApi:
    """Records what `HfApi` would have been asked to do; ``error`` makes every call fail with it."""

    endpoint = "https://huggingface.co"

    def __init__(self, error: Exception | None = None):
        self.calls = []
        self.error = error

    def _call(self, name, **kwargs):
        self.calls.append((name, kwargs))
        if self.error is not None:
            raise self.error

    def create_repo(self, repo_id, **kwargs):
        self._call("create_repo", repo_id=repo_id, **kwargs)

    def create_branch(self, repo_id, **kwargs):
        self._call("create_branch", repo_id=repo_id, **kwargs)

    def upload_folder(self, **kwargs):
        self._call("upload_folder", **kwargs)
        return SimpleNamespace(commit_url="https://huggingface.co/someone/model/commit/abc", pr_url=None)


class NotATensor:
    """A pickled object that torch's ``weights_only`` loader refuses (it would run code from the file otherwise)."""

    def __reduce__(self):
        return (print, ("unpickled: this file ran code",))


@dataclass
class TrainedRuns:
    """Runs of `hf-entmax train` that the slow probes inspect (made once, read only)."""

    first: Path  # fresh, 4 steps, checkpoints at 2 and 4, --logging_steps 3 (the checkpoints log steps 2 and 4)
    resumed_midway: Path  # the first run's checkpoint-2 resumed to step 4 in another folder
    resumed_at_end: Path  # a copy of the first run resumed from its last checkpoint (step 4 of 4)
    frozen: Path  # fine-tuned from the first run's absolute path with --alpha_learning_rate 0


class Workbench:
    """Temporary folders, and the tiny models, folders and data that probes start from (made once, copied)."""

    def __init__(self, root: Path):
        self.root = root
        self._folders = 0
        self._kept: dict[Path, object] = {}

    def folder(self, name: str = "folder") -> Path:
        """A new empty folder."""
        self._folders += 1
        path = self.root / f"{self._folders:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def keep(self, *paths: Path) -> None:
        """Files or folders that must be unchanged when the probe ends."""
        for path in paths:
            self._kept[path] = _contents(path)

    def lost(self) -> list[str]:
        """The kept paths that changed since `keep`; forgets them."""
        changed = [str(path) for path, contents in self._kept.items() if _contents(path) != contents]
        self._kept.clear()
        return changed

    def write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    @cached_property
    def tokenizer(self):
        return train_joint_tokenizer(SENTENCES * 4, vocab_size=64)

    @cached_property
    def _hub_folders(self) -> dict[int, Path]:
        folders = {}
        for seed in (0, 1):
            folders[seed] = export_hub_folder(
                tiny_model(seed=seed, vocab_size=len(self.tokenizer), init_std=0.5),
                self.tokenizer,
                self.root / "cache" / f"hub-{seed}",
            )
        return folders

    def hub_folder(self, seed: int = 0) -> Path:
        """A fresh copy of a tiny Hub-ready AdaptiveEntmaxMarian folder (two different models by ``seed``)."""
        return Path(shutil.copytree(self._hub_folders[seed], self.folder("hub") / "model"))

    @cached_property
    def _marian_folder(self) -> Path:
        torch.manual_seed(0)
        config = MarianConfig(
            vocab_size=len(self.tokenizer), d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=64, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
            forced_eos_token_id=1,
        )  # fmt: skip
        folder = self.root / "cache" / "opus-mt-de-en"
        MarianMTModel(config).save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        return folder

    def marian_folder(self) -> Path:
        """A fresh copy of a tiny MarianMT folder (safetensors and tokenizer)."""
        return Path(shutil.copytree(self._marian_folder, self.folder("marian") / "opus-mt-de-en"))

    @cached_property
    def train_file(self) -> str:
        pairs = generate_pairs(48, seed=3)
        return str(self.write(self.root / "cache" / "train.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs)))

    def train_argv(self, output_dir: Path, *extra: str, fresh: bool = True) -> list[str]:
        """`hf-entmax train` on the tiny data into ``output_dir``; ``extra`` flags win over the defaults."""
        # A checkpoint has its own size and tokenizer: the flags of a fresh model would be refused with it.
        fresh_only = () if fresh else ("--model_size", "--vocab_size")
        pairs = zip(TRAIN_FAST[::2], TRAIN_FAST[1::2], strict=True)
        flags = [text for flag, value in pairs if flag not in fresh_only for text in (flag, value)]
        data = ["--train_file", self.train_file, "--source_lang", "en", "--target_lang", "syn"]
        return ["train", *data, *flags, "--output_dir", str(output_dir), *extra]

    # The other commands on fresh copies of the tiny folders; ``extra`` flags win over these.

    def translate_argv(self, *extra: str) -> list[str]:
        return ["translate", "--model", str(self.hub_folder()), "--input", self.sentences(), "--no-progress", *extra]

    def analyze_argv(self, *extra: str) -> list[str]:
        output = str(self.folder() / "analysis")
        return ["analyze", str(self.hub_folder()), "--source_file", self.sentences(), "--output", output, *extra]

    def convert_argv(self, *extra: str) -> list[str]:
        return ["convert", "--model", str(self.marian_folder()), "--output", str(self.folder() / "out"), *extra]

    def export_argv(self, *extra: str) -> list[str]:
        return ["export", "--model", str(self.hub_folder()), "--output", str(self.folder() / "out"), *extra]

    def sentences(self) -> str:
        return str(self.write(self.folder("text") / "sentences.txt", "\n".join(SENTENCES[:4]) + "\n"))

    @cached_property
    def runs(self) -> TrainedRuns:
        logged = ["--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2", "--logging_steps", "3"]
        first = self.root / "runs" / "first"
        self._train(self.train_argv(first, *logged))

        midway = self.root / "runs" / "midway"
        shutil.copytree(first / "checkpoint-2", midway / "checkpoint-2")
        for name in ("tokenizer.json", "tokenizer_config.json"):  # as the run wrote them before training
            shutil.copy(first / name, midway / name)
        self._train(self.train_argv(midway, *logged, "--resume_from_checkpoint", "true"))

        at_end = Path(shutil.copytree(first, self.root / "runs" / "at_end"))
        self._train(self.train_argv(at_end, *logged, "--resume_from_checkpoint", "true"))

        frozen = self.root / "runs" / "frozen"
        finetune = ["--model_name_or_path", str(first.resolve()), "--alpha_learning_rate", "0", "--logging_steps", "1"]
        self._train(self.train_argv(frozen, *finetune, fresh=False))
        return TrainedRuns(first=first, resumed_midway=midway, resumed_at_end=at_end, frozen=frozen)

    @staticmethod
    def _train(argv: list[str]) -> None:
        code, _, stderr = run_command(argv)
        if code != 0:
            raise RuntimeError(f"hf-entmax {' '.join(argv)} failed: {stderr[-2000:]}")


# --- the probes --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    item: int
    name: str
    description: str
    run: Callable[[Workbench], Outcome]
    expected: str  # CLEAR or DOCUMENTED
    slow: bool = False
    owned_by: str | None = None  # the tests that own this behaviour: the probe runs only for the table
    pending: str | None = None  # a known failure and where its fix belongs (a file of another engineer)


PROBES: list[Probe] = []


def probe(item: int, expected: str = CLEAR, *, slow: bool = False, owned_by: str | None = None, pending=None):
    """Register the decorated ``probe_<name>(bench) -> Outcome``; its docstring's first line describes it."""

    def register(function: Callable[[Workbench], Outcome]) -> Callable[[Workbench], Outcome]:
        description = function.__doc__.strip().splitlines()[0]
        name = function.__name__.removeprefix("probe_")
        PROBES.append(Probe(item, name, description, function, expected, slow, owned_by, pending))
        return function

    return register


def register_config_probes(item: int, values: dict[str, dict]) -> None:
    """One probe of ``item`` per entry of ``values`` (``{name: {field: value, …}}``): the config built with those
    fields must be refused, naming the first field."""

    def refused(fields: dict) -> Callable[[Workbench], Outcome]:
        return lambda bench: api(lambda: tiny_config(**fields), next(iter(fields)))

    for name, fields in values.items():
        description = "AdaptiveEntmaxMarianConfig(" + ", ".join(f"{key}={value!r}" for key, value in fields.items())
        PROBES.append(Probe(item, f"config_{name}", description + ")", refused(fields), CLEAR))


# --- running the probes -----------------------------------------------------------------------------------------


def run_probe(item: Probe, bench: Workbench) -> Outcome:
    """Run one probe; an exception escaping it is a traceback, and a kept file that changed is data lost."""
    try:
        outcome = item.run(bench)
    except Exception as error:
        outcome = Outcome(TRACEBACK, f"{type(error).__name__}: {first_line(error)}")
    if lost := bench.lost():
        outcome = Outcome(LOST, f"changed: {', '.join(lost)} ({outcome.kind}: {outcome.detail})")
    return outcome


@contextlib.contextmanager
def hub_enabled():
    """The Hub switched on, as on a machine with network (the probes' Hub client is a fake)."""
    offline = constants.HF_HUB_OFFLINE
    saved = os.environ.pop("HF_HUB_OFFLINE", None)
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = offline
        if saved is not None:
            os.environ["HF_HUB_OFFLINE"] = saved


def push(folder: Path, hub: FakeHfApi | None = None) -> FakeHfApi:
    """`push_folder` of ``folder`` to someone/model through a fake Hub client (no load check); returns the client."""
    hub = hub or FakeHfApi()
    with hub_enabled():
        push_folder(folder, "someone/model", token="hf_x", api=hub, check_load=False)
    return hub


@contextlib.contextmanager
def offline_environment():
    """What every probe runs under: no Hub access, no debug tracebacks, no tokenizer threads."""
    saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "HF_ENTMAX_DEBUG", "TOKENIZERS_PARALLELISM")}
    offline = constants.HF_HUB_OFFLINE
    os.environ.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    os.environ.pop("HF_ENTMAX_DEBUG", None)
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = offline
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- the table ---------------------------------------------------------------------------------------------------


def reliability_table(results: list[tuple[Probe, Outcome]]) -> str:
    """Markdown: the counts of outcomes per item of the issue, then every probe with its outcome."""
    header = "| Item | Probes | " + " | ".join(kind.capitalize() for kind in OUTCOMES) + " |"
    lines = [header, "|" + "---|" * (len(OUTCOMES) + 2)]
    totals = Counter()
    for number, title in ITEMS.items():
        counts = Counter(outcome.kind for item, outcome in results if item.item == number)
        totals.update(counts)
        cells = " | ".join(str(counts[kind]) for kind in OUTCOMES)
        lines.append(f"| {number}. {title} | {sum(counts.values())} | {cells} |")
    cells = " | ".join(f"**{totals[kind]}**" for kind in OUTCOMES)
    lines.append(f"| **All** | **{sum(totals.values())}** | {cells} |")

    lines += ["", "| Item | Probe | Expected | Outcome |", "|---|---|---|---|"]
    for item, outcome in sorted(results, key=lambda result: result[0].item):
        note = f" (pending: {item.pending})" if item.pending and outcome.kind != item.expected else ""
        mark = "" if outcome.kind == item.expected else " ✗"
        lines.append(
            f"| {item.item} | {item.description.replace('|', '/')} | {item.expected} | {outcome.kind}{mark}{note} |"
        )
    return "\n".join(lines)
