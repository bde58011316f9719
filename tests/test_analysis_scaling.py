"""The analysis of ASEntmax models: β, γ and δ per head in the analysis, report.json, report.md, the factor-against-n
figure and the model card section; unscaled attention types and models get none of it."""

import json
import math

import pytest
import torch
from helpers import SENTENCES, tiny_model

from hf_entmax import analyze_model
from hf_entmax.analysis.findings import DEFINITIONS, LONG_INPUT_MULTIPLE, findings
from hf_entmax.analysis.report import model_card_section, write_report
from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES


SOURCES, TARGETS = SENTENCES[0::2], SENTENCES[1::2]  # German sentences and their English translations
SCALED, UNSCALED = ("encoder_self", "decoder_self"), "cross"


def scaled_model(tokenizer):
    """Encoder and decoder self-attention scale their queries; cross-attention does not."""
    return tiny_model(vocab_size=len(tokenizer), attention_scaling="asentmax", cross_attention_scaling="none")


def analyse(model, tokenizer, name):
    return analyze_model(model, SOURCES, TARGETS, tokenizer=tokenizer, name=name, num_examples=0, progress=False)


def test_analysis_carries_the_models_scales_and_the_numbers_of_keys_its_queries_saw(tokenizer):
    model = scaled_model(tokenizer)
    analysis = analyse(model, tokenizer, "scaled")
    scales = model.get_attention_scales()
    assert set(scales) == set(SCALED)
    for kind in SCALED:
        scaling = analysis.attention[kind].scaling
        assert torch.equal(scaling.beta, scales[kind]["beta"]) and torch.equal(scaling.gamma, scales[kind]["gamma"])
        assert scaling.offset == scales[kind]["offset"] == 1.0
    assert analysis.attention[UNSCALED].scaling is None

    # n is what the model counts: a source sentence's tokens (with </s>) for every encoder query; the causal prefix,
    # from the start token alone to the whole decoder input, in decoder self-attention.
    source_lengths = [len(ids) for ids in tokenizer(SOURCES)["input_ids"]]
    target_lengths = [len(ids) for ids in tokenizer(text_target=TARGETS)["input_ids"]]
    assert analysis.attention["encoder_self"].scaling.key_counts == (min(source_lengths), max(source_lengths))
    assert analysis.attention["decoder_self"].scaling.key_counts == (1, max(target_lengths))


