"""Reliability probes of item 11 (nothing leaked: what export copies, what push uploads and prints, what the card's
metadata holds, what the load check's child can read) and of item 12 for the Hub side (a full disk or a read-only
folder during export, text files that are not UTF-8); registered on import by tests/test_reliability.py.

The secrets here are made by the probes (a fake ``passwd``, a fake token); nothing of this machine is read.
"""

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

from huggingface_hub import ModelCard
from probing import DOCUMENTED, FakeHfApi, api, cli, documented, hub_enabled, probe, push, run_command
from safetensors import SafetensorError

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.common.outputs import OWN_ENTRIES
from hf_entmax.hub import ModelCardInfo, export_hub_folder, push_folder
from hf_entmax.hub.repo_files import select_upload_files
from hf_entmax.modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES


SECRET = "hf_probe_secret_0123456789"
# The metadata keys of an exported card with languages and a model-index (which holds the model name).
CARD_KEYS = {"language", "library_name", "license", "model-index", "pipeline_tag", "tags"}
# What real libraries raise on a full disk (measured): safetensors' writer, and a plain write.
SAFETENSORS_DISK_FULL = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
TORCH_DISK_FULL = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def _secret_file(bench, name: str = "passwd") -> Path:
    """A file outside every folder the probe publishes, holding `SECRET`."""
    return bench.write(bench.folder("outside") / name, f"root:{SECRET}\n")


def _analysis(bench, figures: dict[str, str]) -> Path:
    """An `hf-entmax analyze` report folder of the bench's model whose report.json names ``figures`` (name: file);
    the figure files are the probe's to make."""
    alphas = AdaptiveEntmaxMarianMTModel.from_pretrained(bench.hub_folder()).get_alphas()
    summary = {
        "mean_alpha": 1.5, "min_alpha": 1.2, "max_alpha": 1.8, "mean_density": 0.5, "mean_js_divergence": 0.1,
        "heads": 4, "near_sparsemax_heads": 1, "low_density_heads": 2, "positional_heads": 0, "subword_heads": 0,
    }  # fmt: skip
    model = {
        "name": "model",
        "num_sentences": 4,
        "findings": ["Heads differ."],
        "attention": {kind: {"alpha": alphas[kind].tolist()} for kind in ATTENTION_TYPES},
        "summary": dict.fromkeys(ATTENTION_TYPES, summary),
    }
    folder = bench.folder("analysis") / "analysis"
    bench.write(folder / "report.json", json.dumps({"sample": "sentences.txt", "models": [model], "figures": figures}))
    return folder


def _export(bench, *extra: str) -> list[str]:
    """`hf-entmax export` of the bench's model, without the load check (the probes that need it say so)."""
    return bench.export_argv("--no-check_load", *extra)


def _model_with_summary(bench, **summary) -> Path:
    """The bench's model with a training_summary.json of ``summary`` (de→en, a dataset and scores by default)."""
    folder = bench.hub_folder()
    defaults = {
        "source_lang": "de",
        "target_lang": "en",
        "data": "bentrevett/multi30k",
        "metrics": {"eval_bleu": 30.5, "eval_chrf": 55.25},
    }
    bench.write(folder / "training_summary.json", json.dumps({**defaults, **summary}))
    return folder


def _card_metadata(folder: Path) -> dict:
    return ModelCard.load(folder / "README.md").data.to_dict()


def _uploaded(hub: FakeHfApi) -> list[str]:
    return hub.calls[-1][1]["allow_patterns"]


