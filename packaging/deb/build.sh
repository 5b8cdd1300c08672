#!/usr/bin/env bash
# Builds the Debian package from a staged install (`make deb` runs it):
#
#   build.sh STAGE OUT_DIR REVISION
#
# STAGE holds what `make install PREFIX=/usr` (stripped binaries, man pages,
# completions; zsh's in Debian's vendor-completions) wrote into a DESTDIR;
# it becomes the package's tree, with the man pages compressed, the docs, the
# changelogs and the copyright file added, and the install manifest removed
# (dpkg keeps its own list). The package is OUT_DIR/amdgpu-criu_V-R_ARCH.deb,
# V the CLI's own version, R the Debian REVISION; its path is printed.
#
# Depends comes from dpkg-shlibdeps over the two binaries. Maintainer is
# "$DEBFULLNAME <$DEBEMAIL>" (Debian's variables), else git's user.name and
# user.email. Every date in the package is SOURCE_DATE_EPOCH, by default the
# time of the source tree's last commit, so two builds of one tree are the
# same bytes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() {
    echo "make deb: $*" >&2
    exit 1
}
[ $# -eq 3 ] || fail "usage: build.sh STAGE OUT_DIR REVISION"
stage=$1 out_dir=$2 revision=$3
case $revision in
[0-9]*) ;;
*) fail "DEB_REVISION must start with a digit, not '$revision'" ;;
esac
for tool in dpkg-deb dpkg-shlibdeps gzip python3; do
    command -v "$tool" >/dev/null || fail "$tool is needed (Debian: apt-get install dpkg-dev gzip python3)"
done

upstream=$("$stage/usr/bin/amdgpu-criu" --version | awk '{print $2}')
[ -n "$upstream" ] || fail "cannot read the version of $stage/usr/bin/amdgpu-criu"
version=$upstream-$revision
arch=$(dpkg --print-architecture)
name=${DEBFULLNAME:-$(git -C "$root" config user.name 2>/dev/null || true)}
email=${DEBEMAIL:-$(git -C "$root" config user.email 2>/dev/null || true)}
[ -n "$name" ] && [ -n "$email" ] ||
    fail "no maintainer: set DEBFULLNAME and DEBEMAIL (or git's user.name and user.email)"
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

# dpkg records the files itself; the manifest is `make uninstall`'s.
rm -f "$stage/usr/share/amdgpu-criu/install-manifest"
rmdir "$stage/usr/share/amdgpu-criu"
find "$stage/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +

doc=$stage/usr/share/doc/amdgpu-criu
mkdir -p "$doc"
install -m 0644 "$root/README.md" "$doc/README.md"
install -m 0644 "$root/docs/first-checkpoint.md" "$doc/first-checkpoint.md"
install -m 0644 "$root/criu-plugin-amdgpu/README.md" "$doc/README.plugin.md"
# The upstream changelog: the release's, then the two shipped crates'.
cat "$root/CHANGELOG.md" "$root/criu-plugin-amdgpu/CHANGELOG.md" \
    "$root/amdgpu-criu/CHANGELOG.md" > "$doc/changelog"
cat > "$doc/changelog.Debian" <<EOF
amdgpu-criu ($version) unstable; urgency=medium

  * Package of amdgpu-criu-rs $upstream, built from commit $commit
    (make deb); what changed upstream is in changelog.gz.

 -- $name <$email>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
EOF
# Debian policy 12.3: documentation over 4 kB is compressed, and the
# changelogs always are.
find "$doc" -type f -size +4k ! -name 'changelog*' -exec gzip -9n {} +
gzip -9n "$doc/changelog" "$doc/changelog.Debian"
python3 "$here/copyright.py" "$root" > "$doc/copyright"
install -D -m 0644 "$here/lintian-overrides" "$stage/usr/share/lintian/overrides/amdgpu-criu"

find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -type f -exec chmod 0644 {} +
chmod 0755 "$stage/usr/bin/amdgpu-criu"

# Depends: the shared libraries the binaries need, as dpkg-shlibdeps finds
# their packages (it reads a debian/control, which a binary-only build has
# no other use for).
shlibs=$(mktemp -d)
trap 'rm -rf "$shlibs"' EXIT
mkdir "$shlibs/debian"
printf 'Source: amdgpu-criu\n\nPackage: amdgpu-criu\nArchitecture: any\n' > "$shlibs/debian/control"
depends=$(cd "$shlibs" && dpkg-shlibdeps -O "$stage/usr/bin/amdgpu-criu" \
    "$stage/usr/lib/criu/amdgpu_plugin.so" 2>"$shlibs/log" | sed -n 's/^shlibs:Depends=//p') || {
    cat "$shlibs/log" >&2
    fail "dpkg-shlibdeps failed"
}
[ -n "$depends" ] || {
    cat "$shlibs/log" >&2
    fail "dpkg-shlibdeps found no dependency"
}

# Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, and
# one per directory or link.
installed_size=$(find "$stage" -mindepth 1 -printf '%y %s\n' |
    awk '$1 == "f" { kib += int(($2 + 1023) / 1024); next } { kib += 1 } END { print kib }')

mkdir -p "$stage/DEBIAN"
shopt -u patsub_replacement 2>/dev/null || true # '&' in a value stays '&'
control=$(<"$here/control.in")
control=${control//@VERSION@/$version}
control=${control//@ARCH@/$arch}
control=${control//@MAINTAINER@/$name <$email>}
control=${control//@INSTALLED_SIZE@/$installed_size}
control=${control//@DEPENDS@/$depends}
printf '%s\n' "$control" > "$stage/DEBIAN/control"
install -m 0755 "$here/preinst" "$here/postrm" "$stage/DEBIAN/"
(cd "$stage" && find usr -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out_dir"
deb=$out_dir/amdgpu-criu_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
