#!/bin/sh
# Installs iteragpu for this user, no root needed, from an unpacked kit (bin/<target>/iteragpu and
# SHA256SUMS; this script is the kit's scripts/install.sh) or from a checkout after
# scripts/release.sh (dist/<target>/iteragpu and dist/SHA256SUMS). `sh scripts/install.sh --help`
# says what it does. POSIX sh: Debian's sh (dash) runs it, and bash.
set -eu

usage() {
    cat <<'EOF'
Usage: sh scripts/install.sh [--prefix DIR] [--from DIR]

Installs iteragpu for this user (no root needed) from an unpacked kit, or from a checkout's
dist/ after scripts/release.sh:

  1. checks this machine: x86_64 or aarch64 Linux (uname -m) with glibc 2.28 or newer
     (getconf GNU_LIBC_VERSION); any other machine, or musl, is refused;
  2. checks the binary for this machine (bin/<target>/iteragpu in a kit, <target>/iteragpu in
     dist/) against SHA256SUMS with sha256sum: a mismatch is refused and nothing is installed;
  3. installs, each file written beside its place and then renamed over it (a re-run replaces
     them the same way):
       DIR/bin/iteragpu
       DIR/share/man/man1/iteragpu.1 and iteragpu-COMMAND.1   (iteragpu man --output-dir)
       DIR/share/bash-completion/completions/iteragpu          (iteragpu completions bash)
       DIR/share/zsh/site-functions/_iteragpu                  (iteragpu completions zsh)
  4. says what to add to PATH, MANPATH or zsh's fpath when DIR is not on them yet.

Options:
  --prefix DIR   install under DIR (default: ~/.local, so DIR/bin is ~/.local/bin)
  --from DIR     the unpacked kit or dist/ folder (default: the folder above this script, or
                 its dist/)
  -h, --help     this text

Exit status: 0 installed; 1 refused or failed (nothing was installed unless it says so);
2 a usage error.
EOF
}