@contextlib.contextmanager
def _environment(**values: str):
    """This process's environment with ``values`` set, restored afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# Item 11: export copies only files of the folders it reads, and writes only into its output.


@probe(11)
def probe_export_analysis_figure_by_absolute_path(bench):
    """export --analysis: report.json names a figure by an absolute path (any file on the machine)"""
    secret = _secret_file(bench, "private.png")
    analysis = _analysis(bench, {"alpha_heatmap": str(secret)})
    return cli(_export(bench, "--analysis", str(analysis)), "report.json", "not a path inside")


@probe(11)
def probe_export_analysis_figure_climbing_out(bench):
    """export --analysis: a figure named ../../x.png (it would be written outside the output folder)"""
    analysis = _analysis(bench, {"alpha_heatmap": "../../x.png"})
    bench.write(analysis.parent.parent / "x.png", "a picture of the report's grandparent\n")
    argv = _export(bench, "--analysis", str(analysis))
    # Where the copy would land: two levels above the card's analysis/ folder, i.e. next to the output folder.
    target = Path(argv[argv.index("--output") + 1]).parent / "x.png"
    bench.write(target, "mine, next to the output folder\n")
    bench.keep(target)
    return cli(argv, "report.json", "../../x.png")


@probe(11)
def probe_export_analysis_figure_is_a_link_out(bench):
    """export --analysis: a figure of the report folder is a symbolic link to a file outside it"""
    analysis = _analysis(bench, {"alpha_heatmap": "alpha_heatmap.png"})
    (analysis / "alpha_heatmap.png").symlink_to(_secret_file(bench, "private.png"))
    return cli(_export(bench, "--analysis", str(analysis)), "alpha_heatmap.png", "symbolic link")


@probe(11)
def probe_export_analysis_figure_under_a_linked_folder(bench):
    """export --analysis: a figure under a subfolder that is a symbolic link to a folder outside"""
    analysis = _analysis(bench, {"alpha_heatmap": "plots/alpha_heatmap.png"})
    (analysis / "plots").symlink_to(_secret_file(bench, "alpha_heatmap.png").parent)
    return cli(_export(bench, "--analysis", str(analysis)), "plots", "symbolic link")


@probe(11)
def probe_export_analysis_figure_name_not_text(bench):
    """export --analysis: report.json names a figure by a number, not a file name"""
    analysis = _analysis(bench, {"alpha_heatmap": 5})
    return cli(_export(bench, "--analysis", str(analysis)), "report.json")


@probe(11)
def probe_export_record_is_a_link_out(bench):
    """export --model: a run record (generated_predictions.txt) is a symbolic link to a file outside the folder"""
    model = bench.hub_folder()
    (model / "generated_predictions.txt").symlink_to(_secret_file(bench))
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "generated_predictions.txt", "symbolic link")


@probe(11)
def probe_export_record_is_a_link_inside(bench):
    """export --model: alpha_history.json is a symbolic link to another file of the folder (links are not copied)"""
    model = bench.hub_folder()
    bench.write(model / "checkpoint-2" / "notes.json", json.dumps({"secret": SECRET}))
    (model / "alpha_history.json").symlink_to(Path("checkpoint-2") / "notes.json")
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "alpha_history.json", "symbolic link")


@probe(11)
def probe_export_api_extra_file_climbing_out(bench):
    """export_hub_folder(extra_files={"../x.png": …}): a destination outside the output folder"""
    output = bench.folder() / "out"
    target = bench.write(output.parent / "x.png", "mine\n")
    bench.keep(target)
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(bench.hub_folder())
    source = _secret_file(bench, "figure.png")
    return api(lambda: export_hub_folder(model, bench.tokenizer, output, extra_files={"../x.png": source}), "../x.png")


@probe(11)
def probe_export_api_extra_file_absolute(bench):
    """export_hub_folder(extra_files={"/…/x.png": …}): an absolute destination"""
    target = bench.write(bench.folder() / "x.png", "mine\n")
    bench.keep(target)
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(bench.hub_folder())
    output = bench.folder() / "out"
    source = _secret_file(bench, "figure.png")
    return api(lambda: export_hub_folder(model, bench.tokenizer, output, extra_files={str(target): source}), "x.png")


# Item 11: the card's metadata holds what its fields say, and nothing more.


@probe(11)
def probe_export_license_with_a_line_break(bench):
    """export --license 'mit\\nfoo: bar' (a second YAML key)"""
    return cli(_export(bench, "--license", "mit\nfoo: bar"), "--license")


@probe(11)
def probe_export_license_as_yaml(bench):
    """export --license '{foo: bar}' (YAML flow syntax)"""
    return cli(_export(bench, "--license", "{foo: bar}"), "--license")


@probe(11)
def probe_export_source_lang_with_a_line_break(bench):
    """export --source_lang 'de\\nlicense: other'"""
    return cli(_export(bench, "--source_lang", "de\nlicense: other", "--target_lang", "en"), "--source_lang")


@probe(11)
def probe_export_target_lang_as_a_list_item(bench):
    """export --target_lang 'en\\n- xx' (a second list item)"""
    return cli(_export(bench, "--source_lang", "de", "--target_lang", "en\n- xx"), "--target_lang")


@probe(11)
def probe_export_summary_language_with_a_line_break(bench):
    """export: training_summary.json's source_lang holds a line break and a YAML key"""
    model = _model_with_summary(bench, source_lang="de\nlicense: other")
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json source_lang")


