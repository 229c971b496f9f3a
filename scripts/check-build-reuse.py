#!/usr/bin/env python3
"""Checks that the README's two commands share one build: after the tests' build
(`cargo test --workspace --locked --release --no-run`), the README's build
(`cargo build --release --locked`) must compile nothing at all.

    python3 scripts/check-build-reuse.py TESTS.jsonl BUILD.jsonl

Both files hold cargo's --message-format=json output, TESTS.jsonl first. Cargo compiles a
dependency again when the two commands resolve different features for it (a dev-dependency
turning one on), and then everything above it too; in either order the two builds share every
unit exactly when the build after the tests finds each of its units fresh. Checking in this
order lets CI run the tests' build, which compiles the binary the CLI tests run, and then the
README's build at the cost of a look at the fingerprints, instead of a second release build.
"""
import json
import sys


def units(path):
    """(package, target kind, profile name) -> (features, fresh) of each unit cargo reported."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact":
                continue
            key = (
                msg["package_id"],
                tuple(msg["target"]["kind"]),
                msg["target"]["name"],
                msg["profile"]["opt_level"],
            )
            out[key] = (sorted(msg["features"]), bool(msg.get("fresh")))
    return out


def name(key):
    package = key[0].split("#")[-1].split("/")[-1]
    return f"{package} {key[2]} ({', '.join(key[1])}, opt-level {key[3]})"


def main(tests, build):
    t, b = units(tests), units(build)
    if not b:
        print(f"{build}: no compiler-artifact message; was it written by --message-format=json?",
              file=sys.stderr)
        return 1
    again = sorted(k for k, (_, fresh) in b.items() if not fresh)
    if again:
        print("the README's build compiled again what the tests' build had compiled (a feature "
              "differs between them; see the feature list in crates/iteragpu/Cargo.toml):",
              file=sys.stderr)
        for key in again:
            before = t.get(key, (["(not built by the tests)"], False))[0]
            print(f"  {name(key)}: features {before} in the tests, {b[key][0]} in the build",
                  file=sys.stderr)
        return 1
    print(f"the README's build found all its {len(b)} units fresh: the tests' build compiled "
          f"them ({len(t)} units in all, the rest being the tests and their dependencies)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
