"""Where commands write (hf_entmax.common.outputs): output folders held with a marker and a lock, files written
under a temporary name, failed writes as one line; and a real full disk (a small tmpfs, where this machine lets
the tests mount one)."""

import errno
import json
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from filelock import FileLock

from hf_entmax.cli import main
from hf_entmax.common.outputs import (
    LOCK_FILE,
    MARKER_FILE,
    check_output_folder,
    claimed_output_folder,
    format_size,
    line_output,
    same_file,
    write_failure_error,
    write_text_atomically,
    written_by,
)
from hf_entmax.errors import HfEntmaxValueError, HfEntmaxWriteError, describe_os_error


def test_a_folder_is_claimed_once_and_marked(tmp_path):
    folder = tmp_path / "run"
    with claimed_output_folder(folder, "train", "--output_dir"):
        assert written_by(folder) == "train"
        # The same process may claim it again (the CLI around the Python API); another holder is refused.
        with claimed_output_folder(folder, "train", "--output_dir"):
            pass
    with FileLock(folder / LOCK_FILE, timeout=0), pytest.raises(HfEntmaxValueError, match="another hf-entmax"):
        with claimed_output_folder(folder, "train", "--output_dir"):
            pass
    (folder / "model.safetensors").write_bytes(b"weights")
    check_output_folder(folder, "train", "--output_dir")  # an earlier run's: accepted
    with pytest.raises(HfEntmaxValueError, match="the output of hf-entmax train"):
        check_output_folder(folder, "export", "--output")


def test_a_foreign_folder_is_refused_unless_overwrite(tmp_path):
    (tmp_path / "README.md").write_text("mine\n")
    with pytest.raises(
        HfEntmaxValueError, match=r"not from an earlier hf-entmax train \(README.md\).*--overwrite_output_dir"
    ):
        check_output_folder(tmp_path, "train", "--output_dir")
    check_output_folder(tmp_path, "train", "--output_dir", overwrite=True)
    check_output_folder(tmp_path, "train", "--output_dir", earlier_output=lambda folder: True)
    (tmp_path / MARKER_FILE).write_text("not json")  # a marker that is not ours names no command
    assert written_by(tmp_path) is None


def test_same_file_sees_links(tmp_path):
    original = tmp_path / "a.txt"
    original.write_text("a\n")
    os.link(original, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(original)
    assert same_file(original, tmp_path / "hard.txt") and same_file(original, tmp_path / "soft.txt")
    assert same_file(original, tmp_path / "." / "a.txt")
    assert not same_file(original, tmp_path / "other.txt")


def test_line_output_replaces_only_when_done(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("earlier\n")
    with pytest.raises(RuntimeError), line_output(path) as output:
        output.write("half")
        raise RuntimeError("a failure on the way")
    assert path.read_text() == "earlier\n" and sorted(os.listdir(tmp_path)) == ["out.txt"]
    with pytest.raises(KeyboardInterrupt), line_output(path) as output:
        output.write("line 1\n")
        raise KeyboardInterrupt
    assert path.read_text() == "line 1\n"  # what was done before Ctrl-C is kept
    write_text_atomically(path, "new\n")
    assert path.read_text() == "new\n" and sorted(os.listdir(tmp_path)) == ["out.txt"]
    # The mode a plain open gives (not mkstemp's private 0600), or the replaced file's.
    umask = os.umask(0)
    os.umask(umask)
    write_text_atomically(tmp_path / "new.txt", "new\n")
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o666 & ~umask
    path.chmod(0o640)
    write_text_atomically(path, "newer\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_line_output_writes_devices_in_place():
    with line_output(Path("/dev/null")) as output:
        output.write("nothing\n")
    assert Path("/dev/null").is_char_device()
    with pytest.raises(HfEntmaxWriteError, match="--output /dev/full: writing failed, no space left"):
        with line_output(Path("/dev/full"), "--output") as output:
            output.write("x" * 100_000)
    assert Path("/dev/full").is_char_device()


def test_write_failures_are_one_line(tmp_path):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "model.safetensors"))
    message = str(write_failure_error(full, tmp_path, "--output_dir", needed_bytes=3_000_000))
    assert message.startswith(f"--output_dir {tmp_path}: writing failed, no space left on the device (")
    assert "about 3.0 MB needed" in message and "\n" not in message
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    free = shutil.disk_usage(tmp_path).free
    assert "no space left" in str(write_failure_error(torch_error, tmp_path, "--output_dir", free + 1))
    assert "no space left" not in str(write_failure_error(torch_error, tmp_path, "--output_dir", 1))
    assert describe_os_error(OSError(errno.EROFS, "Read-only file system", "/x")) == "/x: the file system is read-only"
    assert [format_size(size) for size in (5, 1234, 12_345_678)] == ["5 bytes", "1.2 kB", "12.3 MB"]


@pytest.fixture
def small_disk(tmp_path):
    """A 64 kB tmpfs: room for a tokenizer, not for a model. Needs the right to mount (root on Linux)."""
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


@pytest.mark.slow
def test_a_full_disk_while_training_is_one_line(small_disk, train_file, capsys):
    output = small_disk / "run"
    argv = ["train", "--train_file", train_file, "--source_lang", "en", "--target_lang", "syn", "--model_size", "tiny"]
    argv += ["--vocab_size", "100", "--max_steps", "2", "--save_strategy", "no", "--report_to", "none"]
    assert main([*argv, "--output_dir", str(output), "--disable_tqdm", "True"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-entmax")]
    assert len(lines) == 1 and f"--output_dir {output}: writing failed, no space left on the device (" in lines[0]
    assert not (output / ".hf_entmax_staging").exists()


def test_a_full_disk_while_translating_keeps_the_earlier_file(small_disk):
    path = small_disk / "out.txt"
    path.write_text("earlier\n")
    with pytest.raises(HfEntmaxWriteError, match=r"no space left.*the file there before is unchanged"):
        with line_output(path, "--output") as output:
            for _ in range(1000):
                output.write("a translation that fills the disk\n" * 10)
    assert path.read_text() == "earlier\n" and json.dumps(os.listdir(small_disk)) == '["out.txt"]'


@pytest.fixture
def train_file(tmp_path):
    from hf_entmax.training.synthetic import generate_pairs

    path = tmp_path / "train.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in generate_pairs(48, seed=3)))
    return str(path)
