"""`hf-entmax push`: everything up to the network call runs for real; the Hub client is a recording fake
(and, once, the real client pointed at a closed local port)."""

import fnmatch
import importlib
import json
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import tiny_model
from huggingface_hub import constants
from huggingface_hub.errors import HfHubHTTPError, Response

from hf_entmax.cli import main
from hf_entmax.common.outputs import OWN_ENTRIES
from hf_entmax.errors import HfEntmaxError, HfEntmaxFileNotFoundError, HfEntmaxValueError
from hf_entmax.hub import export_hub_folder, push_folder
from hf_entmax.hub.push import HubTransportError
from hf_entmax.hub.repo_files import looks_private, select_upload_files


class FakeHfApi:
    """Records what `HfApi` would have been asked to do; ``upload_error`` makes the upload fail."""

    endpoint = "https://huggingface.co"

    def __init__(self, upload_error: Exception | None = None):
        self.calls = []
        self.upload_error = upload_error

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def create_branch(self, repo_id, **kwargs):
        self.calls.append(("create_branch", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs["repo_id"], kwargs))
        if self.upload_error is not None:
            raise self.upload_error
        pr_url = "https://huggingface.co/someone/model/discussions/1" if kwargs["create_pr"] else None
        return SimpleNamespace(commit_url="https://huggingface.co/someone/model/commit/abc123", pr_url=pr_url)


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("push") / "hub"
    return export_hub_folder(tiny_model(vocab_size=len(tokenizer), init_std=0.5), tokenizer, folder)


