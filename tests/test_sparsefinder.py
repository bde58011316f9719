"""Sparsefinder: operating points, predicted graphs, restricted attention, training, metrics, save/load and the
`hf-entmax sparsefinder` command (tiny models and data made here)."""

import json
import math
import os
import stat

import pytest
import torch
from helpers import SENTENCES, random_predictor, tiny_model
from transformers.cache_utils import EncoderDecoderCache, StaticCache
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from hf_entmax.analysis.statistics import allowed_keys
from hf_entmax.cli import main
from hf_entmax.modeling.sparsefinder_attention import (
    PREDICTOR_FILE,
    QUANTILE_STEPS,
    LayerProjections,
    OperatingPoint,
    PredictedSparsity,
    SparsefinderPredictor,
    bucket_edges,
    distance_key_side,
    effective_graph,
    nearest_graph,
)
from hf_entmax.sparsefinder import (
    AttentionBatch,
    AttentionSample,
    GraphScores,
    choose_points,
    evaluate_points,
    graph_recall,
)
from hf_entmax.sparsefinder.train import TrainingSettings, train_layer


def test_operating_points_read_and_write_their_spec_and_refuse_bad_ones():
    point = OperatingPoint.parse("distance:threshold=1.5,window=2")
    assert point == OperatingPoint("distance", 1.5, 2)
    assert OperatingPoint.parse(point.spec()) == point
    specs = (
        "nearest:keys=8",
        "quantization:buckets=8",
        "clustering:clusters=4",
        "window:size=0",
        "distance:threshold=inf",
    )
    for spec in specs:
        assert OperatingPoint.parse(spec).spec() == spec
    bad = {
        "knn:k=3": "unknown method 'knn'",
        "nearest:k=3": "'k=3' is not one of keys=…, window=…",
        "nearest:keys=0": "must be an integer ≥ 1",
        "nearest:keys=2.5": "not a number",
        "distance:threshold=-1": "must be a positive number",
        "distance:buckets=2": "'buckets=2' is not one of threshold=…, window=…",
        "quantization:buckets=two": "not a number",
        "clustering:clusters=0": "must be an integer ≥ 1",
        "window:size=2,window=1": "the window method has no extra `window`",
        "distance:window=1": "gives no threshold=…",
    }
    for spec, message in bad.items():
        with pytest.raises(ValueError, match=message):
            OperatingPoint.parse(spec)


def test_a_graph_of_all_pairs_reproduces_full_attention_exactly(batch):
    model = tiny_model()
    with torch.no_grad():
        full = model(**batch, output_attentions=True)
        predictor = random_predictor(model)
        for settings in ("distance:threshold=inf", "window:size=64", {"cross": "distance:threshold=inf"}):
            model.set_predicted_sparsity(settings, predictor=predictor)
            restricted = model(**batch, output_attentions=True)
            assert torch.equal(restricted.logits, full.logits), settings
            for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
                for ours, theirs in zip(getattr(restricted, name), getattr(full, name), strict=True):
                    assert torch.equal(ours, theirs)
        model.set_predicted_sparsity(None)
        assert all(getattr(module, "predicted_sparsity", None) is None for module in model.modules())


