#!/usr/bin/env bash
# Portable release: the iteragpu binary and its wheel for x86_64 and aarch64 Linux, linked against
# glibc 2.28 so that they start on every distribution since 2018 (RHEL 8, Ubuntu 20.04, Debian 10)
# as GPU rentals still boot them, and on Grace Hopper / Grace Blackwell (aarch64) machines.
#
#   scripts/release.sh [TARGET...]      default: x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
#
# One build per target: maturin (`bindings = "bin"`, pyproject.toml) compiles the binary with the
# `dist` profile and links it with zig (the `ziglang` wheel, through the cargo-zigbuild code that
# maturin carries) for glibc 2.28, then packs it as a manylinux_2_28 wheel. Builder paths (the
# cargo registry under this home, this checkout) are replaced with --remap-path-prefix, so the
# binary names no folder of this machine. What it writes, in dist/:
#
#   dist/<target>/iteragpu                                   the portable binary
#   dist/iteragpu-<version>-py3-none-manylinux_2_28_<arch>.whl  its wheel
#   dist/SHA256SUMS                                          both, checked by sha256sum -c
#
# Each binary and wheel is checked before it is kept: the binary's highest GLIBC symbol version
# is at most 2.28 (objdump -T), and no file holds one of this machine's build paths. Everything it installs (maturin,
# zig, the rust targets) goes to .cache/release/ and rustup's own folder.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

GLIBC=2.28
MATURIN_VERSION=1.16.0
ZIGLANG_VERSION=0.15.2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)

venv=.cache/release/venv
if [ ! -x "$venv/bin/maturin" ] || ! "$venv/bin/python" -c "import ziglang" 2>/dev/null \
    || [ "$("$venv/bin/maturin" --version)" != "maturin $MATURIN_VERSION" ]; then
    echo "== installing maturin $MATURIN_VERSION and zig (ziglang $ZIGLANG_VERSION) into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "maturin==$MATURIN_VERSION" "ziglang==$ZIGLANG_VERSION"
fi
# maturin finds zig as `python -m ziglang` of the first python on the PATH.
export PATH="$root/$venv/bin:$PATH"

for target in "${targets[@]}"; do
    rustup target list --installed | grep -qx "$target" || rustup target add "$target"
done

# Every absolute path of this machine that rustc could embed (panic locations, build scripts'
# outputs), mapped to a neutral name; general ones first, as rustc applies the last one that
# matches.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
remap=("--remap-path-prefix=$HOME=/home" "--remap-path-prefix=$rustup_home=/rustup"
    "--remap-path-prefix=$cargo_home=/cargo" "--remap-path-prefix=$root=/iteragpu")
for index in "$cargo_home"/registry/src/*/; do
    [ -d "$index" ] && remap+=("--remap-path-prefix=${index%/}=crates.io")
done
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }${remap[*]}"

# The shipped builds use the `dist` profile (thin LTO). CI, which must stay within its time on
# two cores and does not ship what it builds, sets ITERAGPU_RELEASE_PROFILE=ci-portable: the same
# targets, linker, glibc and path remapping, compiled at opt-level 1 without LTO, so the glibc,
# builder-path, qemu and wheel checks judge the same linking at half the compile time.
profile=${ITERAGPU_RELEASE_PROFILE:-dist}
echo "== profile: $profile"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
mkdir -p dist
for target in "${targets[@]}"; do
    arch=${target%%-*}
    echo "== $target: building the binary and its wheel (glibc $GLIBC)"
    rm -f dist/iteragpu-"$version"-*manylinux_2_28_"$arch".whl
    maturin build --zig --target "$target" --compatibility manylinux_2_28 --profile "$profile" --out dist
    mkdir -p "dist/$target"
    cp "target/$target/$profile/iteragpu" "dist/$target/iteragpu"
    scripts/check-binary.sh "dist/$target/iteragpu" "$GLIBC"
    scripts/check-binary.sh dist/iteragpu-"$version"-*manylinux_2_28_"$arch".whl "$GLIBC"
done

(cd dist && sha256sum -- */iteragpu *.whl >SHA256SUMS)
echo "== dist/"
(cd dist && ls -l -- */iteragpu *.whl && cat SHA256SUMS)
