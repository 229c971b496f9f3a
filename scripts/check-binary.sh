#!/usr/bin/env bash
# Checks a release binary, or a wheel and the binary inside it, before it ships:
#   1. the binary's highest GLIBC symbol version is at most MAX (objdump -T), so it starts on
#      every distribution with that glibc or newer;
#   2. no file holds an absolute path of the machine that built it: this home, the cargo and
#      rustup homes, this checkout, or any cargo registry or build folder.
#
#   scripts/check-binary.sh BINARY|WHEEL [MAX]      MAX defaults to 2.28
set -euo pipefail
file=$1
max=${2:-2.28}
root=$(cd "$(dirname "$0")/.." && pwd)
found=0

glibc() {
    # The host's objdump reads the dynamic symbols of an aarch64 ELF too (as elf64-little).
    local highest
    highest=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
    [ -n "$highest" ] || { echo "check-binary: $1: no GLIBC symbol versions found by objdump -T" >&2; exit 1; }
    if [ "$(printf '%s\n%s\n' "$highest" "$max" | sort -V | tail -1)" != "$max" ]; then
        echo "check-binary: $1 needs GLIBC_$highest, newer than $max:" >&2
        objdump -T "$1" | grep "GLIBC_$highest" >&2
        exit 1
    fi
    echo "check-binary: $1: highest GLIBC_$highest (<= $max)"
}

paths() {
    local path marker hits
    for path in "$HOME" "${CARGO_HOME:-$HOME/.cargo}" "${RUSTUP_HOME:-$HOME/.rustup}" "$root"; do
        if grep -qF -- "$path/" "$1"; then
            echo "check-binary: $1 holds the builder path $path/, e.g.:" >&2
            strings -n 8 "$1" | grep -F -- "$path/" | head -3 >&2
            found=1
        fi
    done
    # Any absolute path (a token that starts with /) through a cargo or rustup home, a
    # registry's unpacked sources or a build folder, whoever's machine it was.
    for marker in /.cargo/ /.rustup/ /registry/src/index.crates.io- /target/release/build/ /target/debug/build/; do
        hits=$(strings -n 8 "$1" | grep -oP "(?<![[:graph:]])/[^\s\"'\`<>]*?\Q$marker\E[^\s\"'\`<>]*" | head -3 || true)
        if [ -n "$hits" ]; then
            echo "check-binary: $1 holds paths through $marker, e.g.:" >&2
            echo "$hits" >&2
            found=1
        fi
    done
}

case "$file" in
*.whl)
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$file" "$unpacked"
    inside=("$unpacked"/*.data/scripts/iteragpu)
    [ -f "${inside[0]}" ] || { echo "check-binary: $file holds no *.data/scripts/iteragpu" >&2; exit 1; }
    glibc "${inside[0]}"
    while IFS= read -r -d '' member; do
        paths "$member"
    done < <(find "$unpacked" -type f -print0)
    ;;
*)
    glibc "$file"
    paths "$file"
    ;;
esac
[ "$found" -eq 0 ] || exit 1
echo "check-binary: $file: no builder path"
