"""The arrows between the packages that docs/architecture.md draws: modules/ is plain PyTorch (no
fairseq, nothing from the plugin's fairseq glue), parsing/ is plain Python (no torch, no fairseq).
Read from the source with ast, so an import inside a function counts too."""
import ast
import os

import pytest

from helpers import ROOT

PACKAGE = os.path.join(ROOT, "vaswani_plugin")


def imports(package):
    """{file: set of absolute module names it imports} for every .py file of vaswani_plugin/PACKAGE."""
    found = {}
    for path in sorted(os.listdir(os.path.join(PACKAGE, package))):
        if not path.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(PACKAGE, package, path), encoding="utf-8").read())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ["vaswani_plugin", package][: 2 - node.level + 1] if node.level else []
                names.add(".".join(base + ([node.module] if node.module else [])))
        found[f"{package}/{path}"] = names
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("modules", ("fairseq", "vaswani_plugin.models", "vaswani_plugin.tasks", "vaswani_plugin.criterions",
                 "vaswani_plugin.optim", "vaswani_plugin.fairseq_fixes")),
    ("parsing", ("torch", "fairseq", "vaswani_plugin.modules", "vaswani_plugin.models", "vaswani_plugin.tasks")),
])
def test_package_imports_follow_the_architecture(package, forbidden):
    found = imports(package)
    assert len(found) > 3
    if package == "parsing":
        # The one exception, named: the command that prepares a treebank calls fairseq's own
        # preprocessing, inside a function, so that importing parsing/ still loads neither.
        found["parsing/prepare.py"] -= {"fairseq", "fairseq_cli"}
    bad = {path: sorted(n for n in names if n.split(".")[0] in forbidden or n.startswith(forbidden))
           for path, names in found.items()}
    assert not {path: names for path, names in bad.items() if names}


def test_the_check_sees_relative_imports():
    """It can fail: the model imports fairseq and, relatively, the plugin's modules."""
    names = imports("models")["models/vaswani_transformer.py"]
    assert "fairseq.models" in names and "vaswani_plugin.modules" in names