@probe(11)
def probe_export_summary_model_name_with_a_yaml_block(bench):
    """export: training_summary.json's model_name holds '---' and a YAML key (the card's title and model-index)"""
    model = _model_with_summary(bench, model_name="run\n---\nlicense: other")
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json model_name")


@probe(11)
def probe_export_summary_base_model_not_a_hub_id(bench):
    """export: training_summary.json's base_model (said to be on the Hub) holds a line break"""
    model = _model_with_summary(bench, base_model="org/model\nfoo: bar", base_model_is_local=False)
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json base_model")


@probe(11)
def probe_export_summary_dataset_config_with_a_line_break(bench):
    """export: training_summary.json's dataset_config_name (in the model-index) holds a line break"""
    model = _model_with_summary(bench, dataset_config_name="de-en\nfoo: bar")
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json dataset_config_name")


@probe(11)
def probe_export_summary_metric_as_text(bench):
    """export: training_summary.json's metrics.eval_bleu is text with a YAML key, not a number"""
    model = _model_with_summary(bench, metrics={"eval_bleu": "30\nfoo: bar"})
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json metrics.eval_bleu")


@probe(11)
def probe_export_summary_metric_nan(bench):
    """export: training_summary.json's metrics.test_chrf is NaN (the model-index takes numbers)"""
    model = _model_with_summary(bench, metrics={"test_bleu": 30.0, "test_chrf": float("nan")})
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "metrics.test_chrf")


@probe(11)
def probe_export_summary_metrics_not_an_object(bench):
    """export: training_summary.json's metrics is a list"""
    model = _model_with_summary(bench, metrics=[30.5, 55.25])
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json", "metrics")


@probe(11, DOCUMENTED)
def probe_export_card_text_cannot_add_metadata(bench):
    """export: YAML-looking text in every card text a file fills (summary, analysis findings): metadata unchanged"""
    injected = "x\n---\nlicense: other\nbase_model: evil/model\n---\n"
    model = _model_with_summary(
        bench,
        tokenizer=injected,
        sacrebleu_signatures={"bleu_signature": injected},
        hyperparameters={"learning_rate": injected},
        preprocessing={"source_prefix": injected},
        framework_versions={"torch": injected},
        evaluations=[{"step": injected, "bleu": injected}],
        data={"train_file": f"/data/{injected}"},
    )
    analysis = _analysis(bench, {})
    report = json.loads((analysis / "report.json").read_text())
    report["models"][0]["findings"] = [injected]
    report["sample"] = injected
    bench.write(analysis / "report.json", json.dumps(report))
    output = bench.folder() / "out"
    argv = ["export", "--model", str(model), "--output", str(output), "--analysis", str(analysis), "--no-check_load"]
    code, _, stderr = run_command(argv)
    if code != 0:
        return documented(False, stderr.strip())
    metadata = _card_metadata(output)
    ok = set(metadata) == CARD_KEYS and metadata["license"] == "apache-2.0" and metadata["language"] == ["de", "en"]
    return documented(ok, f"metadata keys {sorted(metadata)}, license {metadata.get('license')!r}")


@probe(11)
def probe_card_api_tag_with_a_line_break(bench):
    """ModelCardInfo(tags=['a\\nlicense: other'])"""
    return api(lambda: ModelCardInfo(tags=["a\nlicense: other"]), "tags")


@probe(11)
def probe_card_api_model_id_that_ends_the_snippets_string(bench):
    """ModelCardInfo(model_id='x"); import os; ("') (the usage snippet's Python string)"""
    return api(lambda: ModelCardInfo(model_id='x"); import os; ("'), "model_id")


# Item 11: push uploads regular files of the folder, never links or names of credentials.


@probe(11)
def probe_push_a_link_to_a_file_outside(bench):
    """push: merges.txt (a tokenizer file name) is a symbolic link to a passwd file outside the folder"""
    folder = bench.hub_folder()
    (folder / "merges.txt").symlink_to(_secret_file(bench))
    return api(lambda: push(folder), "merges.txt", "symbolic link")


@probe(11)
def probe_push_a_card_figure_linked_out(bench):
    """push: README.md shows figures/a.png, a symbolic link to a file outside the folder"""
    folder = bench.hub_folder()
    (folder / "figures").mkdir()
    (folder / "figures" / "a.png").symlink_to(_secret_file(bench, "private.png"))
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![a](figures/a.png)\n")
    return api(lambda: push(folder), "figures/a.png", "symbolic link")


