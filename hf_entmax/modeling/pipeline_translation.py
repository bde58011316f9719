"""A translation pipeline for encoder–decoder models, with the arguments of transformers 4's.

transformers 5 removed the built-in "translation" task. This class brings it back: a model folder
whose config.json has a ``custom_pipelines["translation"]`` entry pointing here makes
``pipeline("translation", model=folder, trust_remote_code=True)`` work, and an already loaded
model can use it directly: ``TranslationPipeline(model=model, tokenizer=tokenizer)``.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

import torch
from transformers import GenerationConfig, LogitsProcessorList, Pipeline, PreTrainedConfig, PreTrainedTokenizerBase
from transformers.utils import logging

from .configuration_adaptive_entmax_marian import check_generation_settings, position_limit
from .sentence_ends import SentenceEndsBeforeStop, count_sentence_ends, sentence_end_token_ids


logger = logging.get_logger(__name__)

# transformers 4's translation pipeline generated at most this many tokens when neither the call nor the model's
# generation config set a length limit.
DEFAULT_MAX_NEW_TOKENS = 256

# Length limits that `generate` takes either in new tokens or as a total length, the decoder's prompt included.
LENGTH_LIMITS = (("max_new_tokens", "max_length"), ("min_new_tokens", "min_length"))

# A tokenizer without a length limit reports transformers' VERY_LARGE_INTEGER (about 1e30) as its model_max_length.
UNLIMITED_TOKENIZER_LENGTH = int(1e20)

NOT_TRUNCATING = (False, None, "do_not_truncate")


def input_length_limit(config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase) -> tuple[int, str] | None:
    """The most source tokens (with ``</s>``) a model takes, and where that limit comes from.

    It is the smaller of the encoder's position table (``config.max_position_embeddings``, for sinusoidal positions)
    and the tokenizer's ``model_max_length``; None if neither sets one.
    """
    limits = []
    positions = position_limit(config)
    if positions is not None:
        limits.append((positions, "the model's max_position_embeddings"))
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if tokenizer_limit is not None and tokenizer_limit < UNLIMITED_TOKENIZER_LENGTH:
        limits.append((tokenizer_limit, "the tokenizer's model_max_length"))
    return min(limits, default=None)


class TranslationPipeline(Pipeline):
    """Translate text with an encoder–decoder model, as transformers 4's ``TranslationPipeline`` did.

    Call it with a string or a list of strings. A string gives a list with one dict, a list gives one
    dict per input, in order (a list of dicts per input with ``num_return_sequences`` > 1).

    Arguments (at the call, or once when the pipeline is made):

    - ``max_length`` (`int`): longest translation in tokens, the decoder's start token included, as in
      ``generate``; ``max_new_tokens`` (`int`) counts only the generated tokens. Without either, the model's
      generation config decides, else at most 256 new tokens (within the decoder's positions). A limit beyond
      the decoder's sinusoidal positions (``config.max_position_embeddings``) is refused; relative positions
      (RoPE, ALiBi, NAPE, none) have no such limit.
    - ``truncation`` (`bool` or a tokenizer truncation strategy, default `False`): cut inputs longer than the
      model takes (``config.max_position_embeddings`` for sinusoidal positions, or the tokenizer's
      ``model_max_length`` if smaller) to that length. Without it, such an input raises a `ValueError` naming its
      length and the limit.
    - ``return_text`` (`bool`, default `True` unless ``return_tensors=True``): give ``"translation_text"``.
    - ``return_tensors`` (`bool`, default `False` unless ``return_text=False``): give
      ``"translation_token_ids"``, the generated ids (a 1-D tensor, with the decoder's start token, and
      padding when batched with a longer translation). Both `False` is refused.
    - ``clean_up_tokenization_spaces`` (`bool`, default `False`) and ``skip_special_tokens`` (`bool`, default
      `True`): how ids are decoded to text.
    - ``src_lang`` / ``tgt_lang`` (`str`): language codes for a multilingual tokenizer (one with
      ``_build_translation_inputs``, such as NLLB's or M2M100's), used as transformers 4 did; a model
      that translates one fixed pair ignores them, and logs that once.
    - ``match_sentences`` (`bool`, default `False`): let no translation end before it has as many sentence ends as
      its input (``sentence_ends.py``): a model trained on inputs of up to n sentences stops after about n on a
      longer paragraph.
    - ``batch_size`` (`int`): inputs per ``generate`` call.
    - Anything else goes to ``model.generate``: ``num_beams``, ``num_return_sequences``, ``do_sample``,
      ``generation_config``, … Settings that ``generate`` would fail on deep inside (``num_beams`` 0, a token id past
      the vocabulary) raise a `ValueError` naming them, whether the call, a ``generation_config`` passed or the
      model's own generation config sets them.

    Example:

    ```python
    >>> translator = TranslationPipeline(model=model, tokenizer=tokenizer)
    >>> translator(["ein kleiner hund", "zwei katzen"], num_beams=4, max_new_tokens=64)
    [{'translation_text': 'a small dog'}, {'translation_text': 'two cats'}]
    ```
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _pipeline_calls_generate = True

    def __init__(self, *args, device=None, **kwargs):
        model = kwargs.get("model", args[0] if args else None)
        # Pipeline's default device is cuda:0 whenever CUDA exists; stay where the model already is.
        if device is None and isinstance(model, torch.nn.Module):
            device = next(model.parameters()).device
        # transformers 4's default output limit, but never more than the decoder's position table holds (the start
        # token takes one; relative positions have no table). Pipeline adds it only where neither the call nor the
        # model's generation config sets a length limit.
        config = getattr(model, "config", None)
        positions = None if config is None else position_limit(config)
        max_new_tokens = DEFAULT_MAX_NEW_TOKENS if positions is None else min(DEFAULT_MAX_NEW_TOKENS, positions - 1)
        self._default_generation_config = GenerationConfig(max_new_tokens=max_new_tokens)
        super().__init__(*args, device=device, **kwargs)

    def _sanitize_parameters(
        self,
        truncation=None,
        src_lang=None,
        tgt_lang=None,
        return_text=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        skip_special_tokens=None,
        match_sentences=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if match_sentences is not None:
            if not isinstance(match_sentences, bool):
                raise ValueError(f"`match_sentences` must be True or False, got {match_sentences!r}")
            preprocess_params["match_sentences"] = match_sentences
        if src_lang is not None:
            preprocess_params["src_lang"] = src_lang
        if tgt_lang is not None:
            preprocess_params["tgt_lang"] = tgt_lang

        postprocess_params = {}
        for name, value in (
            ("return_text", return_text),
            ("return_tensors", return_tensors),
            ("clean_up_tokenization_spaces", clean_up_tokenization_spaces),
            ("skip_special_tokens", skip_special_tokens),
        ):
            if value is not None:
                if not isinstance(value, bool):
                    raise ValueError(f"`{name}` must be True or False, got {value!r}")
                postprocess_params[name] = value
        if return_tensors and return_text is None:
            # As in transformers 4: asking for the ids alone gives the ids instead of the text.
            postprocess_params["return_text"] = False
        if return_text is False and return_tensors is None:
            postprocess_params["return_tensors"] = True
        # Checked against what the pipeline was made with too: a call's arguments complete those.
        settings = {**getattr(self, "_postprocess_params", {}), **postprocess_params}
        if not settings.get("return_text", True) and not settings.get("return_tensors", False):
            raise ValueError("`return_text=False` with `return_tensors=False` leaves nothing to return: drop one")
        return preprocess_params, generate_kwargs, postprocess_params

    def preprocess(
        self,
        text: str,
        truncation=False,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        match_sentences: bool = False,
    ):
        if not isinstance(text, str):
            raise TypeError(f"TranslationPipeline translates strings, got {type(text).__name__}: {text!r}")
        limit = input_length_limit(self.model.config, self.tokenizer)
        truncating = truncation not in NOT_TRUNCATING
        tokenizer_kwargs = {"return_tensors": "pt", "truncation": truncation}
        if truncating and limit is not None:
            tokenizer_kwargs["max_length"] = limit[0]
        if not truncating:
            # An input past the tokenizer's model_max_length gets the one error below, not a warning before it.
            tokenizer_kwargs["verbose"] = False
        build_translation_inputs = getattr(self.tokenizer, "_build_translation_inputs", None)
        if build_translation_inputs is not None:
            # A multilingual tokenizer (NLLB, M2M100, mBART-50, …) sets the source language and returns the target
            # language's id as `forced_bos_token_id` for generate, as transformers 4 used it.
            inputs = build_translation_inputs(text, src_lang=src_lang, tgt_lang=tgt_lang, **tokenizer_kwargs)
        else:
            if src_lang is not None or tgt_lang is not None:
                logger.warning_once(
                    "TranslationPipeline: `src_lang` and `tgt_lang` are ignored, because this model's tokenizer has "
                    "no language codes: the model translates the one language pair it was trained on"
                )
            inputs = self.tokenizer(text, **tokenizer_kwargs)
        length = inputs["input_ids"].shape[-1]
        if limit is not None and length > limit[0]:
            excerpt = text if len(text) <= 40 else text[:40] + "…"
            raise ValueError(
                f"TranslationPipeline: the input {excerpt!r} has {length} tokens, but this model takes at most "
                f"{limit[0]} ({limit[1]}): pass truncation=True to cut it to {limit[0]} tokens, or split it"
            )
        if match_sentences:
            # A tensor, so that batching stacks one count per input (other entries are per-call settings).
            inputs["sentence_ends"] = torch.tensor([count_sentence_ends(text)])
        return inputs

    def _forward(self, model_inputs, **generate_kwargs):
        model_inputs = dict(model_inputs)
        sentence_ends = model_inputs.pop("sentence_ends", None)  # (batch,) with match_sentences
        # Entries that are not tensors come from a multilingual tokenizer (`forced_bos_token_id`): generation
        # arguments, the same for every input of a call. Batched, the collate function lists one per input.
        tokenizer_generate_kwargs = {}
        for name in [name for name, value in model_inputs.items() if not torch.is_tensor(value)]:
            value = model_inputs.pop(name)
            tokenizer_generate_kwargs[name] = value[0] if isinstance(value, list) else value
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = {**tokenizer_generate_kwargs, **generate_kwargs}
        # What the caller set: the call's arguments on top of the pipeline's, unless the call passes a
        # generation_config, which then replaces the pipeline's (as Pipeline._prepare_generate_kwargs does).
        given = (
            generate_kwargs if "generation_config" in generate_kwargs else {**self._generate_kwargs, **generate_kwargs}
        )
        decoder_input_ids = given.get("decoder_input_ids")
        prompt_length = 1 if decoder_input_ids is None else decoder_input_ids.shape[-1]
        # What generate would fail on deep inside (num_beams 0, a token id past the vocabulary, an output longer than
        # the decoder's positions), whether the call, a generation_config passed or the model's set it.
        check_generation_settings(
            self._get_set_generation_params(given), self.model.config, "TranslationPipeline", prompt_length
        )
        overrides = self._total_length_limits(given, prompt_length)
        # The overrides go where generate reads them: into the call's kwargs, or a copy of its generation_config.
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs, **overrides)
        if sentence_ends is not None:
            if getattr(self, "_sentence_end_token_ids", None) is None:
                self._sentence_end_token_ids = sentence_end_token_ids(self.tokenizer)
            guard = SentenceEndsBeforeStop(
                sentence_ends.flatten().tolist(),
                self._sentence_end_token_ids,
                self.model.generation_config.eos_token_id,
            )
            generate_kwargs["logits_processor"] = LogitsProcessorList(
                [*generate_kwargs.get("logits_processor", []), guard]
            )
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        if not torch.is_tensor(output_ids):
            output_ids = output_ids.sequences
        # (batch, num_return_sequences, length): the pipeline un-batches along the first axis.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def _total_length_limits(self, given: dict, prompt_length: int) -> dict:
        """The caller's length limits in new tokens, as the total lengths that ``generate`` reads without warning.

        ``generate`` warns "Both `max_new_tokens` and `max_length` seem to have been set" whenever the model's
        generation config holds a ``max_length`` (every trained or converted folder does) and the call gives
        ``max_new_tokens``. For an encoder–decoder the decoder's prompt is its start token (or the given
        ``decoder_input_ids``), so ``max_new_tokens=k`` is exactly ``max_length=k + prompt_length``, which
        overrides the saved ``max_length`` without the warning. The same holds for ``min_new_tokens``.

        Args:
            given: The generation arguments the caller set (``generation_config`` included, if any).
            prompt_length: Length of the decoder's prompt.

        Returns:
            The arguments to override: ``{"max_length": k + prompt_length, "max_new_tokens": None}`` and the same
            for the minimum, for each limit given in new tokens and not as a total length too.

        The limits are valid: ``check_generation_settings`` has checked them.
        """
        user_config = given.get("generation_config")
        overrides = {}
        for new_tokens_name, length_name in LENGTH_LIMITS:
            if given.get(length_name) is not None:
                continue  # the caller set both: generate's warning about it is theirs to see
            new_tokens = given.get(new_tokens_name)
            if new_tokens is None and user_config is not None and getattr(user_config, length_name) is None:
                new_tokens = getattr(user_config, new_tokens_name)
            if new_tokens is not None:
                overrides.update({length_name: new_tokens + prompt_length, new_tokens_name: None})
        return overrides

    def postprocess(
        self,
        model_outputs,
        return_text: bool = True,
        return_tensors: bool = False,
        clean_up_tokenization_spaces: bool = False,
        skip_special_tokens: bool = True,
    ):
        records = []
        for ids in model_outputs["output_ids"][0]:
            record = {}
            if return_tensors:
                record["translation_token_ids"] = ids
            if return_text:
                record["translation_text"] = self.tokenizer.decode(
                    ids,
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
            records.append(record)
        return records

    def __call__(self, inputs, **kwargs):
        results = super().__call__(inputs, **kwargs)
        # One dict per input, as the transformers 4 translation pipeline returned, unless several
        # sequences per input were asked for.
        if isinstance(inputs, str):
            return results
        if all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results


__all__ = ["TranslationPipeline", "input_length_limit"]
