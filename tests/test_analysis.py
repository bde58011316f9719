"""Head analyses: statistics on hand-built attention, findings on hand-made statistics, a head built to attend to the
previous token, softmax models, the `analyze` command end to end (with --compare and a plain Marian model), and its
input errors."""

import json
import math

import pytest
import torch
from helpers import SENTENCES, tiny_marian, tiny_model
from transformers import MarianMTModel

from hf_entmax import ModelAnalysis, analyze_model
from hf_entmax.analysis.collect import AttentionTypeStatistics
from hf_entmax.analysis.findings import comparison_findings, findings, percent, summarize
from hf_entmax.analysis.report import write_report
from hf_entmax.analysis.statistics import (
    allowed_keys,
    attention_density,
    head_divergence,
    largest_weight,
    masked_mean,
    mass_per_token,
    offset_mass,
    same_word_mass,
    word_ids,
)
from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxValueError


SOURCES, TARGETS = SENTENCES[0::2], SENTENCES[1::2]  # German sentences and their English translations


def one_hot(keys: list[int], num_keys: int) -> torch.Tensor:
    """``(Q, K)``: query ``q`` attends to key ``keys[q]`` only."""
    return torch.nn.functional.one_hot(torch.tensor(keys), num_keys).float()


def test_density_counts_exact_zeros_among_the_keys_a_query_may_attend_to():
    # One sentence of 3 real tokens and one padding position; head 0 is uniform, head 1 one-hot.
    real = torch.tensor([[True, True, True, False]])
    allowed = allowed_keys(real, real)  # (1, 4, 4)
    uniform = allowed[0].float() / allowed[0].float().sum(-1, keepdim=True).clamp(min=1)
    attention = torch.stack([uniform, one_hot([1, 0, 1, 0], 4)])[None]  # (1, 2, 4, 4)

    density, counted = attention_density(attention, allowed)
    assert counted.tolist() == [[True, True, True, False]]  # the padded query does not count
    torch.testing.assert_close(masked_mean(density, counted), torch.tensor([1.0, 1 / 3]))

    # Causal decoder self-attention: query q may attend to q + 1 keys, so a one-hot query has density 1/(q+1).
    causal = allowed_keys(real, real, causal=True)
    density, counted = attention_density(one_hot([0, 0, 1, 0], 4)[None, None], causal)
    assert density[0, 0, :3].tolist() == pytest.approx([1.0, 1 / 2, 1 / 3])


def test_largest_weight_is_one_for_a_head_on_one_key_and_one_over_n_for_an_even_head():
    real = torch.tensor([[True, True, True, False]])
    allowed = allowed_keys(real, real)
    uniform = allowed[0].float() / allowed[0].float().sum(-1, keepdim=True).clamp(min=1)
    # Head 2 puts its largest weight on the padding key, which a query may not attend to: it does not count.
    on_padding = torch.tensor([[0.2, 0.1, 0.1, 0.6]]).expand(4, 4)
    attention = torch.stack([uniform, one_hot([1, 0, 1, 0], 4), on_padding])[None]  # (1, 3, 4, 4)

    largest, counted = largest_weight(attention, allowed)
    assert counted.tolist() == [[True, True, True, False]]
    torch.testing.assert_close(masked_mean(largest, counted), torch.tensor([1 / 3, 1.0, 0.2]))


def test_js_divergence_is_zero_for_identical_heads_and_one_for_disjoint_heads():
    real = torch.ones(1, 3, dtype=torch.bool)
    allowed = allowed_keys(real, real)
    sparse = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.2, 0.0, 0.8]])  # exact zeros: 0·log 0 = 0
    divergence, counted = head_divergence(torch.stack([sparse, sparse, sparse])[None], allowed)
    assert counted.all() and torch.equal(divergence, torch.zeros(1, 3))

    disjoint = torch.stack([one_hot([0, 0, 0], 3), one_hot([1, 1, 1], 3)])[None]  # (1, 2, 3, 3)
    divergence, _ = head_divergence(disjoint, allowed)
    torch.testing.assert_close(divergence, torch.ones(1, 3))  # base 2: at most 1 bit

    # Three heads, two of them identical: the mean over the three pairs is (0 + 1 + 1) / 3.
    divergence, _ = head_divergence(torch.stack([one_hot([0] * 3, 3), one_hot([0] * 3, 3), one_hot([1] * 3, 3)])[None],
                                    allowed)  # fmt: skip
    torch.testing.assert_close(divergence, torch.full((1, 3), 2 / 3))

    # JS(u, e₀) = H((u + e₀) / 2) − (H(u) + H(e₀)) / 2, with (u + e₀) / 2 = (2/3, 1/6, 1/6) and H(e₀) = 0.
    divergence, _ = head_divergence(torch.stack([torch.full((3, 3), 1 / 3), one_hot([0] * 3, 3)])[None], allowed)
    mixture_entropy = -(2 / 3) * math.log2(2 / 3) - 2 * (1 / 6) * math.log2(1 / 6)
    torch.testing.assert_close(divergence, torch.full((1, 3), mixture_entropy - math.log2(3) / 2))