say() { printf '%s\n' "$*"; }
die() {
    printf 'install.sh: error: %s\n' "$*" >&2
    exit 1
}
usage_error() {
    printf 'install.sh: error: %s (sh scripts/install.sh --help explains the options)\n' "$*" >&2
    exit 2
}
# A path as the user reads it: ~/... under the home folder.
show() {
    case $1 in
    "$HOME"/*) printf '~/%s' "${1#"$HOME"/}" ;;
    *) printf '%s' "$1" ;;
    esac
}

prefix=""
from=""
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help)
        usage
        exit 0
        ;;
    --prefix | --from)
        [ $# -ge 2 ] && [ -n "$2" ] || usage_error "$1 needs a folder, e.g. $1 ~/.local"
        if [ "$1" = --prefix ]; then prefix=$2; else from=$2; fi
        shift 2
        ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --from=*) from=${1#--from=}; shift ;;
    *) usage_error "unknown argument \`$1\`; the options are --prefix DIR, --from DIR and --help" ;;
    esac
done
HOME=${HOME:-}
if [ -z "$prefix" ]; then
    [ -n "$HOME" ] || usage_error "HOME is not set, so there is no ~/.local: give --prefix DIR"
    prefix=$HOME/.local
fi
# The lines printed at the end quote the folders for the shell; what no PATH can hold is refused.
case $prefix in
*[[:cntrl:]]*) usage_error "--prefix holds a line break or another control character, which no PATH line can carry: choose another folder" ;;
*:*) usage_error "--prefix $prefix holds a \`:\`, which separates the folders of PATH and MANPATH: choose a folder without one" ;;
esac

# 1. This machine.
system=$(uname -s)
[ "$system" = Linux ] || die "this system is $system (uname -s); iteragpu runs on Linux only"
machine=$(uname -m)
case $machine in
x86_64 | amd64) arch=x86_64 ;;
aarch64 | arm64) arch=aarch64 ;;
*) die "this machine is $machine (uname -m); the kit's iteragpu runs on x86_64 and aarch64 Linux only" ;;
esac
target=$arch-unknown-linux-gnu

libc=$(getconf GNU_LIBC_VERSION 2>/dev/null || true)
case $libc in
"glibc "*) glibc=${libc#glibc } ;;
*)
    if ldd --version 2>&1 | grep -qi musl; then
        die "this system's C library is musl (ldd --version), not glibc; iteragpu needs glibc 2.28 or newer (Debian 10, Ubuntu 20.04, RHEL 8 and later): build it from source there with cargo install --path crates/iteragpu --locked"
    fi
    glibc=$(ldd --version 2>/dev/null | sed -n '1s/.*[^0-9.]\([0-9][0-9]*\.[0-9][0-9]*\)$/\1/p' || true)
    [ -n "$glibc" ] || die "cannot tell this system's C library: neither getconf GNU_LIBC_VERSION nor ldd --version names a glibc version; iteragpu needs glibc 2.28 or newer"
    ;;
esac
major=${glibc%%.*}
minor=${glibc#*.}
minor=${minor%%.*}
case $major.$minor in
*[!0-9.]* | .* | *.) die "cannot read the glibc version \`$glibc\` (getconf GNU_LIBC_VERSION); iteragpu needs glibc 2.28 or newer" ;;
esac
if [ "$major" -lt 2 ] || { [ "$major" -eq 2 ] && [ "$minor" -lt 28 ]; }; then
    die "this system has glibc $glibc; iteragpu needs glibc 2.28 or newer (Debian 10, Ubuntu 20.04, RHEL 8 and later), nothing was installed"
fi

# 2. The binary, checked against SHA256SUMS.
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$from" ]; then
    for dir in "$here/.." "$here/../dist"; do
        if [ -f "$dir/SHA256SUMS" ] && { [ -f "$dir/bin/$target/iteragpu" ] || [ -f "$dir/$target/iteragpu" ]; }; then
            from=$dir
            break
        fi
    done
    [ -n "$from" ] || die "found no iteragpu for this machine ($target) beside this script: run it from an unpacked kit (bin/$target/iteragpu and SHA256SUMS), or from a checkout after scripts/release.sh (dist/$target/iteragpu), or give --from DIR"
fi
[ -d "$from" ] || usage_error "--from $from: no such folder; give an unpacked kit or the dist/ folder of scripts/release.sh"
from=$(cd "$from" && pwd)
if [ -f "$from/bin/$target/iteragpu" ]; then
    member=bin/$target/iteragpu
elif [ -f "$from/$target/iteragpu" ]; then
    member=$target/iteragpu
else
    die "$(show "$from") holds no iteragpu for this machine ($target): neither bin/$target/iteragpu (a kit) nor $target/iteragpu (dist/); nothing was installed"
fi
[ -f "$from/SHA256SUMS" ] || die "$(show "$from") has no SHA256SUMS to check $member against; nothing was installed"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum (GNU coreutils) is not on the PATH: it checks $member against SHA256SUMS before anything is installed"
# Read by the shell alone (no awk): an image with only tar, gzip and coreutils installs too.
expected=""
while IFS=' ' read -r sum name || [ -n "$sum" ]; do
    if [ "$name" = "$member" ] || [ "$name" = "*$member" ] || [ "$name" = " $member" ]; then
        expected=$sum
        break
    fi
done <"$from/SHA256SUMS"
[ -n "$expected" ] || die "$(show "$from")/SHA256SUMS lists no $member; nothing was installed"
sha256() { sha256sum <"$1" | cut -d' ' -f1; }
actual=$(sha256 "$from/$member")
[ "$actual" = "$expected" ] || die "$member does not match SHA256SUMS (SHA-256 $actual, listed $expected): it changed after the kit was made; nothing was installed: unpack the kit again"

# 3. Everything is written beside its place first (same folder, so the final rename is atomic)
# and renamed over it only once all of it is ready: a failure leaves nothing half-installed.
bindir=$prefix/bin
mandir=$prefix/share/man/man1
bashdir=$prefix/share/bash-completion/completions
zshdir=$prefix/share/zsh/site-functions
for dir in "$bindir" "$mandir" "$bashdir" "$zshdir"; do
    mkdir -p "$dir" 2>/dev/null || die "cannot create $(show "$dir"): choose a folder you can write with --prefix DIR"
done
prefix=$(cd "$prefix" && pwd)
bindir=$prefix/bin
mandir=$prefix/share/man/man1
bashdir=$prefix/share/bash-completion/completions
zshdir=$prefix/share/zsh/site-functions
new_bin=$bindir/.iteragpu.install.$$
new_bash=$bashdir/.iteragpu.install.$$
new_zsh=$zshdir/.iteragpu.install.$$
new_man=""
cleanup() { rm -rf "$new_bin" "$new_bash" "$new_zsh" ${new_man:+"$new_man"}; }
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
new_man=$(mktemp -d "$mandir/.iteragpu.install.XXXXXX")

cp "$from/$member" "$new_bin"
chmod 755 "$new_bin"
# The copy is what gets installed: check it too, in case the source changed while it was copied.
[ "$(sha256 "$new_bin")" = "$expected" ] || die "the copy of $member does not match SHA256SUMS: the file changed while it was copied; nothing was installed"
if ! version=$("$new_bin" --version 2>&1); then
    # A build made on a newer system than this one: the loader names the glibc versions it lacks.
    needed=$(printf '%s\n' "$version" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -V | tail -1 || true)
    [ -z "$needed" ] || die "$member needs $needed, newer than this machine's glibc $glibc: it was built on a newer system; use a kit with the portable binaries of scripts/release.sh (glibc 2.28 or newer); nothing was installed"
    die "$member does not start on this machine ($(printf '%s\n' "$version" | head -1)); nothing was installed"
fi
"$new_bin" completions bash >"$new_bash" || die "iteragpu completions bash failed; nothing was installed"
"$new_bin" completions zsh >"$new_zsh" || die "iteragpu completions zsh failed; nothing was installed"
"$new_bin" man --output-dir "$new_man" >/dev/null || die "iteragpu man --output-dir failed; nothing was installed"
pages=0
for page in "$new_man"/*.1; do
    mv -f "$page" "$mandir/${page##*/}"
    pages=$((pages + 1))
