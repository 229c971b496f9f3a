#!/usr/bin/env python3
"""Runs the code cells of a notebook in order, in one namespace, in the current folder, as a
kernel would (without Jupyter): any exception fails the run. Prints which binary the notebook
chose, so that a caller can check it is the one it installed.

    python scripts/run-notebook.py notebooks/iteragpu-lab.ipynb   (needs IPython installed)
"""
import json
import sys


def main(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        print(f"--- cell {i}", flush=True)
        exec(compile(source, f"{path} cell {i}", "exec"), namespace)
    print(f"--- notebook ran with BINARY={namespace.get('BINARY')}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
