"""Translation metrics computed offline with sacreBLEU (`evaluate.load` would need the Hub)."""

from collections.abc import Callable, Sequence

import numpy as np
import sacrebleu
from transformers import EvalPrediction, PreTrainedTokenizerBase


def sacrebleu_signatures() -> dict[str, str]:
    """The sacreBLEU signatures of :func:`corpus_scores` (default settings, 13a tokenization, one reference)."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    # sacreBLEU writes the number of references into the signature once it has scored something.
    bleu.corpus_score(["a"], [["a"]])
    chrf.corpus_score(["a"], [["a"]])
    return {"bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """sacreBLEU BLEU and chrF of detokenized hypotheses against one reference each.

    Returns:
        ``{"bleu": …, "chrf": …, "bleu_signature": …, "chrf_signature": …}`` (scores in 0–100).
    """
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    references_streams = [list(references)]
    bleu_score = bleu.corpus_score(list(hypotheses), references_streams)
    chrf_score = chrf.corpus_score(list(hypotheses), references_streams)
    return {
        "bleu": round(bleu_score.score, 4),
        "chrf": round(chrf_score.score, 4),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def translation_metrics(tokenizer: PreTrainedTokenizerBase) -> Callable[[EvalPrediction], dict[str, float]]:
    """A `compute_metrics` for `Seq2SeqTrainer(predict_with_generate=True)`: BLEU, chrF and output length.

    Only numbers go to the trainer's logs; the sacreBLEU signatures are constant, see `corpus_scores`.
    """

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        predictions = (
            prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        )
        # Padding in generated ids and the -100 of ignored label positions are not tokens.
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(prediction.label_ids < 0, tokenizer.pad_token_id, prediction.label_ids)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = {
            name: value for name, value in corpus_scores(hypotheses, references).items() if name in ("bleu", "chrf")
        }
        scores["gen_len"] = float(np.mean([np.count_nonzero(row != tokenizer.pad_token_id) for row in predictions]))
        return scores

    return compute_metrics
