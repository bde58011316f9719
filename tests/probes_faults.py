"""Reliability probes of item 12 (disk, permission, encoding and signal faults: one line) for the commands that
write translations, training runs and reports; registered on import by tests/test_reliability.py. The Hub side's
faults (export, push) are probed in tests/probes_leaks.py.
"""

import errno
import os
import shutil
from pathlib import Path
from unittest import mock

from probing import DOCUMENTED, PROGRESS_BAR, cli, documented, probe, run_command


ITEM = 12


def unwritable_folder(bench) -> Path:
    """A folder this process cannot create files in: one with no write permission, or, where permissions do not
    bind (as root), /sys, which refuses new files to everyone."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = bench.folder("read-only")
    folder.chmod(0o555)
    return folder


def read_only_file_system(*_args, **_kwargs):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


@probe(ITEM)
def probe_translate_output_dev_full(bench):
    """translate --output /dev/full (every write fails: no space left)"""
    return cli(bench.translate_argv("--output", "/dev/full"), "--output", "/dev/full", "no space")


@probe(ITEM)
def probe_translate_output_under_a_file(bench):
    """translate --output: a path whose parent is a file"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(bench.translate_argv("--output", str(file / "out.txt")), "--output", str(file), "is a file")


@probe(ITEM)
def probe_translate_output_in_an_unwritable_folder(bench):
    """translate --output: a file in a folder that cannot be written (permissions)"""
    output = unwritable_folder(bench) / "out.txt"
    return cli(bench.translate_argv("--output", str(output)), "--output", str(output))


@probe(ITEM)
def probe_translate_output_on_a_read_only_file_system(bench):
    """translate --output on a read-only file system (EROFS): one line, before the model loads"""
    output = bench.folder() / "out.txt"
    with mock.patch("hf_entmax.common.outputs.tempfile.mkstemp", side_effect=read_only_file_system):
        return cli(bench.translate_argv("--output", str(output)), "--output", "read-only")


@probe(ITEM, DOCUMENTED)
def probe_translate_output_disk_full_keeps_the_earlier_file(bench):
    """translate --output over an earlier translation, the disk full while writing: one line, the earlier file kept"""
    output = bench.write(bench.folder() / "out.txt", "an earlier translation\n")
    bench.keep(output)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with mock.patch("hf_entmax.common.outputs.os.replace", side_effect=full):
        code, _, stderr = run_command(bench.translate_argv("--output", str(output)))
    lines = [line for line in stderr.splitlines() if line.strip()]
    leftovers = [path.name for path in output.parent.iterdir() if path != output]
    ok = code == 1 and len(lines) == 1 and "no space" in lines[0] and "unchanged" in lines[0] and not leftovers
    return documented(ok, f"exit code {code}: {' | '.join(lines)[:200]}; left {leftovers}")


@probe(ITEM)
def probe_translate_metrics_file_dev_full(bench):
    """translate --metrics_file /dev/full"""
    reference = bench.write(bench.folder() / "reference.txt", "a\nb\nc\nd\n")
    output = bench.folder() / "out.txt"  # the scores then go to standard output, errors alone to standard error
    argv = bench.translate_argv("--reference", str(reference), "--output", str(output), "--metrics_file", "/dev/full")
    return cli(argv, "--metrics_file", "no space")


@probe(ITEM, DOCUMENTED)
def probe_translate_interrupted_while_loading(bench):
    """translate stopped by Ctrl-C before any line is done: exit 130, one line, the earlier --output unchanged"""
    output = bench.write(bench.folder() / "out.txt", "an earlier translation\n")
    bench.keep(output)
    with mock.patch("hf_entmax.commands.translate.load_translation_model", side_effect=KeyboardInterrupt):
        code, _, stderr = run_command(bench.translate_argv("--output", str(output)))
    lines = [line for line in stderr.splitlines() if line.strip()]
    leftovers = [path.name for path in output.parent.iterdir() if path != output]
    ok = code == 130 and lines == ["hf-entmax translate: interrupted: nothing was translated yet"] and not leftovers
    return documented(ok, f"exit code {code}: {' | '.join(lines)[:200]}; left {leftovers}")


@probe(ITEM)
def probe_train_output_dir_in_an_unwritable_folder(bench):
    """train --output_dir: a folder inside one that cannot be written (permissions)"""
    folder = unwritable_folder(bench) / "run"
    return cli(bench.train_argv(folder), "--output_dir", str(folder))


@probe(ITEM)
def probe_train_output_dir_on_a_read_only_file_system(bench):
    """train --output_dir on a read-only file system (EROFS)"""
    folder = bench.folder() / "run"
    with mock.patch("pathlib.Path.mkdir", side_effect=read_only_file_system):
        return cli(bench.train_argv(folder), "--output_dir", str(folder), "read-only")


@probe(ITEM)
def probe_analyze_output_under_a_file(bench):
    """analyze --output: a path whose parent is a file"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(bench.analyze_argv("--output", str(file / "analysis"), "--no-progress"), str(file))


@probe(ITEM)
def probe_analyze_output_in_an_unwritable_folder(bench):
    """analyze --output: a folder inside one that cannot be written (permissions)"""
    output = unwritable_folder(bench) / "analysis"
    return cli(bench.analyze_argv("--output", str(output), "--no-progress"), str(output))


@probe(ITEM, DOCUMENTED)
def probe_convert_interrupted(bench):
    """convert stopped by Ctrl-C: exit 130 and one line, nothing written"""
    argv = bench.convert_argv("--no-check_load")
    output = Path(argv[argv.index("--output") + 1])
    with mock.patch("hf_entmax.commands.convert.convert_marian", side_effect=KeyboardInterrupt):
        code, _, stderr = run_command(argv)
    lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    ok = code == 130 and lines == ["hf-entmax convert: interrupted"] and not output.exists()
    return documented(ok, f"exit code {code}: {' | '.join(lines)[:200]}")


@probe(ITEM)
def probe_os_error_no_command_foresaw(bench):
    """an OSError no command foresaw (too many open files, while reading the model): one line naming it"""
    error = OSError(errno.EMFILE, os.strerror(errno.EMFILE), "model.safetensors")
    with mock.patch("hf_entmax.commands.translate.load_translation_model", side_effect=error):
        return cli(bench.translate_argv(), "model.safetensors", "too many open files")


@probe(ITEM, DOCUMENTED)
def probe_debug_shows_the_traceback(bench):
    """HF_ENTMAX_DEBUG=1: an OSError no command foresaw raises with its traceback instead of one line"""
    error = OSError(errno.EMFILE, os.strerror(errno.EMFILE), "model.safetensors")
    with (
        mock.patch("hf_entmax.commands.translate.load_translation_model", side_effect=error),
        mock.patch.dict(os.environ, {"HF_ENTMAX_DEBUG": "1"}),
    ):
        try:
            run_command(bench.translate_argv())
        except OSError as raised:
            return documented(raised is error, f"raised {raised!r}")
    return documented(False, "nothing raised")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_staging_leftovers_of_a_killed_run(bench):
    """train into an earlier run's folder holding a killed run's staging folder: trains, leaves no staging folder"""
    folder = Path(shutil.copytree(bench.runs.first, bench.folder("killed") / "run"))
    bench.write(folder / ".hf_entmax_staging" / "model.safetensors", "cut off")
    code, _, stderr = run_command(bench.train_argv(folder))
    ok = code == 0 and not (folder / ".hf_entmax_staging").exists()
    return documented(ok, f"exit code {code}: {stderr[-200:]}")
