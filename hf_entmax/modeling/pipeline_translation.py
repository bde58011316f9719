"""A translation pipeline for encoder–decoder models.

transformers 5 removed the built-in "translation" task. This class brings it back: a model folder
whose config.json has a ``custom_pipelines["translation"]`` entry pointing here makes
``pipeline("translation", model=folder, trust_remote_code=True)`` work, and an already loaded
model can use it directly: ``TranslationPipeline(model=model, tokenizer=tokenizer)``.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

import torch
from transformers import Pipeline


class TranslationPipeline(Pipeline):
    """Translate text with a sequence-to-sequence model.

    Call it with a string or a list of strings; each input gives ``{"translation_text": ...}``
    (a list of them with ``num_return_sequences`` > 1). Keyword arguments other than
    ``truncation``, ``max_length`` (of the source), ``skip_special_tokens`` and
    ``clean_up_tokenization_spaces`` go to ``model.generate`` (``num_beams``, ``max_new_tokens``, …).

    Example:

    ```python
    >>> translator = TranslationPipeline(model=model, tokenizer=tokenizer)
    >>> translator(["ein kleiner hund", "zwei katzen"], num_beams=4)
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
        super().__init__(*args, device=device, **kwargs)

    def _sanitize_parameters(
        self,
        truncation=None,
        max_length=None,
        skip_special_tokens=None,
        clean_up_tokenization_spaces=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if max_length is not None:
            preprocess_params["max_length"] = max_length
        postprocess_params = {}
        if skip_special_tokens is not None:
            postprocess_params["skip_special_tokens"] = skip_special_tokens
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def preprocess(self, text: str, truncation: bool = True, max_length: int | None = None):
        if not isinstance(text, str):
            raise TypeError(f"TranslationPipeline translates strings, got {type(text).__name__}: {text!r}")
        return self.tokenizer(text, return_tensors="pt", truncation=truncation, max_length=max_length)

    def _forward(self, model_inputs, **generate_kwargs):
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        if not torch.is_tensor(output_ids):
            output_ids = output_ids.sequences
        # (batch, num_return_sequences, length): the pipeline un-batches along the first axis.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs, skip_special_tokens: bool = True, clean_up_tokenization_spaces=None):
        return [
            {
                "translation_text": self.tokenizer.decode(
                    ids,
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
            }
            for ids in model_outputs["output_ids"][0]
        ]

    def __call__(self, inputs, **kwargs):
        results = super().__call__(inputs, **kwargs)
        # One dict per input, as the transformers 4 translation pipeline returned, unless several
        # sequences per input were asked for.
        if isinstance(inputs, str):
            return results
        if all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results


__all__ = ["TranslationPipeline"]
