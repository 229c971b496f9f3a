#!/bin/sh
# cargo's rustc wrapper (build.rustc-wrapper in .cargo/config.toml): runs the compiler it is given
# ("$1": rustc, or clippy-driver under cargo clippy) with every absolute path of this machine that
# rustc could embed (panic locations, files that build scripts generate) mapped to a neutral name,
# so that every build, `cargo build --release` included, names no folder of the machine that built
# it and can ship in the kit. rustc applies the last mapping that matches: general ones first.
#
#   this home -> /home, the rustup home -> /rustup, the cargo home -> /cargo,
#   each registry's unpacked sources -> crates.io, CARGO_TARGET_DIR (when set) -> target,
#   this checkout (as its path reads and as it really is, when a link leads to it) -> .
#
# The flags change no compiled code, and every build of this checkout gets them alike, so
# `cargo build --release` and `cargo test --release` still share every compiled unit.
root=$(cd "$(dirname "$0")/.." && pwd)
real_root=$(cd "$root" && pwd -P)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
for prefix in "$HOME=/home" "$rustup_home=/rustup" "$cargo_home=/cargo"; do
    # An empty or root prefix would map every path: skip it.
    case $prefix in
    =* | /=*) ;;
    *) set -- "$@" "--remap-path-prefix=$prefix" ;;
    esac
done
for index in "$cargo_home"/registry/src/*/; do
    [ -d "$index" ] && set -- "$@" "--remap-path-prefix=${index%/}=crates.io"
done
case ${CARGO_TARGET_DIR:-} in
/?*) set -- "$@" "--remap-path-prefix=$CARGO_TARGET_DIR=target" ;;
esac
[ "$real_root" = "$root" ] || set -- "$@" "--remap-path-prefix=$real_root=."
exec "$@" "--remap-path-prefix=$root=."