def test_restricted_attention_is_exactly_zero_off_the_graph_and_a_query_with_no_predicted_key_gets_its_full_row(
    batch,
):
    model = tiny_model()
    with torch.no_grad():
        full = model(**batch, output_attentions=True)
        # Size 0: each query keeps its own position only, a set that misses the rest of its support.
        model.set_predicted_sparsity("window:size=0")
        diagonal = model(**batch, output_attentions=True)
        real = batch["attention_mask"].bool()  # (B, S)
        for attention in diagonal.encoder_attentions:
            assert not attention.isnan().any()
            # A real query keeps only its own position: probability 1 there, exact zeros elsewhere.
            rows = attention.transpose(1, 2)[real]  # (real queries, H, S)
            expected = torch.eye(6)[real.nonzero(as_tuple=True)[1]][:, None].expand_as(rows)
            assert torch.equal(rows, expected)
        # A padding query may attend to the real keys but not to its own (padding) position: nothing of its window
        # is allowed, so it falls back to its full row (the first layer's, where the inputs are still the same).
        padding_rows = diagonal.encoder_attentions[0].transpose(1, 2)[~real]
        assert torch.equal(padding_rows, full.encoder_attentions[0].transpose(1, 2)[~real])
        # A threshold no projected pair is within: every query falls back to its full row, i.e. full attention.
        model.set_predicted_sparsity("distance:threshold=1e-12", predictor=random_predictor(model))
        fallback = model(**batch, output_attentions=True)
        assert not fallback.logits.isnan().any()
        torch.testing.assert_close(fallback.logits, full.logits, rtol=0, atol=0)


def test_the_nearest_graph_keeps_each_querys_nearest_allowed_keys():
    """Each query keeps its `keys` allowed keys of smallest distance, however near a key it may not attend to is, and
    all of its allowed keys where it has no more than that."""
    squared = torch.rand(2, 3, 5, 7, dtype=torch.float64)  # (B, H, Lq, Lk)
    allowed = torch.rand(2, 1, 5, 7) < 0.6
    allowed[0, 0, 0] = False
    allowed[0, 0, 0, :2] = True  # a query with two allowed keys
    squared[..., 6] = 0.0  # the nearest key of every query, allowed only where `allowed` says
    graph = nearest_graph(squared, 3, allowed)
    assert not (graph & ~allowed).any()
    kept = graph.sum(-1)
    assert torch.equal(kept, allowed.sum(-1).clamp(max=3).expand_as(kept))
    outside = squared.masked_fill(graph | ~allowed, float("inf")).amin(-1)  # nearest allowed key left out
    inside = squared.masked_fill(~graph, float("-inf")).amax(-1)  # farthest key kept
    assert (inside <= outside).all()
    assert torch.equal(nearest_graph(squared, 100), torch.ones_like(graph))


def position_only_predictor(model) -> SparsefinderPredictor:
    """Projections that see nothing (zero) and a position term of 1 per head: the distance graph of threshold t is the
    pairs at most t² positions apart, in cross-attention too."""
    predictor = random_predictor(model)
    for layers in predictor.layers.values():
        for layer in layers:
            layer.query.zero_(), layer.key.zero_(), layer.position.fill_(1.0)
    return predictor


@pytest.mark.parametrize("cache_implementation", [None, "static"])
@pytest.mark.parametrize("spec", ["window:size=1", "distance:threshold=1.5", "nearest:keys=2"])
def test_cached_generation_with_positions_in_the_graph_equals_uncached_teacher_forcing(
    batch, cache_implementation, spec
):
    """In cached decoding a query's position is its number of visible keys − 1 (a static cache holds more keys than
    the sequence so far), and in cross-attention the number of target tokens before it: a window, and the distance
    method's position term (in every attention type), must mean the same there as in teacher forcing."""
    model = tiny_model(seed=2, init_std=2.0)
    model.set_predicted_sparsity(spec, predictor=position_only_predictor(model))
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask")}
    generated = model.generate(
        **inputs, max_length=8, num_beams=1, do_sample=False, cache_implementation=cache_implementation
    )
    with torch.no_grad():
        logits = model(**inputs, decoder_input_ids=generated[:, :-1]).logits
    # Greedy steps are the argmax of the uncached logits, before the end token (the last step is forced to </s>).
    predicted, generated_next = logits.argmax(-1)[:, :-1], generated[:, 1:-1]
    running = (generated[:, :-2] == model.config.eos_token_id).cumsum(-1) == 0
    assert running.any() and torch.equal(predicted[running], generated_next[running])