@pytest.fixture
def online(monkeypatch):
    """A token in HF_TOKEN and the Hub not disabled, whatever the machine running the tests has set."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")


def http_error(status: int) -> HfHubHTTPError:
    request_url = "https://huggingface.co/api/models/someone/model/preupload/main"
    http = importlib.import_module(Response.__module__.split(".")[0])  # the HTTP library huggingface_hub uses
    response = Response(status, request=http.Request("POST", request_url))
    return HfHubHTTPError(f"{status} Client Error for url: {request_url}", response=response)


@pytest.mark.slow
def test_uploads_exactly_the_checked_folder(hub_folder, online):
    api = FakeHfApi()
    url = push_folder(hub_folder, "someone/model", private=True, revision="v1", api=api)  # with the real load check

    assert url == "https://huggingface.co/someone/model/commit/abc123"
    assert [(name, repo) for name, repo, _ in api.calls] == [
        ("create_repo", "someone/model"),
        ("create_branch", "someone/model"),
        ("upload_folder", "someone/model"),
    ]
    assert api.calls[0][2] == {"token": "hf_test_token", "private": True, "repo_type": "model", "exist_ok": True}
    assert api.calls[1][2]["branch"] == "v1"
    upload = api.calls[2][2]
    assert upload["folder_path"] == hub_folder
    assert (upload["revision"], upload["create_pr"], upload["token"]) == ("v1", False, "hf_test_token")
    assert upload["allow_patterns"] == sorted(
        path.name for path in hub_folder.iterdir() if path.name not in OWN_ENTRIES
    )
    assert {"model.safetensors", "config.json", "README.md", "modeling_adaptive_entmax_marian.py"} <= set(
        upload["allow_patterns"]
    )


def test_a_pull_request_returns_its_url(hub_folder, online):
    api = FakeHfApi()
    url = push_folder(hub_folder, "someone/model", create_pr=True, api=api, check_load=False)
    assert url == "https://huggingface.co/someone/model/discussions/1"
    assert [name for name, _, _ in api.calls] == ["create_repo", "upload_folder"]  # no branch for a PR
    assert api.calls[1][2]["create_pr"] is True


def add_training_leftovers(folder: Path) -> dict[str, list[str]]:
    """Make ``folder`` look like an `hf-entmax train` output: a checkpoint, pickled training state, the run's
    records, a figure the card shows, and things that must never reach the Hub. Returns the added paths by fate."""
    uploaded = {
        "training_summary.json": json.dumps({"model_name": "hub"}).encode(),
        "alpha_history.json": b"[]",
        "all_results.json": b"{}",
        "trainer_state.json": b"{}",
        "generated_predictions.txt": b"a translation\n",
        "figures/alpha.png": b"\x89PNG alpha",  # shown by the card (below)
    }
    skipped = {
        "checkpoint-2/optimizer.pt": b"pickle",
        "checkpoint-2/scheduler.pt": b"pickle",
        "checkpoint-2/rng_state.pth": b"pickle",
        "checkpoint-2/training_args.bin": b"pickle",
        "checkpoint-2/trainer_state.json": b"{}",
        "checkpoint-2/model.safetensors": (folder / "model.safetensors").read_bytes(),
        "training_args.bin": b"pickle",
        ".env": b"HF_TOKEN=hf_do_not_upload",
        ".ssh/id_ed25519": b"-----BEGIN OPENSSH PRIVATE KEY-----",
        ".git/config": b"[core]",
        "notes.txt": b"try a larger alpha learning rate",
        "sweep.py": b"import os",  # code the config does not load
        "figures/draft.png": b"\x89PNG draft",  # not shown by the card
    }
    for name, content in {**uploaded, **skipped}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![α per head](figures/alpha.png)\n")
    return {"uploaded": list(uploaded), "skipped": list(skipped)}


@pytest.mark.slow
def test_a_training_output_uploads_only_the_model_files(hub_folder, tmp_path, online, monkeypatch, capsys):
    folder = shutil.copytree(hub_folder, tmp_path / "trained")
    added = add_training_leftovers(folder)
    api = FakeHfApi()
    monkeypatch.setattr("hf_entmax.hub.push.HfApi", lambda: api)
    # The real load check: it loads only the selected files, so it proves the selection is a complete model.
    assert main(["push", str(folder), "--repo_id", "someone/model"]) == 0

    model_files = (path.name for path in hub_folder.iterdir() if path.name not in OWN_ENTRIES)
    expected = sorted([*model_files, *added["uploaded"]])
    assert api.calls[-1][2]["allow_patterns"] == expected
    uploading, skipped, pushed = capsys.readouterr().out.splitlines()
    assert uploading == f"Uploading {len(expected)} files from {folder}: {', '.join(expected)}"
    assert skipped == (
        f"Skipped {len(added['skipped'])} files (not part of a model repository): .env, .git/ (1 file), "
        ".ssh/ (1 file), checkpoint-2/ (6 files), figures/ (1 file), notes.txt, sweep.py, training_args.bin"
    )
    assert pushed.startswith(f"Pushed {folder} to someone/model: ")


def test_file_names_are_uploaded_literally(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "figures").mkdir()
    (folder / "figures" / "heads[1].png").write_bytes(b"\x89PNG")
    (folder / "figures" / "heads1.png").write_bytes(b"\x89PNG")  # what the unescaped pattern would match
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write('\n<img src="figures/heads[1].png" width="400">\n')
    api = FakeHfApi()
    push_folder(folder, "someone/model", api=api, check_load=False)
    patterns = api.calls[-1][2]["allow_patterns"]
    assert "figures/heads[[]1].png" in patterns
    assert [name for name in ("figures/heads[1].png", "figures/heads1.png") if any(
        fnmatch.fnmatch(name, pattern) for pattern in patterns)] == ["figures/heads[1].png"]  # fmt: skip


def test_refuses_pickled_weights(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    api = FakeHfApi()
    with pytest.raises(HfEntmaxValueError, match=r"pytorch_model.bin would be unpickled .* `hf-entmax export"):
        push_folder(folder, "someone/model", api=api)
    assert api.calls == []


def test_refuses_a_card_that_shows_a_missing_figure(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![heads](figures/missing.png)\n")
    with pytest.raises(HfEntmaxFileNotFoundError, match=r"README.md shows figures/missing.png, which is not in"):
        push_folder(folder, "someone/model", api=FakeHfApi())


def test_refuses_a_folder_whose_code_file_is_missing(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "entmax.py").unlink()  # the modeling file imports it
    api = FakeHfApi()
    with pytest.raises(HfEntmaxFileNotFoundError, match=r"its config needs entmax.py, which is missing"):
        push_folder(folder, "someone/model", api=api)
    assert api.calls == []


@pytest.mark.slow
def test_refuses_a_folder_that_does_not_load_without_hf_entmax(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    modeling = folder / "modeling_adaptive_entmax_marian.py"
    modeling.write_text("import hf_entmax  # a dependency the Hub user does not have\n" + modeling.read_text())
    api = FakeHfApi()
    with pytest.raises(HfEntmaxValueError, match=r"refusing to upload: .* does not load without hf_entmax") as error:
        push_folder(folder, "someone/model", api=api)
    assert "\n" not in str(error.value)
    assert api.calls == []


def test_a_bad_repo_id_is_a_one_line_error_before_anything_else(hub_folder, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the repo id is checked first, whatever else is wrong
    assert main(["push", str(hub_folder), "--repo_id", "someone/my model"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "--repo_id 'someone/my model' is not a Hub repo id (expected user/name" in captured.err
    with pytest.raises(HfEntmaxValueError, match="--repo_id 'someone/team/model' is not a Hub repo id"):
        push_folder(hub_folder, "someone/team/model", api=FakeHfApi())


def test_offline_is_a_one_line_error(hub_folder, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["push", str(hub_folder), "--repo_id", "someone/model"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "HF_HUB_OFFLINE=1" in error


def test_no_token_is_a_one_line_error_that_says_how_to_log_in(hub_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert main(["push", str(hub_folder), "--repo_id", "someone/model"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no Hugging Face token found" in error and "hf auth login" in error


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_token_is_a_one_line_error(hub_folder, online, status):
    api = FakeHfApi(upload_error=http_error(status))
    with pytest.raises(HfEntmaxError, match=f"the Hub rejected the token \\(HTTP {status}\\)") as error:
        push_folder(hub_folder, "someone/model", api=api, check_load=False)
    assert "\n" not in str(error.value)


def test_unreachable_hub_and_other_http_errors_are_one_line_errors(hub_folder, online):
    with pytest.raises(HfEntmaxError, match="could not reach the Hub"):
        push_folder(
            hub_folder, "someone/model", api=FakeHfApi(ConnectionError("Name resolution failed")), check_load=False
        )
    with pytest.raises(HfEntmaxError, match=r"could not reach the Hub at https://huggingface.co \(timed out\)"):
        push_folder(hub_folder, "someone/model", api=FakeHfApi(HubTransportError("timed out")), check_load=False)
    with pytest.raises(HfEntmaxError, match="the Hub answered HTTP 500"):
        push_folder(hub_folder, "someone/model", api=FakeHfApi(http_error(500)), check_load=False)


def test_a_closed_hub_endpoint_is_a_one_line_error(hub_folder, online, monkeypatch, capsys):
    """The real Hub client against a port nobody listens on (HF_ENDPOINT, which huggingface_hub reads at import)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr("hf_entmax.hub.push.check_folder_loads", lambda folder, files: 0.0)  # tested above
    assert main(["push", str(hub_folder), "--repo_id", "someone/model"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"hf-entmax push: error: cannot push: could not reach the Hub at {endpoint} (")


def test_push_command_reports_the_commit(hub_folder, online, monkeypatch, capsys):
    api = FakeHfApi()
    monkeypatch.setattr("hf_entmax.hub.push.HfApi", lambda: api)
    monkeypatch.setattr("hf_entmax.hub.push.check_folder_loads", lambda folder, files: 0.0)  # tested above
    assert main(["push", str(hub_folder), "--repo_id", "someone/model", "--private", "--create_pr"]) == 0
    output = capsys.readouterr().out.splitlines()
    assert output[1] == "Skipped nothing: every file in the folder belongs in a model repository"
    assert output[2] == f"Pushed {hub_folder} to someone/model: https://huggingface.co/someone/model/discussions/1"
    assert api.calls[0][2]["private"] is True and api.calls[-1][2]["create_pr"] is True


# Every file name a model repository of this family (and of Marian, T5, BERT, GPT-2, Llama) holds.
MODEL_FILE_NAMES = [
    "config.json", "generation_config.json", "model.safetensors", "model-00001-of-00002.safetensors",
    "model.safetensors.index.json", "sparsefinder.safetensors", "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "spiece.model",
    "sentencepiece.bpe.model", "source.spm", "target.spm", "vocab.json", "vocab.txt", "target_vocab.json",
    "merges.txt", "README.md", "LICENSE", "LICENSE.md", "training_summary.json", "alpha_history.json",
    "all_results.json", "eval_results.json", "trainer_state.json", "generated_predictions.txt",
    "configuration_adaptive_entmax_marian.py", "modeling_adaptive_entmax_marian.py", "entmax.py",
    "pipeline_translation.py", "sparsefinder_attention.py", "analysis/alpha_heatmap.png",
    "analysis/density_heatmap.png", "analysis/js_divergence.png", "analysis/alpha_trajectories.png",
]  # fmt: skip
PRIVATE_NAMES = [
    "id_rsa", "id_rsa.model", "id_ed25519.pub", "server.pem", "tls.key", ".env", ".env.local", ".netrc", "_netrc",
    ".git-credentials", "credentials.json", "aws_credentials_vocab.txt", ".secrets_vocab.json", "hf_token.model",
    "TOKEN.txt", "password.spm", "db_passwd.json", "openai_api_key.txt", "keys/id_ecdsa.png", ".ssh/config",
    "client.p12",
]  # fmt: skip


def test_no_model_file_looks_private_and_credentials_do():
    assert [name for name in MODEL_FILE_NAMES if looks_private(name)] == []
    assert [name for name in PRIVATE_NAMES if not looks_private(name)] == []


def test_links_are_refused_and_linked_folders_listed_unfollowed(hub_folder, tmp_path, online):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.txt").write_text("hf_secret")
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "runs").symlink_to(outside, target_is_directory=True)  # not selected: skipped, never walked into
    selection = select_upload_files(folder)
    assert "runs" in selection.skipped and not [name for name in selection.skipped if name.startswith("runs/")]

    (folder / "vocab.json").symlink_to(outside / "deep" / "secret.txt")
    api = FakeHfApi()
    with pytest.raises(HfEntmaxValueError, match=r"vocab.json is a symbolic link \(to .*secret.txt\); only the fo"):
        push_folder(folder, "someone/model", api=api, check_load=False)
    assert api.calls == []


def test_a_private_name_is_refused_before_anything_is_read(hub_folder, tmp_path, online):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "id_rsa.model").write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    api = FakeHfApi()
    with pytest.raises(HfEntmaxValueError, match=r"id_rsa.model is named like a hidden file or a credential"):
        push_folder(folder, "someone/model", api=api)
    assert api.calls == []


def test_a_card_that_is_not_utf8_is_one_line(hub_folder, tmp_path, online, capsys):
    folder = shutil.copytree(hub_folder, tmp_path / "hub")
    (folder / "README.md").write_bytes("# Modèle\n".encode("latin-1"))
    assert main(["push", str(folder), "--repo_id", "someone/model"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "README.md is not UTF-8 text (byte 0xe8 at offset 5); save it as UTF-8" in error
