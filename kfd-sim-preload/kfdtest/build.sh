#!/usr/bin/env bash
# Builds AMD's KFD test suite (kfdtest, ROCT-Thunk-Interface rocm-5.2.3
# tests/kfdtest) against the system's libhsakmt, for the kfdtest acceptance
# run of kfd-sim (kfd-sim-preload/tests/kfdtest.rs).
#
#   build.sh            prints the path of the built kfdtest binary
#
# The source archive (../shared/vendor/rocm, read-only) is extracted into a
# temporary directory and no-sp3.patch (beside this script) applied there:
# the archive lacks AMD's prebuilt SP3 shader assembler (sp3/libamdsp3.a),
# so the patch drops it from the link and makes IsaGenerator::CompileShader
# say "kfdtest: no SP3 assembler" and end the process with status 77. Nothing
# else in the suite changes.
#
# The binary lands in $KFDTEST_CACHE/<stamp>/kfdtest (default
# ~/.cache/kfdtest-build), the stamp hashing the archive, the patch and this
# script: a second call costs nothing. It needs Debian's cmake, make, g++,
# pkg-config, libdrm-dev, libnuma-dev and libhsakmt-dev, and installs
# nothing itself (.ci/run installs them): when one is missing it says which
# and how to install them, and exits with status 2. kfdtest brings its own
# googletest (1.6.0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
archive=${KFDTEST_ARCHIVE:-$root/../shared/vendor/rocm/ROCT-Thunk-Interface-rocm-5.2.3-kfdtest.tar.gz}
cache=${KFDTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kfdtest-build}

[ -f "$archive" ] || { echo "build.sh: no kfdtest source archive at $archive" >&2; exit 1; }

deps=(cmake make g++ pkg-config libdrm-dev libnuma-dev libhsakmt-dev)
missing=()
for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: kfdtest needs Debian packages that are not installed: ${missing[*]}" \
        "(apt-get install --no-install-recommends ${missing[*]}; .ci/run installs them)" >&2
    exit 2
fi

stamp=$(sha256sum "$archive" "$here/no-sp3.patch" "$here/build.sh" | sha256sum | cut -c1-16)
out=$cache/$stamp
if [ -x "$out/kfdtest" ]; then
    echo "$out/kfdtest"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$archive" -C "$work" --strip-components=1
patch -d "$work" -p1 -s < "$here/no-sp3.patch"
mkdir "$work/build"
if ! (cd "$work/build" && cmake "$work/tests/kfdtest" \
        && make -j"$(nproc)" kfdtest) >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    echo "build.sh: building kfdtest failed" >&2
    exit 1
fi
mkdir -p "$out"
cp "$work/build/kfdtest" "$out/kfdtest.partial"
mv "$out/kfdtest.partial" "$out/kfdtest"
echo "$out/kfdtest"
