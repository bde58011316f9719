"""`hf-entmax demo`: build a small AdaptiveEntmaxMarian, save it as a Hub folder, load it back as
remote code in a fresh process without hf_entmax, and translate through `pipeline("translation")`.

The model is not trained (training is `hf-entmax train`'s job): the demo shows the artifact works
end to end, offline, on built-in sentences.
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from .modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .training.tokenizer import train_joint_tokenizer


DEMO_PAIRS = [
    ("ein kleiner hund läuft im park", "a small dog runs in the park"),
    ("zwei katzen schlafen auf dem sofa", "two cats sleep on the sofa"),
    ("die frau liest ein altes buch", "the woman reads an old book"),
    ("der mann trinkt heißen kaffee", "the man drinks hot coffee"),
    ("drei kinder spielen am strand", "three children play on the beach"),
    ("ein roter ball liegt im gras", "a red ball lies in the grass"),
]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="build, save, reload as remote code and translate (no training)")
    parser.add_argument("--output_dir", default="outputs/demo", help="where the Hub-ready folder is written")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's initialisation")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> None:
    output_dir = Path(arguments.output_dir)
    torch.manual_seed(arguments.seed)
    sources = [source for source, _ in DEMO_PAIRS]
    tokenizer = train_joint_tokenizer([text for pair in DEMO_PAIRS for text in pair] * 4, vocab_size=120)
    config = AdaptiveEntmaxMarianConfig(
        vocab_size=len(tokenizer),
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )
    model = AdaptiveEntmaxMarianMTModel(config).eval()
    print(f"Built AdaptiveEntmaxMarian: {model.num_parameters():,} parameters, α learned per head (random init).")
    _print_alphas(model.get_alphas())

    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    print(f"\nSaved to {output_dir}/: {', '.join(sorted(path.name for path in output_dir.iterdir()))}")

    print("\nLoading it in a fresh Python process where hf_entmax cannot be imported, through")
    print(f'pipeline("translation", model="{output_dir}", trust_remote_code=True):')
    translations = _translate_without_hf_entmax(output_dir, sources)
    for source, translation in zip(sources, translations, strict=True):
        print(f"  {source!r} -> {translation['translation_text']!r}")
    print("(The weights are untrained, so the output is noise: `hf-entmax train` trains them.)")


def _print_alphas(alphas: dict[str, torch.Tensor]) -> None:
    for kind, values in alphas.items():
        for layer, row in enumerate(values):
            print(f"  α {kind:<12} layer {layer}: " + " ".join(f"{alpha:.2f}" for alpha in row.tolist()))


def _translate_without_hf_entmax(folder: Path, sources: list[str]) -> list[dict[str, str]]:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_entmax"] = None  # as on a machine without hf_entmax
        from transformers import pipeline
        translator = pipeline("translation", model={str(folder)!r}, trust_remote_code=True)
        print(json.dumps(translator({sources!r}, max_new_tokens=16, num_beams=4)))
        """
    )
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"loading {folder} as remote code failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])
