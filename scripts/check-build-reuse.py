#!/usr/bin/env python3
"""Checks that a second cargo build reused what a first one compiled: no dependency compiled
by the first is compiled again, with the same profile, by the second (as happens when the two
resolve different features, so that everything above that dependency is rebuilt too).

    python3 scripts/check-build-reuse.py FIRST.jsonl SECOND.jsonl

Both files hold cargo's --message-format=json output. A package may legitimately appear in
both with another profile: a proc-macro's dependencies are compiled for the host with the
build-override profile. The workspace's own crates are compiled again for their tests.
"""
import json
import sys


def units(path):
    """(package, target kind, optimisation, debug assertions) -> features, of each compiled unit."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or msg.get("fresh"):
                continue
            package = msg["package_id"]
            if package.startswith("path+file://"):
                continue  # a workspace crate
            profile = msg["profile"]
            key = (
                package,
                tuple(msg["target"]["kind"]),
                profile["opt_level"],
                profile["debug_assertions"],
            )
            out[key] = sorted(msg["features"])
    return out


def main(first, second):
    a, b = units(first), units(second)
    again = sorted(set(a) & set(b))
    if again:
        print("compiled by the first build and again by the second (a feature differs between "
              "them; see the feature list in crates/iteragpu/Cargo.toml):", file=sys.stderr)
        for key in again:
            package = key[0].split("#")[-1]
            print(f"  {package} {key[1]}: features {a[key]} then {b[key]}", file=sys.stderr)
        return 1
    print(f"nothing compiled twice: the second build compiled {len(b)} units the first had not "
          f"(its own dependencies), and reused the first's {len(a)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