def test_offset_mass_finds_a_previous_token_head_and_skips_queries_without_that_token():
    real = torch.tensor([[True, True, True, True, False]])
    previous = one_hot([0, 0, 1, 2, 0], 5)  # query 0 has no previous token and attends to itself
    spread = torch.full((5, 5), 0.25) * allowed_keys(real, real)[0]
    attention = torch.stack([previous, spread])[None]  # (1, 2, 5, 5)

    mass, counted = offset_mass(attention, allowed_keys(real, real), -1)
    assert counted.tolist() == [[False, True, True, True, False]]
    torch.testing.assert_close(masked_mean(mass, counted), torch.tensor([1.0, 0.25]))
    mass, counted = offset_mass(attention, allowed_keys(real, real), 1)
    assert counted.tolist() == [[True, True, True, False, False]]  # the last real token has no next token
    torch.testing.assert_close(masked_mean(mass, counted), torch.tensor([0.0, 0.25]))

    # In decoder self-attention the next token is never visible: the statistic is undefined, not 0.
    mass, counted = offset_mass(attention, allowed_keys(real, real, causal=True), 1)
    assert not counted.any() and masked_mean(mass, counted).isnan().all()


def test_same_word_mass_keeps_to_the_other_pieces_of_the_word():
    tokens = ["▁the", "▁hou", "se", "▁is", "</s>", "<pad>"]
    ids = word_ids(tokens, {"</s>", "<pad>"})
    assert ids == [0, 1, 1, 2, -1, -1]
    real = torch.tensor([[True] * 5 + [False]])
    # Head 0 merges "hou"+"se" (each attends to the other); head 1 attends to "</s>" from everywhere.
    merging = one_hot([0, 2, 1, 3, 4, 0], 6)
    attention = torch.stack([merging, one_hot([4] * 6, 6)])[None]  # (1, 2, 6, 6)

    mass, counted = same_word_mass(attention, allowed_keys(real, real), torch.tensor([ids]))
    assert counted.tolist() == [[False, True, True, False, False, False]]  # only the pieces of a split word count
    torch.testing.assert_close(masked_mean(mass, counted), torch.tensor([1.0, 0.0]))

    token_mass = mass_per_token(attention, allowed_keys(real, real), torch.tensor([[7, 8, 9, 10, 1, 0]]), 12)
    assert token_mass.shape == (2, 12) and token_mass[1, 1] == 5.0  # 5 real queries, all on "</s>" (id 1)
    assert token_mass.sum().item() == 10.0


def previous_token_head(tokenizer, scale: float = 20.0):
    """A tiny model whose encoder layer 0 head 0 is sparsemax and attends exactly to the previous token.

    Token embeddings are zero, so the layer sees only Marian's sinusoidal positions: dimension k holds sin(ω_k p)
    and dimension 16 + k holds cos(ω_k p). The head's query rotates the first four frequencies back by one
    position, its key copies them, so its score q_i · k_j = scale · Σ_k cos(ω_k (i − 1 − j)) peaks at j = i − 1
    with a margin that sparsemax turns into a one-hot row.
    """
    model = tiny_model(vocab_size=len(tokenizer))
    attention = model.model.encoder.layers[0].self_attn
    half = model.config.d_model // 2
    with torch.no_grad():
        model.model.shared.weight.zero_()
        for projection in (attention.q_proj, attention.k_proj):
            projection.weight[:8] = 0.0
            projection.bias[:8] = 0.0
        for k in range(4):
            omega = 10000 ** (-2 * k / model.config.d_model)
            sin, cos = math.sin(omega), math.cos(omega)
            attention.q_proj.weight[k, k], attention.q_proj.weight[k, half + k] = scale * cos, -scale * sin
            attention.q_proj.weight[4 + k, k], attention.q_proj.weight[4 + k, half + k] = scale * sin, scale * cos
            attention.k_proj.weight[k, k] = attention.k_proj.weight[4 + k, half + k] = 1.0
        attention.alpha_logits[0] = 30.0  # α = 1 + sigmoid(30) → clamped to 2: sparsemax
    return model


