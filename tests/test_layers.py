"""The package's layers point one way, no module imports one that imports it back, and `import hf_entmax` stays
light.

modeling ← kernels (optional) ← training / hub / analysis / alignment ← commands ← cli, with `hf_entmax.errors`
and `hf_entmax.common` below training, hub, analysis and alignment for all of them. The modeling files travel to the
Hub alone, so they import only each other (``from .module import name``) and, optionally, the native kernel inside
``try``.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parent.parent / "hf_entmax"
# The parts the commands are built on.
TOOLS = ("errors", "common", "modeling", "kernels", "training", "hub", "analysis", "sparsefinder", "alignment")
# What each part of hf_entmax may import from the others (a part imports its own modules freely).
ALLOWED = {
    "errors": set(),
    "common": {"errors", "modeling"},
    "kernels": {"errors", "common", "modeling"},
    "training": {"errors", "common", "modeling", "kernels"},
    "hub": {"errors", "common", "modeling", "kernels"},
    "analysis": {"errors", "common", "modeling", "kernels"},
    "sparsefinder": {"errors", "common", "modeling", "kernels", "analysis"},
    "alignment": {"errors", "common", "modeling", "kernels"},
    "commands": set(TOOLS),
    "cli": {*TOOLS, "commands"},
    "registration": {"modeling"},
    "__init__": {"modeling", "registration"},
}
# Import cycles left to their owners, as the import that closes each: {(module, the module or package it imports):
# why}. The test fails once such an import no longer closes a cycle, so that the entry goes with the cycle.
KNOWN_CYCLES = {
    ("hf_entmax.modeling.entmax", "hf_entmax.kernels"): "hf_entmax/modeling/entmax.py imports the optional native "
    "kernel (inside try), and hf_entmax/kernels/cpu.py imports the mapping's backward from modeling/entmax.py",
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


MODULES = {module_name(path) for path in SOURCES}


def imported_modules(path: Path, text: str | None = None) -> set[str]:
    """The modules of hf_entmax that the file (or ``text``, read as that file) imports, at any depth: ``from . import
    plots`` imports the module ``plots``, ``from .collect import name`` the module ``collect``, ``from . import name``
    the package's ``__init__``."""
    found = set()
    for target, _, _, node in imports_of(path, text):
        if target != "hf_entmax" and not target.startswith("hf_entmax."):
            continue
        names = [alias.name for alias in node.names] if isinstance(node, ast.ImportFrom) else [None]
        found |= {f"{target}.{name}" if f"{target}.{name}" in MODULES else target for name in names}
    return found & MODULES


def import_chain(graph: dict[str, set[str]], source: str, target: str) -> list[str] | None:
    """The shortest chain of imports from ``source`` to ``target`` in ``graph`` (``{module: modules it imports}``):
    ``[source, …, target]``, or None."""
    chains, visited = [[source]], {source}
    while chains:
        chain = chains.pop(0)  # breadth first: the shortest chain
        for module in sorted(graph.get(chain[-1], ())):
            if module == target:
                return [*chain, module]
            if module not in visited:
                visited.add(module)
                chains.append([*chain, module])
    return None


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The shortest import cycle through each module of ``graph`` (``[a, b, a]``: a imports b, which imports a), a
    cycle of the same modules once."""
    cycles, seen = [], set()
    for module in sorted(graph):
        cycle = import_chain(graph, module, module)
        if cycle and frozenset(cycle) not in seen:
            seen.add(frozenset(cycle))
            cycles.append(cycle)
    return cycles


def test_no_module_imports_a_module_that_imports_it_back():
    graph = {module_name(path): imported_modules(path) - {module_name(path)} for path in SOURCES}
    closers = {  # the imports that close the known cycles
        (module, imported)
        for module, target in KNOWN_CYCLES
        for imported in graph.get(module, ())
        if imported == target or imported.startswith(f"{target}.")
    }
    open_graph = {
        module: {imported for imported in imports if (module, imported) not in closers}
        for module, imports in graph.items()
    }
    cycles = import_cycles(open_graph)
    assert not cycles, "import cycles: " + "; ".join(" → ".join(cycle) for cycle in cycles)
    for (module, target), why in KNOWN_CYCLES.items():
        closes = any(import_chain(graph, imported, module) for (importer, imported) in closers if importer == module)
        assert closes, f"{module} → {target} closes no import cycle any more ({why}): remove it from KNOWN_CYCLES"


def test_the_cycle_test_sees_what_a_file_imports_and_every_cycle():
    text = "from . import plots, ModelAnalysis\nfrom .collect import analyze_model\ndef f():\n    from .. import cli\n"
    assert imported_modules(PACKAGE / "analysis" / "report.py", text) == {
        "hf_entmax.analysis.plots",
        "hf_entmax.analysis",
        "hf_entmax.analysis.collect",
        "hf_entmax.cli",
    }
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"d", "a"}, "e": {"a"}}
    assert import_cycles(graph) == [["a", "b", "a"], ["c", "a", "b", "c"], ["d", "d"]]
    assert import_chain(graph, "e", "c") == ["e", "a", "b", "c"] and import_chain(graph, "a", "e") is None


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


def test_a_command_loads_only_what_it_needs():
    """`hf-entmax --help` imports no command, and `hf-entmax translate` does not pay for train's datasets and Trainer
    or analyze's matplotlib (seconds each)."""
    command = (
        "import sys\nfrom hf_entmax.cli import main\nmain(['--help'])\n"
        "assert not [m for m in sys.modules if m.startswith('hf_entmax.commands')], 'usage imported a command'\n"
        "try:\n    main(['translate', '--help'])\nexcept SystemExit:\n    pass"
    )
    loaded = fresh_import(command)["loaded"]
    assert not {"datasets", "matplotlib", "transformers.trainer"} & set(loaded), loaded


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
