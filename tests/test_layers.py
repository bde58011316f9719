"""The package's layers point one way, and `import hf_entmax` stays light.

modeling ← kernels (optional) ← training / hub / analysis ← commands ← cli, with `hf_entmax.errors` and
`hf_entmax.common` below training, hub and analysis for all of them. The modeling files travel to the Hub alone, so
they import only each other (``from .module import name``) and, optionally, the native kernel inside ``try``.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parent.parent / "hf_entmax"
# What each part of hf_entmax may import from the others (a part imports its own modules freely).
ALLOWED = {
    "errors": set(),
    "common": {"errors", "modeling"},
    "kernels": {"errors", "common", "modeling"},
    "training": {"errors", "common", "modeling", "kernels"},
    "hub": {"errors", "common", "modeling", "kernels"},
    "analysis": {"errors", "common", "modeling", "kernels"},
    "sparsefinder": {"errors", "common", "modeling", "kernels", "analysis"},
    "commands": {"errors", "common", "modeling", "kernels", "training", "hub", "analysis", "sparsefinder"},
    "cli": {"errors", "common", "modeling", "kernels", "training", "hub", "analysis", "sparsefinder", "commands"},
    "registration": {"modeling"},
    "__init__": {"modeling", "registration"},
}
# Modules that `import hf_entmax` must not load: training, analysis and tokenizer dependencies.
HEAVY_MODULES = ("datasets", "sacrebleu", "matplotlib", "sentencepiece", "transformers.trainer")


def part_of(module: str) -> str:
    """``hf_entmax.training.run`` → ``training``; ``hf_entmax`` → ``__init__``."""
    return module.split(".")[1] if "." in module else "__init__"


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imports_of(path: Path, text: str | None = None) -> list[tuple[str, int, bool, ast.AST]]:
    """``(absolute module, relative level, inside a try that catches ImportError, node)`` of every import in the
    file (or in ``text``, read as that file), at any depth: imports inside functions count too."""
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    guarded = set()
    for node in ast.walk(tree):
        catches_import_error = isinstance(node, ast.Try) and any(
            isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError")
            for handler in node.handlers
        )
        if catches_import_error:
            guarded |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0, id(node) in guarded, node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module
            found.append((target, node.level, id(node) in guarded, node))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_has_a_rule():
    assert {part_of(module_name(path)) for path in SOURCES} == set(ALLOWED) | {"modeling"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE.parent)))
def test_imports_point_down_the_layers(path):
    module = module_name(path)
    part = part_of(module)
    for target, level, guarded, node in imports_of(path):
        if target != "hf_entmax" and not target.startswith("hf_entmax."):
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}"
        if part == "modeling":
            # A flat Hub file: `from .sibling import name`, or the optional kernel inside try/except ImportError.
            sibling = level == 1 and isinstance(node, ast.ImportFrom) and node.module is not None
            sibling = sibling and (PACKAGE / "modeling" / f"{node.module}.py").is_file()
            optional_kernel = level == 0 and guarded and target.startswith("hf_entmax.kernels.")
            assert sibling or optional_kernel, where
            continue
        imported = part_of(target)
        assert imported == part or imported in ALLOWED[part], where


def test_the_direction_test_sees_a_wrong_import():
    """Relative imports are resolved, imports inside functions are seen, and a try guards only its own body."""
    text = (
        "def f():\n    from ..training.run import train\n"
        "try:\n    from hf_entmax.kernels.cpu import x\nexcept ImportError:\n    from hf_entmax.hub import y\n"
    )
    found = imports_of(PACKAGE / "kernels" / "probe.py", text)
    assert sorted((node.lineno, target, guarded) for target, _, guarded, node in found) == [
        (2, "hf_entmax.training.run", False),
        (4, "hf_entmax.kernels.cpu", True),
        (6, "hf_entmax.hub", False),
    ]


def fresh_import(statement: str) -> dict:
    """Run ``statement`` in a new interpreter (outside the repository folder), then report what it loaded."""
    script = (
        f"{statement}\nimport json, sys\n"
        f"print(json.dumps({{'loaded': [m for m in {HEAVY_MODULES!r} if m in sys.modules], "
        "'kernel_module': 'hf_entmax.kernels.cpu' in sys.modules}))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=PACKAGE.parent.parent, timeout=300
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_importing_hf_entmax_loads_neither_training_nor_analysis_dependencies():
    assert fresh_import("import hf_entmax") == {"loaded": [], "kernel_module": True}


def test_the_native_kernel_does_not_depend_on_training_dependencies():
    """With the training, analysis and tokenizer packages missing, hf_entmax still imports, kernel included."""
    hidden = "; ".join(f"sys.modules[{name!r}] = None" for name in HEAVY_MODULES)
    result = fresh_import(f"import sys; {hidden}\nimport hf_entmax\nhf_entmax.AdaptiveEntmaxMarianMTModel")
    assert result["kernel_module"]


def test_lazy_public_names_load_on_first_use():
    import hf_entmax
    from hf_entmax.analysis.collect import ModelAnalysis, analyze_model
    from hf_entmax.modeling.pipeline_translation import TranslationPipeline

    assert (hf_entmax.analyze_model, hf_entmax.ModelAnalysis) == (analyze_model, ModelAnalysis)
    assert hf_entmax.TranslationPipeline is TranslationPipeline
    assert set(hf_entmax.__all__) <= set(dir(hf_entmax))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        hf_entmax.no_such_name  # noqa: B018
