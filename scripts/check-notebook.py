#!/usr/bin/env python3
"""Checks the shipped notebook: valid nbformat 4 (nbformat's own validator), no stored output,
no execution counts, a markdown sentence before every code cell, and no import beyond the
standard library, IPython and torch (the torch engine's; every import of torch is guarded, so the
notebook runs without it).

    python scripts/check-notebook.py notebooks/iteragpu-lab.ipynb   (needs nbformat installed)
"""
import ast
import sys

import nbformat


def main(path):
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    if nb.nbformat != 4:
        return f"{path}: nbformat {nb.nbformat}, expected 4"
    nbformat.validate(nb)
    problems = []
    previous = None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if cell.outputs:
                problems.append(f"cell {i} stores {len(cell.outputs)} output(s)")
            if cell.execution_count is not None:
                problems.append(f"cell {i} has execution_count {cell.execution_count}")
            if previous != "markdown":
                problems.append(f"cell {i} has no markdown explanation before it")
            for node in ast.walk(ast.parse(cell.source)):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("IPython", "torch"):
                        problems.append(f"cell {i} imports {name}, not in the standard library")
        previous = cell.cell_type
    if problems:
        return f"{path}:\n  " + "\n  ".join(problems)
    print(f"{path}: valid nbformat {nb.nbformat}.{nb.nbformat_minor}, "
          f"{len(nb.cells)} cells, no stored output")
    return None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    error = main(sys.argv[1])
    if error:
        sys.exit(error)
