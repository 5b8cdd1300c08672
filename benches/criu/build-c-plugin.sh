#!/usr/bin/env bash
# Builds upstream CRIU's C amdgpu_plugin.so from the criu-dev archive that
# ../shared/vendor/criu/build.sh builds criu-dev ("head") from, for the
# criu_cost benchmark's comparison (`make amdgpu_plugin` in the CRIU tree;
# needs libdrm-dev, which build.sh installs).
#
#   build-c-plugin.sh        prints "c-plugin PATH"
#
# The result lands in $CRIU_BUILDS/c-plugin/amdgpu_plugin.so (default
# ~/.cache/criu-builds, build.sh's cache) and is reused while the archive is
# unchanged. The archive is read-only; the tree is unpacked into a temporary
# directory that is removed afterwards.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vendor=$(cd "$here/../../../shared/vendor/criu" 2>/dev/null && pwd) || {
    echo "build-c-plugin.sh: no ../shared/vendor/criu beside the repository" >&2
    exit 1
}
archive=$vendor/criu-2cf8f13.tar.gz
cache=${CRIU_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/criu-builds}
out=$cache/c-plugin
stamp=$(sha256sum "$archive" | cut -c1-16)
if [ -f "$out/amdgpu_plugin.so" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "c-plugin $out/amdgpu_plugin.so"
    exit 0
fi
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
tar -xzf "$archive" -C "$src" --strip-components=1
make -C "$src" -j"$(nproc)" amdgpu_plugin >"$src/build.log" 2>&1 || {
    tail -n 30 "$src/build.log"
    echo "build-c-plugin.sh: make amdgpu_plugin failed" >&2
    exit 1
}
mkdir -p "$out"
cp "$src/plugins/amdgpu/amdgpu_plugin.so" "$out/"
echo "$stamp" > "$out/stamp"
echo "c-plugin $out/amdgpu_plugin.so"