def test_restricted_beam_search_projects_each_inputs_source_keys_once_and_decodes_as_projecting_every_step(
    batch, monkeypatch
):
    """Cross-attention's projected keys are made at an input's first decoding step and reused at the next ones (the
    source cache stays in place); a new input gets its own."""
    model = tiny_model(seed=3, init_std=1.0)
    model.set_predicted_sparsity({"cross": "distance:threshold=10"}, predictor=random_predictor(model))
    first = {key: batch[key] for key in ("input_ids", "attention_mask")}
    second = {"input_ids": torch.tensor([[14, 13, 12, 11, 10, 1], [9, 8, 7, 6, 5, 1]])}
    settings = dict(max_new_tokens=8, min_new_tokens=8, num_beams=3, output_scores=True, return_dict_in_generate=True)
    projected = []
    project_keys = LayerProjections.project_keys
    monkeypatch.setattr(
        LayerProjections, "project_keys", lambda self, key: projected.append(key) or project_keys(self, key)
    )
    kept = [model.generate(**inputs, **settings) for inputs in (first, second)]
    assert len(projected) == 2 * model.config.decoder_layers
    projected.clear()

    def project_every_step(self, key, cached):
        projected_key = self.projections.project_keys(key)
        return projected_key, distance_key_side(projected_key)

    monkeypatch.setattr(PredictedSparsity, "source_keys", project_every_step)
    every_step = [model.generate(**inputs, **settings) for inputs in (first, second)]
    assert len(projected) == 2 * model.config.decoder_layers * 8
    for ours, theirs in zip(kept, every_step, strict=True):
        assert torch.equal(ours.sequences, theirs.sequences)
        assert torch.equal(ours.sequences_scores, theirs.sequences_scores)
    # The graph left pairs out: restricted attention scored the beams differently from full attention.
    model.set_predicted_sparsity(None)
    assert not torch.equal(model.generate(**first, **settings).sequences_scores, kept[0].sequences_scores)


