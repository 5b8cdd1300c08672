#!/usr/bin/env bash
# Builds upstream CRIU's C amdgpu plugin (plugins/amdgpu of criu-dev
# 2cf8f13, the vendored ../shared/vendor/criu/criu-2cf8f13.tar.gz) for the
# tests that run it beside this project's plugin under real CRIU.
#
#   .ci/build-c-plugin.sh        prints "c-plugin PATH"
#
# The result lands in $CRIU_BUILDS/c-plugin/amdgpu_plugin.so (default
# ~/.cache/criu-builds, beside build.sh's CRIU builds); a build from the same
# archive and script is reused. The archive is a read-only input: the build
# happens in a temporary directory, removed afterwards. Needs what build.sh
# installs (protobuf-c, libdrm-dev) and runs after it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
archive=$here/../../shared/vendor/criu/criu-2cf8f13.tar.gz
cache=${CRIU_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/criu-builds}
out=$cache/c-plugin
stamp=$(sha256sum "$archive" "$0" | sha256sum | cut -c1-16)
if [ -f "$out/amdgpu_plugin.so" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "c-plugin $out/amdgpu_plugin.so"
    exit 0
fi
src=$(mktemp -d)
trap 'rm -rf "$src" "$src.log"' EXIT
tar -xzf "$archive" -C "$src" --strip-components=1
# The top-level target builds what the plugin includes (compel's headers,
# CRIU's generated ones) and then the plugin, linked against libdrm.
if ! make -C "$src" -j"$(nproc)" amdgpu_plugin >"$src.log" 2>&1; then
    tail -n 30 "$src.log"
    echo "build-c-plugin.sh: the C plugin failed to build" >&2
    exit 1
fi
mkdir -p "$out"
cp "$src/plugins/amdgpu/amdgpu_plugin.so" "$out/amdgpu_plugin.so"
echo "$stamp" > "$out/stamp"
echo "c-plugin $out/amdgpu_plugin.so"
