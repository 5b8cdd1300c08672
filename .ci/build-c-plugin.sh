#!/usr/bin/env bash
# Builds upstream CRIU's C amdgpu plugin (plugins/amdgpu of criu-dev
# 2cf8f13, the vendored ../shared/vendor/criu/criu-2cf8f13.tar.gz) for the
# tests that run it beside this project's plugin under real CRIU.
#
#   .ci/build-c-plugin.sh        prints "c-plugin PATH"
#
# The result lands in $CRIU_BUILDS/c-plugin/amdgpu_plugin.so (default
# ~/.cache/criu-builds, beside build.sh's CRIU builds), cached (see
# criu-dev.sh). Needs what build.sh installs (protobuf-c, libdrm-dev) and
# runs after it. The top-level target builds what the plugin includes
# (compel's headers, CRIU's generated ones) and then the plugin, linked
# against libdrm.
set -euo pipefail
source "$(dirname "$0")/criu-dev.sh"
criu_dev_build c-plugin amdgpu_plugin plugins/amdgpu/amdgpu_plugin.so