def test_a_head_built_to_attend_to_the_previous_token_is_reported_as_positional(tokenizer):
    model = previous_token_head(tokenizer)
    analysis = analyze_model(model, SOURCES, TARGETS, tokenizer=tokenizer, batch_size=3, progress=False)

    encoder = analysis.attention["encoder_self"]
    assert encoder.alpha[0, 0] == 2.0
    assert encoder.previous_token_mass[0, 0].item() == pytest.approx(1.0, abs=1e-6)
    assert encoder.next_token_mass[0, 0].item() == pytest.approx(0.0, abs=1e-6)
    assert encoder.density[0, 0] < 0.25  # one key per query, sentences of 5+ tokens
    assert analysis.attention["cross"].previous_token_mass is None  # no positions shared by query and key
    sentences = findings(analysis)
    assert (
        "1 of 4 encoder self-attention heads in layer 0 attends to the previous token: "
        "head 0 with 100% of its mass (α 2.00, near sparsemax)."
    ) in sentences
    # Sparse by what it does (density), not only by its α.
    low_density = f"head 0 (density {100 * encoder.density[0, 0].item():.0f}%, α 2.00)."
    assert (
        "1 of 4 encoder self-attention heads in layer 0 gives exact zeros to most keys (density ≤ 50%): " + low_density
    ) in sentences
    summary = summarize(analysis)["encoder_self"]
    assert summary["near_sparsemax_heads"] >= 1 and summary["low_density_heads"] >= 1  # other heads: random α


def test_findings_come_from_statistics_alone():
    """No model: hand-made statistics of 2 layers × 2 heads, the same for every attention type."""
    statistics = AttentionTypeStatistics(
        alpha=torch.tensor([[1.9, 1.05], [1.5, 1.0]]),
        density=torch.tensor([[0.3, 1.0], [0.8, 0.5]]),
        largest_weight=torch.tensor([[0.9, 0.3], [0.6, 0.5]]),
        js_divergence=torch.tensor([0.2, 0.4]),
        previous_token_mass=torch.tensor([[0.7, 0.1], [0.2, 0.1]]),
        next_token_mass=None,
        same_word_mass=None,
        top_tokens=[[[("▁a|b", 0.6)], [("x", 0.2)]], [[], [("y", 0.1)]]],
    )
    unchanged = [{"step": step, "encoder_self": statistics.alpha.tolist()} for step in (0, 1000)]
    attention = dict.fromkeys(("encoder_self", "decoder_self", "cross"), statistics)
    analysis = ModelAnalysis("made", "adaptive_entmax_marian", 4, "references", attention, alpha_history=unchanged)
    sentences = findings(analysis)
    where = "of 2 encoder self-attention heads in layer"
    assert sentences[:7] == [
        "Encoder self-attention: α from 1.00 to 1.90 (mean 1.36); a query gives a non-zero weight to 65% of the "
        "tokens it may attend to, on average (softmax: 100%).",
        f"1 {where} 0 is near sparsemax (α > 1.8): head 0 (α 1.90, density 30%).",
        f"1 {where} 0 gives exact zeros to most keys (density ≤ 50%): head 0 (density 30%, α 1.90).",
        f"1 {where} 0 is nearly dense (α < 1.1): head 1 (α 1.05).",
        f"1 {where} 0 attends to the previous token: head 0 with 70% of its mass (α 1.90, near sparsemax).",
        f"1 {where} 0 sends most of its attention to one token: head 0 to `▁a\\|b` (60%).",  # escaped for a table
        f"1 {where} 1 gives exact zeros to most keys (density ≤ 50%): head 1 (density 50%, α 1.00).",
    ]
    assert (
        "Encoder self-attention: head diversity (JS divergence between heads) is highest in layer 1 (0.40 bits) and "
        "lowest in layer 0 (0.20 bits)."
    ) in sentences
    assert sentences[-1] == "α did not change over training (steps 0–1,000)."
    summary = summarize(analysis)
    counts = ("near_sparsemax_heads", "low_density_heads", "positional_heads")
    assert [summary["cross"][name] for name in counts] == [1, 2, 1]
    models = [{"name": "made", "summary": summary}, {"name": "again", "summary": summary}]
    assert comparison_findings(models)[2] == (
        "Cross-attention, density: made 65%, again 65%; largest weight: made 0.57, again 0.57; head diversity (JS): "
        "made 0.30, again 0.30 bits; positional heads: made 1, again 1."
    )