@probe(11)
def probe_push_a_card_figure_in_a_linked_folder(bench):
    """push: README.md shows figures/a.png where figures/ is a symbolic link to a folder outside"""
    folder = bench.hub_folder()
    (folder / "figures").symlink_to(_secret_file(bench, "a.png").parent)
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![a](figures/a.png)\n")
    return api(lambda: push(folder), "figures", "symbolic link")


@probe(11)
def probe_push_a_link_to_a_skipped_file_inside(bench):
    """push: LICENSE is a symbolic link to .env in the same folder (a skipped file under an uploaded name)"""
    folder = bench.hub_folder()
    bench.write(folder / ".env", f"HF_TOKEN={SECRET}\n")
    (folder / "LICENSE").symlink_to(".env")
    return api(lambda: push(folder), "LICENSE", "symbolic link")


@probe(11)
def probe_push_a_link_to_a_model_file_inside(bench):
    """push: tokenizer.json is a symbolic link to a file of the folder (links are refused, not followed)"""
    folder = bench.hub_folder()
    (folder / "tokenizer.json").rename(folder / "tokenizer.real.json")
    (folder / "tokenizer.json").symlink_to("tokenizer.real.json")
    return api(lambda: push(folder), "tokenizer.json", "symbolic link")


@probe(11, DOCUMENTED)
def probe_push_a_hard_link(bench):
    """push: a hard link is the file itself (no path leads out): uploaded by its name, as any file of the folder"""
    folder = bench.hub_folder()
    os.link(bench.write(bench.folder("outside") / "LICENSE.txt", "MIT License\n"), folder / "LICENSE")
    uploaded = _uploaded(push(folder))
    return documented("LICENSE" in uploaded, f"uploaded: {uploaded}")


def _private_name_probe(name: str):
    def run(bench):
        folder = bench.hub_folder()
        bench.write(folder / name, f"{SECRET}\n")
        return api(lambda: push(folder), name, "credential")

    return run


for _name, _file in {
    "id_rsa_model": "id_rsa.model",
    "secrets_vocab": ".secrets_vocab.json",
    "token_model": "hf_token.model",
    "credentials_vocab": "aws_credentials_vocab.txt",
    "password_spm": "password.spm",
}.items():
    _run = _private_name_probe(_file)
    _run.__name__ = f"probe_push_a_private_name_{_name}"
    _run.__doc__ = f"push: a file named {_file} (it matches a model-file pattern and looks like a credential)"
    probe(11)(_run)


@probe(11)
def probe_push_a_card_figure_named_like_a_key(bench):
    """push: README.md shows keys/id_ed25519.png"""
    folder = bench.hub_folder()
    bench.write(folder / "keys" / "id_ed25519.png", SECRET)
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\n![key](keys/id_ed25519.png)\n")
    return api(lambda: push(folder), "keys/id_ed25519.png")


@probe(11)
def probe_push_code_named_like_a_secret(bench):
    """push: config.json's auto_map names secret_config.py, a file of the folder"""
    folder = bench.hub_folder()
    bench.write(folder / "secret_config.py", f"TOKEN = {SECRET!r}\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoConfig"] = "secret_config.AdaptiveEntmaxMarianConfig"
    bench.write(folder / "config.json", json.dumps(config))
    return api(lambda: push(folder), "secret_config.py")


@probe(11, DOCUMENTED)
def probe_push_real_model_file_names_are_not_private(bench):
    """push: the files real model folders hold (spiece.model, source.spm, vocab.json, tokenizer files, …) upload"""
    folder = bench.hub_folder()
    names = [
        "spiece.model", "source.spm", "target.spm", "vocab.json", "target_vocab.json", "vocab.txt", "merges.txt",
        "sentencepiece.bpe.model", "tokenizer.model", "added_tokens.json", "special_tokens_map.json",
        "chat_template.jinja", "LICENSE.md",
    ]  # fmt: skip
    for name in names:
        (folder / name).write_bytes(b"{}")
    expected = {name.name for name in folder.iterdir()} - OWN_ENTRIES  # hf-entmax's marker stays behind
    uploaded = set(_uploaded(push(folder)))
    return documented(uploaded == expected, f"not uploaded: {sorted(expected - uploaded)}")


