#!/usr/bin/env bash
# A renter's first minutes, checked in a Debian root without Rust, Python or a compiler: a minimal
# Debian (debootstrap --variant=minbase, plus man-db for `man`) gets an unpacked kit in a new
# user's home; that user runs `sh scripts/install.sh` in it; then a new login shell
# (`bash -lc`, which reads Debian's ~/.profile) must find `iteragpu` on its PATH, run it, find its
# manual page with `man -w` and have both completions in place. Then the same from the kit's
# .tar.gz on a root without unzip, python3 or awk (only tar, gzip, sha256sum and coreutils left to
# unpack, check and install it): `tar -xzf`, then `sh scripts/install.sh`.
#
#   scripts/check-install-debian.sh [KIT.zip]
#
# KIT.zip (its .tar.gz beside it) defaults to a kit written here by target/release/iteragpu (`iteragpu kit`, run from
# this folder: the portable binaries of dist/ when scripts/release.sh wrote them, else this
# build). ITERAGPU_DEBIAN_SUITE picks the release (bookworm, Debian 12, by default; bullseye is
# Debian 11), ITERAGPU_DEBIAN_MIRROR the package mirror (default http://deb.debian.org/debian).
# Needs root (debootstrap, chroot) and the `debootstrap` package. The pristine root is kept in
# .cache/install-debian/<suite>/ (about 220 MB; debootstrap takes 1 to 3 minutes the first time)
# and every run works on a fresh copy of it, so a rerun takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=${ITERAGPU_DEBIAN_SUITE:-bookworm}
mirror=${ITERAGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=.cache/install-debian
pristine=$cache/$suite
root=$cache/run-$suite
user=renter
fail() {
    echo "check-install-debian: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root, for debootstrap and chroot: run it with sudo"
command -v debootstrap >/dev/null || fail "debootstrap is not installed: apt-get install debootstrap"
start=$SECONDS

if [ ! -x "$pristine/bin/bash" ] || [ ! -x "$pristine/usr/bin/man" ]; then
    echo "== debootstrap --variant=minbase --include=man-db $suite into $pristine ($mirror)"
    rm -rf "$pristine.tmp"
    mkdir -p "$cache"
    debootstrap --variant=minbase --include=man-db "$suite" "$pristine.tmp" "$mirror" \
        >"$cache/debootstrap-$suite.log" 2>&1 || {
        tail -20 "$cache/debootstrap-$suite.log" >&2
        fail "debootstrap of $suite from $mirror failed (log: $cache/debootstrap-$suite.log)"
    }
    rm -rf "$pristine"
    mv "$pristine.tmp" "$pristine"
    echo "   built in $((SECONDS - start)) s"
fi

work=$(mktemp -d)
trap 'rm -rf "$work" "$root"' EXIT
kit=${1:-}
if [ -z "$kit" ]; then
    [ -x target/release/iteragpu ] || fail "no target/release/iteragpu: run cargo build --release --locked first, or give a kit"
    kit=$work/kit.zip
    target/release/iteragpu kit --output "$kit" | grep '^program: '
fi
[ -f "$kit" ] || fail "$kit: no such kit"
kit_tgz=${kit%.zip}.tar.gz
[ -f "$kit_tgz" ] || fail "$kit_tgz: no .tar.gz beside the kit (iteragpu kit writes both)"

# check_install zip|tar.gz: a fresh root, the kit unpacked in a new user's home, install.sh, a
# new login shell.
check_install() {
    local form=$1
    echo "== [$form] a fresh copy of the $suite root, a user $user with the unpacked kit in its home"
    rm -rf "$root"
    cp -a "$pristine" "$root"
    chroot "$root" sh -c 'for tool in cargo rustc python3 cc gcc; do ! command -v "$tool" >/dev/null || { echo "$tool is in the root" >&2; exit 1; }; done' \
        || fail "the $suite root is not bare"
    chroot "$root" useradd --create-home --shell /bin/bash "$user"
    if [ "$form" = zip ]; then
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$kit" "$root/home/$user"
    else
        # An image with neither unzip nor python3 nor awk: what is left must do.
        rm -f "$root"/usr/bin/unzip "$root"/usr/bin/python3* "$root"/usr/bin/awk "$root"/usr/bin/mawk \
            "$root"/usr/bin/gawk "$root"/etc/alternatives/awk
        chroot "$root" sh -c 'for tool in unzip python3 awk; do ! command -v "$tool" >/dev/null || { echo "$tool is in the root" >&2; exit 1; }; done' \
            || fail "the $suite root still has unzip, python3 or awk"
        cp "$kit_tgz" "$root/home/$user/kit.tar.gz"
    fi
    chroot "$root" chown -R "$user:$user" "/home/$user"
    echo "$(chroot "$root" sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), $(chroot "$root" getconf GNU_LIBC_VERSION)"

    if [ "$form" = zip ]; then
        echo "== [$form] as $user, in the unpacked kit: sh scripts/install.sh"
        as_user sh -c 'cd ~/iteragpu-lab-v1 && sh scripts/install.sh'
    else
        echo "== [$form] as $user: tar -xzf kit.tar.gz, then sh scripts/install.sh in it"
        as_user sh -c 'cd ~ && tar -xzf kit.tar.gz && cd iteragpu-lab-v1 && sha256sum -c --strict --quiet SHA256SUMS && sh scripts/install.sh'
    fi

    echo "== [$form] a new login shell: bash -lc"
    out=$(as_user bash -lc 'command -v iteragpu; iteragpu --version; man -w iteragpu-measure; man -w iteragpu
        iteragpu estimate --parameters 7B --bits 16 | head -1
        cd ~/iteragpu-lab-v1 && iteragpu verify . | tail -2
        . ~/.local/share/bash-completion/completions/iteragpu && complete -p iteragpu
        head -1 ~/.local/share/zsh/site-functions/_iteragpu') || {
        echo "$out" >&2
        fail "[$form] the new login shell could not run iteragpu, man -w or the completion"
    }
    echo "$out"
    home=/home/$user
    expect "$home/.local/bin/iteragpu"
    expect "$home/.local/share/man/man1/iteragpu-measure.1"
    expect "$home/.local/share/man/man1/iteragpu.1"
    expect "complete: yes (nothing missing, nothing unexpected, no unsafe path)"
    expect "#compdef iteragpu"
    grep -q '^iteragpu [0-9]' <<<"$out" || fail "[$form] iteragpu --version printed no version"
    grep -q '^complete .* iteragpu$' <<<"$out" || fail "[$form] the bash completion did not register"
}
as_user() {
    chroot --userspec="$user:$user" "$root" env -i HOME="/home/$user" USER="$user" LOGNAME="$user" \
        SHELL=/bin/bash PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM=dumb "$@"
}
expect() {
    grep -qxF -- "$1" <<<"$out" || fail "the login shell did not print \`$1\`"
}
check_install zip
check_install tar.gz
echo "== passed on $suite in $((SECONDS - start)) s: iteragpu, its manual pages and completions from the kit's zip and from its .tar.gz (no unzip, python3 or awk)"