def test_softmax_models_have_density_one_and_alpha_one(tokenizer, tmp_path):
    softmax = tiny_model(vocab_size=len(tokenizer), init_std=0.5, alpha_init=1.0, learn_alpha=False)
    marian = tiny_marian(len(tokenizer))
    marian.save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")

    for model in (softmax, tmp_path / "marian"):
        analysis = analyze_model(model, SOURCES, tokenizer=tokenizer, max_length=8, progress=False)
        for kind, statistics in analysis.attention.items():
            assert torch.equal(statistics.density, torch.ones_like(statistics.alpha)), kind
            assert torch.equal(statistics.alpha, torch.ones_like(statistics.alpha)), kind
    assert analysis.model_type == "marian" and analysis.name == "marian"
    assert analysis.attention["decoder_self"].alpha.shape == (1, 2)
    assert analysis.decoder_inputs == "greedy translations"

    with pytest.raises(HfEntmaxValueError, match='attn_implementation="eager"'):
        analyze_model(MarianMTModel.from_pretrained(tmp_path / "marian"), SOURCES, tokenizer=tokenizer)


@pytest.fixture
def model_folders(tokenizer, tmp_path):
    """An adaptive model with a training α history, and a plain Marian one, saved as folders."""
    adaptive = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    adaptive.save_pretrained(tmp_path / "adaptive")
    tokenizer.save_pretrained(tmp_path / "adaptive")
    alphas = {kind: values.tolist() for kind, values in adaptive.get_alphas().items()}
    history = [{"step": 10, **{kind: [[1.5] * 4] * 2 for kind in alphas}}, {"step": 20, **alphas}]
    (tmp_path / "adaptive" / "alpha_history.json").write_text(json.dumps(history))
    tiny_marian(len(tokenizer)).save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")
    (tmp_path / "source.txt").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "target.txt").write_text("\n".join(TARGETS) + "\n")
    return adaptive, tmp_path


