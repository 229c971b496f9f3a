#!/usr/bin/env python3
"""Writes the torch engine's program (crates/lab-torch/src/engine.py, the one copy) into the
notebook's cell `engine-program`, so that the notebook measures through PyTorch without the
binary; `--check` only says whether the cell is up to date (exit 1 when not). The test
`notebook::the_notebook_carries_the_engine_program` checks the same.

    python3 scripts/sync-notebook-engine.py [--check]
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "iteragpu-lab.ipynb")
PROGRAM = os.path.join(ROOT, "crates", "lab-torch", "src", "engine.py")
HEAD = (
    "# The torch engine's program, the same one `iteragpu measure --engine torch` runs, generated\n"
    "# from crates/lab-torch/src/engine.py by scripts/sync-notebook-engine.py (a test checks they are\n"
    "# equal): the notebook measures through PyTorch with it, with or without the binary.\n"
    "ENGINE_PROGRAM = r'''"
)
TAIL = (
    "'''\n"
    "torch_engine = {\"__name__\": \"iteragpu_torch_engine\"}\n"
    "exec(compile(ENGINE_PROGRAM, \"iteragpu-torch-engine\", \"exec\"), torch_engine)\n"
    "print(\"torch engine program\", torch_engine[\"ENGINE_VERSION\"], \"loaded\")"
)


def cell_source(program):
    if "'''" in program:
        sys.exit("sync-notebook-engine: the program holds ''' and cannot sit in a raw string")
    return HEAD + program + TAIL


def lines(text):
    out = text.splitlines(keepends=True)
    return out


def main(argv):
    with open(PROGRAM, encoding="utf-8") as f:
        program = f.read()
    with open(NOTEBOOK, encoding="utf-8") as f:
        nb = json.load(f)
    want = cell_source(program)
    cells = [c for c in nb["cells"] if c.get("id") == "engine-program"]
    if len(cells) != 1:
        sys.exit("sync-notebook-engine: the notebook has no single cell with id engine-program")
    if "".join(cells[0]["source"]) == want:
        print("the notebook's engine-program cell is the program")
        return 0
    if argv == ["--check"]:
        print("the notebook's engine-program cell differs from crates/lab-torch/src/engine.py: "
              "run scripts/sync-notebook-engine.py")
        return 1
    cells[0]["source"] = lines(want)
    with open(NOTEBOOK, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote the program into the notebook's engine-program cell")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
