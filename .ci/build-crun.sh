#!/usr/bin/env bash
# Builds crun with CRIU support (libcriu) for the tests that checkpoint and
# restore a GPU container with Podman and crun (kfd-sim-preload/tests/podman.rs):
# Debian 12's crun 1.8.1 is built without it. The source is Debian's own
# (`apt-get source crun`, the version apt would install, with Debian's
# patches), configured as Debian configures it plus libcriu; libcriu is
# built from the vendored CRIU criu-dev source
# (../shared/vendor/criu/criu-2cf8f13.tar.gz, read-only), as CRIU's lib/c
# Makefile builds it (CRIU_ARCHIVE names another archive).
#
#   .ci/build-crun.sh        prints "crun PATH ..."
#
# The result lands in $CRIU_BUILDS/crun/ (default ~/.cache/criu-builds,
# beside build.sh's CRIU builds): crun, and lib/libcriu.so.2, which crun
# loads at run time (dlopen, found through its RUNPATH, that lib/). A build
# of the same crun version from the same CRIU archive and script is reused.
# Everything else happens in a temporary directory, removed afterwards,
# apt's source index included (a private apt state: the system's sources
# list and lists are not touched). Needs root for the Debian packages it
# installs when missing, and what build.sh installs (protobuf-c).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
archive=${CRIU_ARCHIVE:-$here/../../shared/vendor/criu/criu-2cf8f13.tar.gz}
[ -f "$archive" ] || { echo "build-crun.sh: no CRIU source archive at $archive (set CRIU_ARCHIVE)" >&2; exit 1; }
cache=${CRIU_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/criu-builds}
out=$cache/crun

version=$(apt-cache policy crun | awk '/Candidate:/ {print $2}')
[ -n "$version" ] && [ "$version" != "(none)" ] || { echo "build-crun.sh: apt knows no crun package" >&2; exit 1; }
stamp=$( (sha256sum "$archive" "$0"; echo "$version") | sha256sum | cut -c1-16)
if [ -x "$out/crun" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "crun $out/crun"
    exit 0
fi

# Debian's build dependencies of crun (debian/control) that a build without
# its packaging needs, and protobuf-c for libcriu.
deps=(gcc make pkg-config python3 gperf libcap-dev libseccomp-dev libsystemd-dev libyajl-dev
      libprotobuf-c-dev protobuf-c-compiler)
missing=()
for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/build.log
fail() { tail -n 30 "$log"; echo "build-crun.sh: $1" >&2; exit 1; }

# libcriu: CRIU's generated headers, then lib/c/criu.c and images/rpc.pb-c.c
# compiled and linked with lib/c/Makefile's and lib/Makefile's flags.
mkdir "$work/criu" "$work/prefix"
tar -xzf "$archive" -C "$work/criu" --strip-components=1
make -C "$work/criu" criu/include/version.h images/rpc.pb-c.c >"$log" 2>&1 || fail "CRIU's headers failed"
criu_version=$(sed -n 's/^#define CRIU_VERSION "\(.*\)"/\1/p' "$work/criu/criu/include/version.h")
prefix=$work/prefix
mkdir -p "$prefix/include/criu" "$prefix/lib/pkgconfig"
(cd "$work/criu" && cc -O2 -g -fPIC -fno-stack-protector -iquote criu/arch/x86/include \
    -iquote criu/include -iquote images -shared -rdynamic -Wl,-soname,libcriu.so.2 \
    -o "$prefix/lib/libcriu.so.2" lib/c/criu.c images/rpc.pb-c.c -lprotobuf-c) >>"$log" 2>&1 \
    || fail "libcriu failed to build"
ln -s libcriu.so.2 "$prefix/lib/libcriu.so"
install -m 644 "$work/criu/lib/c/criu.h" "$work/criu/images/rpc.proto" "$work/criu/images/rpc.pb-c.h" \
    "$work/criu/criu/include/version.h" "$prefix/include/criu/"
sed -e "s,@version@,$criu_version," -e "s,@libdir@,$prefix/lib," -e "s,@includedir@,$prefix/include/," \
    "$work/criu/lib/c/criu.pc.in" > "$prefix/lib/pkgconfig/criu.pc"

# Debian's crun source, through apt with a state of its own.
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat > "$apt_dir/sources.list" <<EOF
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >>"$log" 2>&1 || fail "apt-get update of Debian's sources failed"
mkdir "$work/src"
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "crun=$version") >>"$log" 2>&1 \
    || fail "apt-get source crun=$version failed"
dsc=$(ls "$work"/src/crun_*.dsc)
# dpkg-source would want dpkg-dev: the 3.0 (quilt) format by hand, which
# is the upstream tarball, Debian's directory over it and its patches in
# series order.
upstream=$(ls "$work"/src/crun_*.orig.tar.* | grep -v '\.asc$')
debian=$(ls "$work"/src/crun_*.debian.tar.* | grep -v '\.asc$')
crun=$work/crun
mkdir "$crun"
tar -xf "$upstream" -C "$crun" --strip-components=1
tar -xf "$debian" -C "$crun"
if [ -f "$crun/debian/patches/series" ]; then
    while read -r patch; do
        case $patch in ''|'#'*) continue ;; esac
        patch -d "$crun" -p1 -s < "$crun/debian/patches/$patch" >>"$log" 2>&1 || fail "Debian patch $patch failed"
    done < "$crun/debian/patches/series"
fi
# Debian's configure (dh_auto_configure: the defaults) plus libcriu; crun
# links libcrun statically and dlopens libcriu.so.2, found through its
# RUNPATH, the absolute directory it lands in ($ORIGIN would not do: crun
# runs a copy of itself from a memfd).
(cd "$crun" && PKG_CONFIG_PATH=$prefix/lib/pkgconfig ./configure --prefix=/usr --disable-shared \
    CPPFLAGS="-I$prefix/include") >>"$log" 2>&1 || fail "configure failed"
grep -q '^#define HAVE_CRIU 1' "$crun/config.h" || fail "configure found no libcriu"
make -C "$crun" -j"$(nproc)" git-version.h >>"$log" 2>&1 || fail "git-version.h failed"
make -C "$crun" -j"$(nproc)" crun "LDFLAGS=-Wl,-rpath,$out/lib" >>"$log" 2>&1 || fail "crun failed to build"
"$crun/crun" --version | grep -q '+CRIU' || fail "the built crun has no CRIU support"

rm -rf "$out"
mkdir -p "$out/lib"
cp "$crun/crun" "$out/crun"
cp "$prefix/lib/libcriu.so.2" "$out/lib/libcriu.so.2"
echo "$stamp" > "$out/stamp"
echo "crun $out/crun ($(basename "$dsc" .dsc), libcriu $criu_version)"