@pytest.mark.slow
def test_analyze_command_compares_models_in_figures_and_report(model_folders, capsys):
    adaptive, folder = model_folders
    output = folder / "analysis"
    arguments = ["analyze", str(folder / "adaptive"), "--compare", str(folder / "marian"), "--output", str(output)]
    arguments += ["--source_file", str(folder / "source.txt"), "--target_file", str(folder / "target.txt")]
    assert main([*arguments, "--num_examples_to_plot", "1", "--batch_size", "3", "--no-progress"]) == 0
    assert "| adaptive | Cross-attention |" in capsys.readouterr().out

    report = json.loads((output / "report.json").read_text())
    assert [model["name"] for model in report["models"]] == ["adaptive", "marian"]
    ours, marian = report["models"]
    assert ours["num_sentences"] == 4 and ours["decoder_inputs"] == "references"
    for kind, alphas in adaptive.get_alphas().items():
        torch.testing.assert_close(torch.tensor(ours["attention"][kind]["alpha"]), alphas)
        densities = ours["attention"][kind]["density"]
        assert all(0 < value <= 1 for row in densities for value in row)
        assert ours["summary"][kind]["mean_density"] == pytest.approx(torch.tensor(densities).mean().item(), abs=1e-4)
        assert marian["summary"][kind]["mean_density"] == 1.0 and marian["summary"][kind]["mean_alpha"] == 1.0
        largest = torch.tensor(ours["attention"][kind]["largest_weight"])
        assert largest.shape == torch.tensor(densities).shape and bool(((largest > 0) & (largest <= 1)).all())
        assert ours["summary"][kind]["mean_largest_weight"] == pytest.approx(largest.mean().item(), abs=1e-4)
    assert min(min(row) for row in ours["attention"]["cross"]["density"]) < 1  # α-entmax gives exact zeros
    assert ours["alpha_history"][-1]["step"] == 20 and marian["alpha_history"] is None
    assert len(report["comparison"]) == 3

    figures = {*report["figures"].values(), *(entry["file"] for entry in report["attention_maps"])}
    assert {"alpha_histogram.png", "alpha_heatmap.png", "density_heatmap.png", "js_divergence.png",
            "alpha_trajectories.png", "attention_marian_0_cross.png"} <= figures  # fmt: skip
    assert len(report["attention_maps"]) == 6  # 2 models × 1 sentence × 3 attention types
    for file in figures:
        assert (output / file).read_bytes().startswith(b"\x89PNG"), file
    markdown = (output / "report.md").read_text()
    assert all(f"]({file})" in markdown for file in figures)
    assert "## Findings: adaptive" in markdown and "## Per head: marian" in markdown
    assert "Over training (steps 10–20), mean α went 1.50 →" in markdown
    assert "in bits (base 2" in markdown
    cross = ours["summary"]["cross"]
    assert f"| {percent(cross['mean_density'])} | {cross['mean_largest_weight']:.2f} |" in markdown


def test_analyze_command_without_targets_reads_greedy_translations(model_folders, capsys):
    _, folder = model_folders
    (folder / "adaptive" / "alpha_history.json").unlink()
    output = folder / "greedy"
    arguments = ["analyze", str(folder / "adaptive"), "--source_file", str(folder / "source.txt")]
    assert main([*arguments, "--output", str(output), "--sample_size", "2", "--max_length", "6",
                 "--num_examples_to_plot", "0", "--no-progress"]) == 0  # fmt: skip
    report = json.loads((output / "report.json").read_text())
    assert report["models"][0]["decoder_inputs"] == "greedy translations"
    assert report["models"][0]["num_sentences"] == 2
    assert "alpha_trajectories" not in report["figures"] and report["attention_maps"] == []
    assert "has no `alpha_history.json`, so α over training is not shown" in (output / "report.md").read_text()


def test_bad_input_gets_a_one_line_error(model_folders, capsys):
    _, folder = model_folders
    (folder / "bert").mkdir()
    (folder / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "short.txt").write_text("ein hund\n")
    (folder / "empty.txt").write_text("\n\n")
    (folder / "latin1.txt").write_bytes("ein hund\nzwei k\xe4tzchen\n".encode("latin-1"))
    source = str(folder / "source.txt")
    model = str(folder / "adaptive")
    cases = [
        ([str(folder / "missing"), "--source_file", source], "missing: no such folder"),
        ([str(folder), "--source_file", source], "no config.json there"),
        ([model, "--compare", str(folder / "bert"), "--source_file", source], "holds a 'bert' model; expected"),
        ([model, "--source_file", source, "--target_file", str(folder / "short.txt")], "has 4 lines but"),
        ([model, "--source_file", str(folder / "empty.txt")], "empty.txt contains no sentences"),
        ([model, "--source_file", str(folder / "latin1.txt")], "latin1.txt line 2: not valid UTF-8"),
        ([model, "--source_file", str(folder / "nowhere.txt")], "nowhere.txt does not exist"),
        ([model, "--source_file", source, "--sample_size", "0"], "--sample_size must be a positive"),
        ([model, "--compare", model, "--source_file", source], "distinct names"),
    ]
    for arguments, message in cases:
        assert main(["analyze", *arguments, "--output", str(folder / "out")]) == 1, message
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and message in error, (message, error)
    assert not (folder / "out").exists()


def test_reports_need_distinct_model_names(tmp_path):
    analysis = ModelAnalysis(name="same", model_type="marian", num_sentences=1, decoder_inputs="references",
                             attention={})  # fmt: skip
    with pytest.raises(HfEntmaxValueError, match="distinct names"):
        write_report([analysis, analysis], tmp_path / "report")
    assert not (tmp_path / "report").exists()
