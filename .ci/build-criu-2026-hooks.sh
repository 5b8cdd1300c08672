#!/usr/bin/env bash
# Builds CRIU criu-dev 2cf8f13 (the vendored ../shared/vendor/criu/criu-2cf8f13.tar.gz)
# with CRIU's plugin hook changes of 2026 applied (criu-2026-hooks.patch
# beside this script), for the test that runs this project's plugin beside
# another plugin under them (kfd-sim-preload/tests/real_criu_restore.rs):
#   criu#3105 (open): CHECKPOINT_DEVICES and RESUME_DEVICES_LATE are called
#     once more with pid -1 after their per-task loops (run_plugins: a
#     plugin answers -ENOTSUP when the call is not for it);
#   criu 66fe7a1dd (criu#3076, open): DUMP_DEVICES_LATE, RESTORE_INIT and
#     POST_FORKING call every plugin and return the first error once all
#     ran (run_plugins_broadcast).
# The patch models the two changes as their descriptions and commit message
# state them, on the vendored source (neither is merged upstream).
#
#   .ci/build-criu-2026-hooks.sh        prints "head-2026-hooks PATH"
#
# The binary lands in $CRIU_BUILDS/head-2026-hooks/criu (default
# ~/.cache/criu-builds, beside build.sh's builds), cached (see
# criu-dev.sh). Needs what build.sh installs and runs after it.
set -euo pipefail
source "$(dirname "$0")/criu-dev.sh"
criu_dev_build head-2026-hooks criu criu/criu criu-2026-hooks.patch