done
mv -f "$new_bash" "$bashdir/iteragpu"
mv -f "$new_zsh" "$zshdir/_iteragpu"
mv -f "$new_bin" "$bindir/iteragpu"

say "checked: $arch Linux, glibc $glibc (2.28 or newer needed); $member matches SHA256SUMS"
say "installed $version into $(show "$prefix"):"
say "  $(show "$bindir")/iteragpu"
say "  $(show "$mandir")/iteragpu.1 and $((pages - 1)) iteragpu-COMMAND.1 pages"
say "  $(show "$bashdir")/iteragpu"
say "  $(show "$zshdir")/_iteragpu"

# 4. What the shells need to find it. Paths under the home folder are written with $HOME, so that
# the lines can be pasted into ~/.profile as they are. shell_word FOLDER TAIL prints FOLDER then
# TAIL (`:$PATH`, expanded when the line runs) as one word for a POSIX shell: in double quotes
# when the folder holds only characters that are plain there, else the folder in single quotes
# (`'` written '\''), so that no `$`, backquote, `"`, `\` or `!` of a --prefix is ever run.
shell_word() {
    home='' rest=$1
    if [ -n "$HOME" ]; then
        case $1 in "$HOME"/*) home='$HOME/' rest=${1#"$HOME"/} ;; esac
    fi
    case $rest in
    *[!A-Za-z0-9_./+@%,=~-]*)
        [ -z "$home" ] || printf '"$HOME"/'
        printf "'%s'" "$(printf '%s' "$rest" | sed "s/'/'\\\\''/g")"
        [ -z "$2" ] || printf '"%s"' "$2"
        ;;
    *) printf '"%s%s%s"' "$home" "$rest" "$2" ;;
    esac
}
case ":${PATH:-}:" in
*":$bindir:"*) say "PATH: $(show "$bindir") is on it: run iteragpu --help" ;;
*)
    if [ "$prefix" = "$HOME/.local" ] && [ -f "$HOME/.profile" ] && grep -q '\.local/bin' "$HOME/.profile"; then
        say "PATH: a new login shell has ~/.local/bin on it (your ~/.profile adds it); in this one: export PATH=$(shell_word "$bindir" ':$PATH')"
    else
        say "PATH: add to ~/.profile (or ~/.bashrc, ~/.zshrc): export PATH=$(shell_word "$bindir" ':$PATH')"
    fi
    ;;
esac
case ":${MANPATH-}:" in
*":$prefix/share/man:"*) say "MANPATH: $(show "$prefix/share/man") is on it" ;;
*)
    if [ -n "${MANPATH+set}" ]; then
        say "MANPATH: it is set without $(show "$prefix/share/man"): add export MANPATH=$(shell_word "$prefix/share/man" ':$MANPATH')"
    else
        say "MANPATH: none needed: man finds $(show "$prefix/share/man") once $(show "$bindir") is on the PATH"
    fi
    ;;
esac
if [ "$bashdir" = "${XDG_DATA_HOME:-$HOME/.local/share}/bash-completion/completions" ]; then
    say "bash: the bash-completion package loads $(show "$bashdir")/iteragpu by itself"
else
    say "bash: add to ~/.bashrc: . $(shell_word "$bashdir/iteragpu" '')"
fi
say "zsh: add to ~/.zshrc, before compinit: fpath=($(shell_word "$zshdir" '') \$fpath)"