def test_a_static_cache_refilled_in_place_for_a_new_input_gets_that_inputs_projected_source_keys(batch):
    model = tiny_model(seed=3, init_std=1.0)
    model.set_predicted_sparsity({"cross": "distance:threshold=10"}, predictor=random_predictor(model))
    first = {key: batch[key] for key in ("input_ids", "attention_mask")}
    second = {"input_ids": torch.tensor([[14, 13, 12, 11, 10, 1], [9, 8, 7, 6, 5, 1]])}
    settings = dict(max_new_tokens=6, min_new_tokens=6, output_scores=True, return_dict_in_generate=True)
    cache = EncoderDecoderCache(
        StaticCache(config=model.config, max_cache_len=12), StaticCache(config=model.config, max_cache_len=6)
    )
    model.generate(**first, **settings, cache=cache)
    source_keys = cache.cross_attention_cache.layers[0].keys
    cache.reset()
    reused = model.generate(**second, **settings, cache=cache)
    assert cache.cross_attention_cache.layers[0].keys is source_keys  # the same tensor, refilled
    fresh = model.generate(**second, **settings)
    for ours, theirs in zip(reused.scores, fresh.scores, strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("spec", ["window:size=1", "distance:threshold=1.5", "nearest:keys=2"])
def test_left_padding_changes_nothing_in_restricted_decoder_only_generation(spec):
    """Batched generation of the decoder-only model pads on the left: a query's position is then its index among the
    keys, padding included (as ALiBi's distances count it), so a row's restricted logits and continuation are those
    of the row alone."""
    from test_positions import BOS, PAD, tiny_decoder

    model = tiny_decoder(position_embedding_type="nape")
    model.set_predicted_sparsity(spec, predictor=position_only_predictor(model))
    alone = torch.tensor([[BOS, 5, 9, 7]])
    padded = torch.tensor([[PAD, PAD, PAD, BOS, 5, 9, 7], [BOS, 8, 6, 4, 12, 10, 3]])
    mask = (padded != PAD).long()
    with torch.no_grad():
        expected = model(input_ids=alone).logits[0]
        torch.testing.assert_close(model(input_ids=padded, attention_mask=mask).logits[0, 3:], expected)
    settings = dict(max_new_tokens=6, do_sample=False, num_beams=1, pad_token_id=PAD, eos_token_id=None)
    generated = model.generate(padded, attention_mask=mask, **settings)
    assert torch.equal(generated[0, 3:], model.generate(alone, **settings)[0])


def test_windows_and_missing_projections_are_refused_where_they_cannot_apply():
    model = tiny_model()
    with pytest.raises(ValueError, match="windows exist in self-attention only, not in cross"):
        model.set_predicted_sparsity({"cross": "window:size=2"})
    predictor = random_predictor(model)
    predictor.layers.pop("cross")
    with pytest.raises(ValueError, match="no projections for cross"):
        model.set_predicted_sparsity({"cross": "distance:threshold=10"}, predictor=predictor)
    with pytest.raises(ValueError, match="centroids for clusters=2 only"):
        model.set_predicted_sparsity("clustering:clusters=5", predictor=predictor)
    with pytest.raises(ValueError, match="unknown attention type 'decoder'"):
        model.set_predicted_sparsity({"decoder": "window:size=1"})
    # A point for every type applies where it can: a window to the two self-attention types.
    assert set(model.set_predicted_sparsity("window:size=1")) == {"encoder_self", "decoder_self"}
    assert set(model.set_predicted_sparsity("distance:threshold=1", predictor=predictor)) == {
        "encoder_self",
        "decoder_self",
    }


def test_recall_mass_sparsity_cost_and_fallback_on_a_hand_made_graph():
    # One sentence of 3 real tokens and one padding position; one head.
    allowed = allowed_keys(torch.tensor([[True, True, True, False]]), torch.tensor([[True, True, True, False]]))
    probabilities = torch.tensor([[[[0.75, 0.25, 0, 0], [0, 0.5, 0.5, 0], [0.9, 0, 0.1, 0], [0, 0, 0, 0]]]])
    support = probabilities > 0
    graph = torch.tensor([[[[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]]], dtype=torch.bool)
    recall, counted = graph_recall(graph, support, allowed)
    assert recall[0, 0, :3].tolist() == [0.5, 1.0, 0.0] and counted.tolist() == [[True, True, True, False]]
    # The third query has no predicted key: restricted attention gives it its full row.
    effective = effective_graph(graph, allowed[:, None])
    assert effective[0, 0, 2].tolist() == [True, True, True, False]

    sample = AttentionSample(
        {"encoder_self": [[AttentionBatch(torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2), probabilities, allowed)]]},
        1,
    )
    own, scores = evaluate_points(sample, None, {"encoder_self": [OperatingPoint("window", 0)]}, progress=False)
    # Own graph: densities 2/3, 2/3, 2/3 → sparsity 1/3; recall and mass 1. Cost: 6 of 9 allowed pairs.
    assert own["encoder_self"].mean_sparsity == pytest.approx(1 / 3)
    assert own["encoder_self"].mean_recall == 1.0 and own["encoder_self"].mean_mass == pytest.approx(1.0)
    assert own["encoder_self"].pairs == 6 and own["encoder_self"].allowed_pairs == 9
    # Window 0 keeps the diagonal: density 1/3 per query, recall 1/2 per query, but mass 0.75, 0.5 and 0.1 (the
    # padding query counts for neither); 3 pairs; no fallback.
    window = scores["encoder_self"][0]
    assert window.mean_sparsity == pytest.approx(2 / 3) and window.mean_recall == pytest.approx(0.5)
    assert window.mean_mass == pytest.approx(0.45)
    assert window.to_dict()["mass"] == 0.45 and window.to_dict()["per_head"]["mass"] == [[0.45]]
    assert (window.pairs, window.cost, window.fallback) == (3, pytest.approx(1 / 3), 0.0)


def test_the_chosen_point_is_the_sparsest_reaching_the_recall_and_mass_targets():
    def point(threshold: float, sparsity: float, recall: float, mass: float) -> GraphScores:
        one = torch.ones(1, 1)
        return GraphScores(OperatingPoint("distance", threshold), sparsity * one, recall * one, mass * one, 1, 1)

    dense, middle, sparse = point(3.0, 0.2, 0.97, 0.999), point(2.0, 0.5, 0.8, 0.99), point(1.0, 0.7, 0.6, 0.95)
    scores = [dense, middle, sparse]
    assert choose_points(scores, 0.95)["distance"] is dense
    assert choose_points(scores, 0.0, 0.99)["distance"] is middle  # by the mass alone
    assert choose_points(scores, 0.95, 0.99)["distance"] is dense  # both targets
    assert choose_points(scores, 0.0, 0.9)["distance"] is sparse
    assert choose_points(scores, 0.0, 0.0)["distance"] is sparse  # no target: the sparsest
    # None reaches the targets: the point of highest mass kept (with a mass target), else of highest recall.
    assert choose_points(scores, 0.99)["distance"] is dense
    assert choose_points([middle, sparse], 0.0, 0.9999)["distance"] is middle
    assert choose_points([middle, sparse], 0.99)["distance"] is middle
    with pytest.raises(ValueError, match=r"target_mass must be in \[0, 1\], got 99"):
        choose_points(scores, 0.95, 99)


def test_quantile_bucket_edges_split_the_grid_evenly():
    quantiles = torch.linspace(0, 64, QUANTILE_STEPS + 1).view(1, 1, -1)  # the level t quantile is 64 t
    assert bucket_edges(quantiles, 4).flatten().tolist() == [16.0, 32.0, 48.0]
    assert bucket_edges(quantiles, 1).numel() == 0


def test_contrastive_training_raises_the_recall_of_the_distance_graph():
    """Queries and keys of 4 hidden classes (a direction in the first 4 of 16 dimensions, plus noise); a query's
    support is the keys of its class. Random projections to 2 dimensions mix the classes up; trained ones separate
    them, so the distance graph of the same sparsity recalls far more of the support."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(8):
        query_class, key_class = (
            torch.randint(4, (4, 12), generator=generator),
            torch.randint(4, (4, 12), generator=generator),
        )

        def states(classes: torch.Tensor) -> torch.Tensor:  # (B, 12) classes → (B, 1, 12, 16) states
            noise = torch.randn(4, 1, 12, 16, generator=generator) * 0.5
            noise[..., :4] += 3.0 * torch.eye(4)[classes][:, None]  # the class's direction
            return noise

        support = (query_class[:, :, None] == key_class[:, None, :])[:, None]  # (B, 1, 12, 12)
        batches.append(
            AttentionBatch(
                states(query_class), states(key_class), support.float(), torch.ones(4, 12, 12, dtype=torch.bool)
            )
        )

    def recall_at_sparsity(projections: LayerProjections, sparsity: float) -> float:
        distances, supports = [], []
        for batch in batches:
            distances.append(
                projections.squared_distances(*projections.project(batch.query, batch.key), torch.arange(12)).flatten()
            )
            supports.append(batch.support.flatten())
        distances, supports = torch.cat(distances), torch.cat(supports)
        threshold = distances.quantile(1 - sparsity)
        return float((distances[supports] <= threshold).float().mean())

    settings = TrainingSettings(projection_dim=2, epochs=10, clusters=(2, 4))
    untrained_generator = torch.Generator().manual_seed(1)
    untrained = LayerProjections(
        torch.randn(1, 16, 2, generator=untrained_generator), torch.randn(1, 16, 2, generator=untrained_generator),
        torch.zeros(1, 2, QUANTILE_STEPS + 1),
    )  # fmt: skip
    from tqdm.auto import tqdm

    with tqdm(disable=True) as bar:
        trained, distances = train_layer(batches, settings, torch.Generator().manual_seed(0), bar)
    # The support is about 1/4 of the pairs: at sparsity 0.6 a perfect predictor recalls everything.
    before, after = recall_at_sparsity(untrained, 0.6), recall_at_sparsity(trained, 0.6)
    assert after > 0.9 and after > before + 0.2, (before, after)
    assert set(trained.centroids) == {2, 4} and trained.quantiles.shape == (1, 2, QUANTILE_STEPS + 1)
    assert distances.numel() == sum(int(batch.support.sum()) for batch in batches)


@pytest.mark.parametrize("kind", ["encoder_self", "cross"])
def test_the_position_term_learns_a_local_head_whose_queries_and_keys_carry_no_position(kind):
    """An ALiBi head with a steep slope: its support is the keys at most 2 positions from the query, whatever the
    queries and keys (here noise) say. Projections alone cannot find it; with the position term the distance graph
    at the support's own sparsity recalls nearly all of it, in self- and cross-attention (query i, key j of 14)."""
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(0)
    query_len, key_len = (14, 14) if kind == "encoder_self" else (10, 14)
    offsets = torch.arange(query_len)[:, None] - torch.arange(key_len)
    support = (offsets.abs() <= 2).expand(4, 1, query_len, key_len)
    batches = [
        AttentionBatch(
            torch.randn(4, 1, query_len, 16, generator=generator),
            torch.randn(4, 1, key_len, 16, generator=generator),
            support.float(),  # probabilities: any positive values on the support
            torch.ones(4, query_len, key_len, dtype=torch.bool),
        )
        for _ in range(8)
    ]
    sparsity = 1 - support.float().mean().item()

    def recall(projections: LayerProjections) -> float:
        """Recall of the distance graph that keeps as many pairs as the support has."""
        distances = []
        for batch in batches:
            distances.append(
                projections.squared_distances(
                    *projections.project(batch.query, batch.key), torch.arange(query_len)
                ).flatten()
            )
        distances = torch.cat(distances)
        threshold = distances.quantile(1 - sparsity)
        return float((distances[support.repeat(8, 1, 1, 1).flatten()] <= threshold).float().mean())

    results = {}
    for position_term in (False, True):
        settings = TrainingSettings(projection_dim=2, epochs=10, clusters=(2,), position_term=position_term)
        with tqdm(disable=True) as bar:
            projections, _ = train_layer(batches, settings, torch.Generator().manual_seed(0), bar)
        assert (projections.position is not None) == position_term
        results[position_term] = recall(projections)
    assert results[True] > 0.95 and results[False] < 0.6, results


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_the_predictor_file_is_readable_like_the_model_and_saves_over_the_file_it_came_from(tmp_path):
    path = tmp_path / PREDICTOR_FILE
    predictor = random_predictor(tiny_model())
    umask = os.umask(0o022)
    try:
        predictor.save(path)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not safetensors 0.8's private 0600
    # The loaded tensors map the file: saving them back over it must not read a truncated file.
    SparsefinderPredictor.load(path).save(path)
    reloaded = SparsefinderPredictor.load(path)
    for kind, layers in predictor.layers.items():
        for ours, theirs in zip(layers, reloaded.layers[kind], strict=True):
            assert torch.equal(ours.query, theirs.query) and torch.equal(ours.key, theirs.key)
            assert torch.equal(ours.quantiles, theirs.quantiles) and torch.equal(ours.position, theirs.position)


def test_the_predictor_saves_loads_and_runs_in_a_folder_loaded_without_hf_entmax_code(tokenizer, tmp_path, batch):
    model = tiny_model(vocab_size=len(tokenizer))
    predictor = random_predictor(model)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    predictor.save(tmp_path / PREDICTOR_FILE)
    loaded = SparsefinderPredictor.load(tmp_path / PREDICTOR_FILE)
    assert loaded.metadata == predictor.metadata and loaded.projection_dim == 3
    for kind, layers in predictor.layers.items():
        for ours, theirs in zip(layers, loaded.layers[kind], strict=True):
            assert torch.equal(ours.query, theirs.query) and torch.equal(ours.key, theirs.key)
            assert torch.equal(ours.quantiles, theirs.quantiles) and torch.equal(
                ours.centroids[2], theirs.centroids[2]
            )
            assert torch.equal(ours.position, theirs.position)

    # The folder's own flat files (transformers_modules), as a Hub user without hf_entmax loads them.
    remote_class = get_class_from_dynamic_module(
        "modeling_adaptive_entmax_marian.AdaptiveEntmaxMarianMTModel", tmp_path
    )
    assert remote_class.__module__.startswith("transformers_modules.")
    remote = remote_class.from_pretrained(tmp_path).eval()
    spec = "quantization:buckets=4,window=1"
    with torch.no_grad():
        model.set_predicted_sparsity(spec, predictor=predictor)
        expected = model(**batch).logits
        remote.set_predicted_sparsity(spec)  # from the folder's own sparsefinder.safetensors
        torch.testing.assert_close(remote(**batch).logits, expected, rtol=0, atol=1e-5)
        model.set_predicted_sparsity(spec, predictor=str(tmp_path / PREDICTOR_FILE))  # the file itself
        assert torch.equal(model(**batch).logits, expected)
    for read in (SparsefinderPredictor.load, SparsefinderPredictor.from_pretrained):
        with pytest.raises(ValueError, match="is not a Sparsefinder predictor"):
            read(tmp_path / "model.safetensors")


def one_line_error(capsys, command: str, arguments: list[str]) -> str:
    assert main([command, *arguments]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.fixture
def sparse_folder(tokenizer, tmp_path):
    """A sparsemax (α = 2) model folder and 16 sentence pairs."""
    model = tiny_model(seed=2, vocab_size=len(tokenizer), init_std=2.0, alpha_init=2.0, learn_alpha=False)
    model.generation_config.max_length = 12
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "source.txt").write_text("\n".join(SENTENCES[0::2] * 4) + "\n", encoding="utf-8")
    (tmp_path / "target.txt").write_text("\n".join(SENTENCES[1::2] * 4) + "\n", encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_command_writes_the_report_figures_and_predictor_and_translate_uses_an_operating_point(sparse_folder, capsys):
    folder = sparse_folder
    arguments = ["sparsefinder", str(folder / "model"), "--source_file", str(folder / "source.txt"),
                 "--target_file", str(folder / "target.txt"), "--output", str(folder / "report"), "--epochs", "2",
                 "--window", "1", "--save_to_model", "--no-progress"]  # fmt: skip
    assert main(arguments) == 0
    written = {path.name for path in (folder / "report").iterdir()}
    assert {"report.json", "report.md", "head_recall.png", PREDICTOR_FILE} <= written
    assert {f"pareto_{kind}.png" for kind in ("encoder_self", "decoder_self", "cross")} <= written
    report = json.loads((folder / "report" / "report.json").read_text())
    assert report["sample"] == {"description": "source.txt / target.txt", "training_sentences": 8,
                                "heldout_sentences": 8}  # fmt: skip
    for kind, attention in report["attention"].items():
        assert 0.0 < attention["model_sparsity"] < 1.0
        assert set(attention["chosen"]) == ({"distance", "nearest", "quantization", "clustering"} | (
            {"window"} if kind != "cross" else set()))  # fmt: skip
        for point in attention["points"]:
            assert 0.0 <= point["sparsity"] <= 1.0 and 0.0 <= point["recall"] <= 1.0 and point["pairs"] > 0
            # A graph with every non-zero key keeps all the attention (up to float32 sums of a row's probabilities).
            assert 0.0 <= point["mass"] <= 1.0 and (point["recall"] < 1.0 or point["mass"] > 1 - 1e-4)
            if point["method"] != "window" and kind != "cross":
                assert point["point"].endswith(",window=1")
        # The learned position term of every head of both layers (4 heads), as the saved predictor has it.
        weights = attention["position_weight_per_head"]
        assert len(weights) == 2 and all(len(heads) == 4 and min(heads) >= 0.0 for heads in weights)
    saved = SparsefinderPredictor.load(folder / "model" / PREDICTOR_FILE)
    assert saved.position_weights() == {
        kind: value["position_weight_per_head"] for kind, value in report["attention"].items()
    }
    translation = report["translation"]
    assert math.isfinite(translation["full"]["bleu"]) and translation["points"]
    assert (folder / "model" / PREDICTOR_FILE).is_file()
    markdown = (folder / "report" / "report.md").read_text()
    assert "## Decoder self-attention" in markdown and "hf-entmax translate --model" in markdown
    assert "position term, the weight of |i − j| per head: layer 0: " in markdown
    assert "| operating point | sparsity | recall | mass kept |" in markdown
    # A second run may write over its own report.
    assert main([*arguments, "--no-bleu", "--methods", "window"]) == 0
    capsys.readouterr()

    chosen = report["attention"]["decoder_self"]["chosen"]["distance"]
    output = folder / "translations.txt"
    assert main(["translate", "--model", str(folder / "model"), "--input", str(folder / "source.txt"), "--output",
                 str(output), "--sparsefinder", f"decoder_self={chosen}", "cross=clustering:clusters=2",
                 "--no-progress"]) == 0  # fmt: skip
    assert len(output.read_text().splitlines()) == 16


def test_bad_input_gives_one_line_errors(sparse_folder, capsys):
    folder = sparse_folder
    common = [str(folder / "model"), "--target_file", str(folder / "target.txt"), "--output", str(folder / "out")]
    error = one_line_error(capsys, "sparsefinder", [*common, "--source_file", str(folder / "missing.txt")])
    assert "missing.txt does not exist" in error
    error = one_line_error(capsys, "sparsefinder", [*common, "--source_file", str(folder / "source.txt"),
                                                    "--methods", "lsh"])  # fmt: skip
    assert "invalid choice: 'lsh'" in error
    error = one_line_error(capsys, "sparsefinder", [*common, "--source_file", str(folder / "source.txt"),
                                                    "--target_recall", "1.5"])  # fmt: skip
    assert "--target_recall must be in [0, 1], got 1.5" in error
    error = one_line_error(capsys, "sparsefinder", [*common, "--source_file", str(folder / "source.txt"),
                                                    "--target_mass", "-0.1"])  # fmt: skip
    assert "--target_mass must be in [0, 1], got -0.1" in error
    (folder / "taken").mkdir()
    (folder / "taken" / "notes.txt").write_text("mine")
    error = one_line_error(capsys, "sparsefinder", [str(folder / "model"), "--source_file", str(folder / "source.txt"),
                                                    "--target_file", str(folder / "target.txt"), "--output",
                                                    str(folder / "taken")])  # fmt: skip
    assert "not from an earlier `hf-entmax sparsefinder`" in error

    translate = ["--model", str(folder / "model"), "--input", str(folder / "source.txt"), "--no-progress"]
    error = one_line_error(capsys, "translate", [*translate, "--sparsefinder", "distance:threshold=-1"])
    assert "--sparsefinder: `threshold` of the distance method must be a positive number, got -1.0" in error
    error = one_line_error(capsys, "translate", [*translate, "--sparsefinder", "distance:threshold=1"])
    assert f"has no {PREDICTOR_FILE}" in error
    missing = str(folder / "nope.safetensors")
    error = one_line_error(capsys, "translate", [*translate, "--sparsefinder", "window:size=1",
                                                 "--sparsefinder_predictor", missing])  # fmt: skip
    assert "nope.safetensors: no such file or folder" in error