@probe(11, DOCUMENTED)
def probe_push_leaves_credentials_lying_in_the_folder(bench):
    """push: .env, .netrc, .git-credentials, credentials.json, id_rsa, server.pem, .aws/ in the folder stay behind"""
    folder = bench.hub_folder()
    names = [".env", ".netrc", ".git-credentials", "credentials.json", "id_rsa", "server.pem", ".aws/credentials"]
    for name in names:
        bench.write(folder / name, f"{SECRET}\n")
    uploaded = _uploaded(push(folder))
    return documented(not [name for name in uploaded if name in names or "/" in name], f"uploaded: {uploaded}")


@probe(11, DOCUMENTED)
def probe_push_prints_control_characters_escaped(bench):
    """push: a file name with terminal control characters is listed escaped (it cannot rewrite the terminal)"""
    folder = bench.hub_folder()
    bench.write(folder / "notes\x1b]0;pwned\x07.txt", "notes\n")
    text = select_upload_files(folder).describe(folder)
    return documented("\x1b" not in text and "\\x1b" in text, text.splitlines()[-1])


@probe(11, DOCUMENTED, slow=True)
def probe_push_load_check_sees_no_credentials(bench):
    """push: the load check runs the folder's code with a fresh HOME and no secret variable: it finds no credential"""
    folder = bench.hub_folder()
    record = bench.folder("record") / "seen.json"
    # The folder's own code looks where libraries look for credentials, and writes down what it finds.
    spy = f"""
import json as _json, os as _os, pathlib as _pathlib
from huggingface_hub import get_token as _get_token
_home = _pathlib.Path.home()
_files = {{str(_p): _p.read_text(errors="replace") for _p in _home.rglob("*") if _p.is_file()}}
with open({str(record)!r}, "w") as _record:
    _json.dump({{"home": str(_home), "environ": dict(_os.environ), "token": _get_token(), "files": _files}}, _record)
"""
    with open(folder / "configuration_adaptive_entmax_marian.py", "a", encoding="utf-8") as code:
        code.write(spy)
    home, hf_home = bench.folder("home"), bench.folder("hf_home")
    for name in (".cache/huggingface/token", ".netrc", ".git-credentials", ".aws/credentials", ".config/gh/hosts.yml"):
        bench.write(home / name, f"{SECRET}\n")
    bench.write(hf_home / "token", f"{SECRET}\n")
    variables = {"HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY"}
    environment = {
        **dict.fromkeys(variables, SECRET),
        "HOME": str(home),
        "HF_HOME": str(hf_home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "NETRC": str(home / ".netrc"),
    }
    with _environment(**environment), hub_enabled():
        push_folder(folder, "someone/model", token="hf_x", api=FakeHfApi())
    seen = json.loads(record.read_text())
    ok = SECRET not in record.read_text() and seen["token"] is None and seen["home"] != str(home)
    return documented(ok, f"home {seen['home']}, files {sorted(seen['files'])}, token {seen['token']!r}")


# Item 12: a full disk, a read-only folder, a text file that is not UTF-8 (the Hub side).


@probe(12)
def probe_export_disk_full_writing_the_weights(bench):
    """export over an earlier export: the disk fills while the weights are written (safetensors' error)"""
    output = bench.hub_folder()
    bench.keep(output)
    argv = ["export", "--model", str(bench.hub_folder(seed=1)), "--output", str(output), "--no-check_load"]
    with mock.patch("transformers.modeling_utils.safe_save_file", side_effect=SAFETENSORS_DISK_FULL):
        return cli(argv, str(output), "no space left")


@probe(12)
def probe_export_disk_full_writing_the_card(bench):
    """export: the disk fills while the model card is written (OSError 28)"""
    argv = _export(bench)
    full = OSError(errno.ENOSPC, "No space left on device")
    with mock.patch("huggingface_hub.ModelCard.save", side_effect=full):
        return cli(argv, argv[argv.index("--output") + 1], "no space left")


@probe(12)
def probe_export_disk_full_copying_the_records(bench):
    """export: the disk fills while the run's records are copied"""
    model = bench.hub_folder()
    bench.write(model / "generated_predictions.txt", "a translation\n")
    output = bench.folder() / "out"

    def full(source, destination, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(destination))

    with mock.patch("hf_entmax.hub.export.shutil.copyfile", side_effect=full):
        return cli(["export", "--model", str(model), "--output", str(output), "--no-check_load"], str(output))


@probe(12)
def probe_export_api_disk_full(bench):
    """export_hub_folder(): the disk fills while the weights are written"""
    output = bench.folder() / "out"
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(bench.hub_folder())
    with mock.patch("transformers.modeling_utils.safe_save_file", side_effect=SAFETENSORS_DISK_FULL):
        return api(lambda: export_hub_folder(model, bench.tokenizer, output), str(output), "no space left")


@contextlib.contextmanager
def _read_only(folder: Path):
    """``folder`` made read-only (mode 0o555). Where that does not stop writes (as root), creating anything in it
    fails as it would: with EACCES."""
    mode = folder.stat().st_mode
    folder.chmod(0o555)
    probe_file = folder / ".write-probe"
    try:
        probe_file.touch()
        probe_file.unlink()
        writable = True
    except PermissionError:
        writable = False
    real = tempfile.mkdtemp

    def refused(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).resolve() == folder.resolve():
            raise PermissionError(errno.EACCES, "Permission denied", str(Path(dir) / "tmp"))
        return real(*args, dir=dir, **kwargs)

    try:
        with mock.patch("tempfile.mkdtemp", refused) if writable else contextlib.nullcontext():
            yield
    finally:
        folder.chmod(mode)


@probe(12)
def probe_export_into_a_read_only_folder(bench):
    """export --output: a new folder inside a read-only folder (simulated where chmod does not stop writes: root)"""
    parent = bench.folder("read-only")
    with _read_only(parent):
        return cli(_export(bench, "--output", str(parent / "out")), str(parent / "out"), "permission denied")


@probe(12)
def probe_export_over_a_read_only_export(bench):
    """export --output: an earlier export in a read-only folder (chmod -R a-w; simulated as root)"""
    output = bench.hub_folder()
    bench.keep(output)
    with _read_only(output.parent):
        return cli(_export(bench, "--output", str(output)), str(output), "permission denied")


@probe(12)
def probe_export_under_a_file(bench):
    """export --output: a path under a file"""
    file = bench.write(bench.folder() / "notes.txt", "keep me\n")
    bench.keep(file)
    return cli(_export(bench, "--output", str(file / "out")), str(file))


@probe(12)
def probe_export_load_check_temporary_folder_full(bench):
    """export: the load check cannot write its inputs, the temporary folder is full (torch.save's error)"""
    argv = bench.export_argv()
    with mock.patch("hf_entmax.hub.load_check.torch.save", side_effect=TORCH_DISK_FULL):
        return cli(argv, "temporary folder", "TMPDIR")


@probe(12)
def probe_export_load_check_temporary_folder_read_only(bench):
    """export: the load check cannot create its temporary folder (TMPDIR read-only)"""
    argv = bench.export_argv()
    real = tempfile.mkdtemp

    def denied(*args, prefix=None, **kwargs):
        if prefix == "hf_entmax_load_check_":
            raise PermissionError(errno.EACCES, "Permission denied", "/tmp/hf_entmax_load_check_x")
        return real(*args, prefix=prefix, **kwargs)

    with mock.patch("tempfile.mkdtemp", denied):
        return cli(argv, "temporary folder", "permission denied")


@probe(12)
def probe_push_a_file(bench):
    """push: the path given is a file (the model's README.md), not a folder"""
    readme = bench.hub_folder() / "README.md"
    return cli(["push", str(readme), "--repo_id", "someone/model"], str(readme), "is a file")


@probe(12)
def probe_push_readme_not_utf8(bench):
    """push: README.md is Latin-1, not UTF-8"""
    folder = bench.hub_folder()
    (folder / "README.md").write_bytes("# Modèle de traduction\n".encode("latin-1"))
    return cli(["push", str(folder), "--repo_id", "someone/model"], "README.md", "UTF-8")


@probe(12)
def probe_push_tokenizer_config_not_utf8(bench):
    """push: tokenizer_config.json is not UTF-8"""
    folder = bench.hub_folder()
    (folder / "tokenizer_config.json").write_bytes(b'{"name": "mod\xe8le"}')
    return api(lambda: push(folder), "tokenizer_config.json")


@probe(12)
def probe_export_summary_not_utf8(bench):
    """export: training_summary.json is not UTF-8"""
    model = bench.hub_folder()
    (model / "training_summary.json").write_bytes(b'{"model_name": "mod\xe8le"}')
    argv = ["export", "--model", str(model), "--output", str(bench.folder() / "out"), "--no-check_load"]
    return cli(argv, "training_summary.json")