def test_the_analysis_factor_is_the_one_the_model_applies(tokenizer):
    model = scaled_model(tokenizer)
    analysis = analyse(model, tokenizer, "scaled")
    num_keys = [1, 7, 20, 4096]
    layers = {"encoder_self": model.model.encoder.layers, "decoder_self": model.model.decoder.layers}
    for kind, stack in layers.items():
        factors = analysis.attention[kind].scaling.factor(num_keys)  # (layers, heads, N)
        for layer, decoder_or_encoder_layer in enumerate(stack):
            module = decoder_or_encoder_layer.self_attn
            for index, n in enumerate(num_keys):
                # Without a mask every query sees all n keys; (1, heads, 1, 1) in float64.
                applied = module.query_scale(None, n, torch.float64).flatten()
                # The same float64 formula on the same float32 parameters: equal up to float64 rounding.
                torch.testing.assert_close(factors[layer, :, index], applied, rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def reports(tokenizer, tmp_path_factory):
    """A scaled and an unscaled model analysed together, and the unscaled one alone (written once: the figures take
    seconds, and the tests only read them)."""
    tmp_path = tmp_path_factory.mktemp("reports")
    model, plain_model = scaled_model(tokenizer), tiny_model(vocab_size=len(tokenizer))
    scaled, unscaled = analyse(model, tokenizer, "scaled"), analyse(plain_model, tokenizer, "plain")
    write_report([scaled, unscaled], tmp_path / "both")
    write_report([unscaled], tmp_path / "plain")
    return model, plain_model, tmp_path


def test_report_has_beta_gamma_and_the_factor_for_scaled_types_only(reports):
    model, _, folder = reports
    report = json.loads((folder / "both" / "report.json").read_text())
    scaled, plain = report["models"]
    scales = model.get_attention_scales()
    for kind in SCALED:
        reported = scaled["attention"][kind]["scaling"]
        torch.testing.assert_close(torch.tensor(reported["beta"]), scales[kind]["beta"])
        torch.testing.assert_close(torch.tensor(reported["gamma"]), scales[kind]["gamma"])
        assert reported["offset"] == 1.0

        summary = scaled["summary"][kind]["scaling"]
        beta, gamma = scales[kind]["beta"].flatten().tolist(), scales[kind]["gamma"].flatten().tolist()
        assert summary["sharpening_heads"] == sum(b * g > 0 for b, g in zip(beta, gamma, strict=True))
        assert summary["softening_heads"] == sum(b * g < 0 for b, g in zip(beta, gamma, strict=True))
        fewest, most = reported["key_counts"]
        assert summary["long_keys"] == LONG_INPUT_MULTIPLE * most
        for keys, bounds in (
            ((fewest, most), summary["factor_range"]),
            ((summary["long_keys"],), summary["long_factor_range"]),
        ):
            factors = [1.0 + b * math.log(n + 1) ** g for b, g in zip(beta, gamma, strict=True) for n in keys]
            # The summary rounds to 4 decimals.
            assert bounds == pytest.approx([min(factors), max(factors)], abs=5e-5)
    for model_entry, kinds in ((scaled, [UNSCALED]), (plain, list(scaled["attention"]))):
        for kind in kinds:
            assert "scaling" not in model_entry["attention"][kind] and "scaling" not in model_entry["summary"][kind]
    assert "scaling" in report["definitions"]
    assert report["figures"]["query_scales"] == "query_scales.png"
    assert (folder / "both" / "query_scales.png").read_bytes().startswith(b"\x89PNG")

    markdown = (folder / "both" / "report.md").read_text()
    assert "](query_scales.png)" in markdown
    assert "- Encoder self-attention scales its queries by 1 + β·log(n + 1)^γ per head (ASEntmax): " in markdown
    assert "Cross-attention scales its queries" not in markdown
    tables = markdown.split("## Per head: scaled")[1].split("## Definitions")[0].split("## Per head: plain")
    encoder, decoder, cross = tables[0].split("### ")[1:]
    most = scaled["attention"]["encoder_self"]["scaling"]["key_counts"][1]
    long_keys = LONG_INPUT_MULTIPLE * most
    assert f"| layer | head | α | β | γ | factor at n = {most} | factor at n = {long_keys} | density |" in encoder
    beta, gamma = scales["encoder_self"]["beta"][1, 2].item(), scales["encoder_self"]["gamma"][1, 2].item()
    assert (
        f"| 1 | 2 | {scaled['attention']['encoder_self']['alpha'][1][2]:.3f} | {beta:.3f} | {gamma:.3f} |" in encoder
    )
    assert "| β | γ |" in decoder and "β" not in cross and "β" not in tables[1]


def test_a_report_without_scaling_has_none_of_it(reports):
    _, _, folder = reports
    report = json.loads((folder / "plain" / "report.json").read_text())
    assert report["definitions"] == DEFINITIONS
    assert "query_scales" not in report["figures"] and not (folder / "plain" / "query_scales.png").exists()
    assert all("scaling" not in entry for entry in report["models"][0]["attention"].values())
    markdown = (folder / "plain" / "report.md").read_text()
    assert not any(text in markdown for text in ("β", "γ", "ASEntmax", "scaling"))


def test_model_card_section_shows_the_factor_and_checks_the_scales(reports):
    model, plain_model, folder = reports
    section, files = model_card_section(
        folder / "both", model.get_alphas(), attention_scales=model.get_attention_scales()
    )
    assert "analysis/query_scales.png" in files and "](analysis/query_scales.png)" in section
    assert "Encoder self-attention scales its queries by 1 + β·log(n + 1)^γ per head" in section

    other = model.get_attention_scales()
    other["encoder_self"]["gamma"] = other["encoder_self"]["gamma"] + 0.01
    for scales in (other, {}):
        with pytest.raises(HfEntmaxValueError, match="scales its queries otherwise than this model"):
            model_card_section(folder / "both", model.get_alphas(), attention_scales=scales)

    plain_section, plain_files = model_card_section(folder / "plain", plain_model.get_alphas())
    assert "query_scales" not in " ".join(plain_files) and "β" not in plain_section


@pytest.mark.slow
def test_analyze_command_reports_a_saved_scaled_model(tokenizer, tmp_path, capsys):
    model = scaled_model(tokenizer)
    model.save_pretrained(tmp_path / "scaled")
    tokenizer.save_pretrained(tmp_path / "scaled")
    (tmp_path / "source.txt").write_text("\n".join(SOURCES) + "\n")
    arguments = ["analyze", str(tmp_path / "scaled"), "--source_file", str(tmp_path / "source.txt")]
    assert main([*arguments, "--output", str(tmp_path / "out"), "--max_length", "6", "--num_examples_to_plot", "0",
                 "--no-progress"]) == 0  # fmt: skip
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    attention = report["models"][0]["attention"]
    assert sorted(kind for kind, entry in attention.items() if "scaling" in entry) == sorted(SCALED)
    for kind in SCALED:
        torch.testing.assert_close(
            torch.tensor(attention[kind]["scaling"]["gamma"]), model.get_attention_scales()[kind]["gamma"]
        )
    assert (tmp_path / "out" / report["figures"]["query_scales"]).is_file()


def test_softmax_matched_attention_is_named_and_its_sparsity_read_from_density(tokenizer):
    """With queries scaled by n^(1 − α), α no longer says how sharp a head is: the report says so once, naming the
    attention types it applies to."""
    model = tiny_model(vocab_size=len(tokenizer), attention_scaling="softmax_matched", cross_attention_scaling="none")
    analysis = analyse(model, tokenizer, "matched")
    sentences = findings(analysis)
    for kind, statistics in analysis.attention.items():
        matched = kind != UNSCALED
        assert statistics.scaling_method == ("softmax_matched" if matched else "none")
        assert statistics.scaling is None  # no learned β, γ: nothing to plot against n
        assert statistics.to_dict()["scaling_method"] == statistics.scaling_method
    said = [sentence for sentence in sentences if "queries by n^(1 − α)" in sentence]
    assert len(said) == 1
    titles = [ATTENTION_TITLES[kind] for kind in analysis.attention if kind != UNSCALED]
    assert said[0].startswith(f"{titles[0]} and {titles[1].lower()} scale their queries by n^(1 − α)")
    assert ATTENTION_TITLES[UNSCALED].lower() not in said[0].lower()


def test_softmax_with_softmax_matched_config_is_not_said_to_scale_its_queries(tokenizer):
    """`hf-entmax train`'s softmax twin (α = 1 fixed) keeps the fresh-model default softmax_matched in its config,
    but n^(1 − α) = 1 there: the report must not tell a reader its queries are scaled."""
    model = tiny_model(
        vocab_size=len(tokenizer), attention_scaling="softmax_matched", alpha_init=1.0, learn_alpha=False
    )
    analysis = analyse(model, tokenizer, "softmax")
    assert all(statistics.scaling_method == "none" for statistics in analysis.attention.values())
    sentences = findings(analysis)
    assert not any("n^(1 − α)" in sentence for sentence in sentences)
    assert any("softmax (α = 1 in every head)" in sentence for sentence in sentences)
