# Sourced by the scripts that build something of criu-dev 2cf8f13 (the
# vendored ../shared/vendor/criu/criu-2cf8f13.tar.gz, $CRIU_DEV_ARCHIVE
# when set) for the tests: build-c-plugin.sh and build-criu-2026-hooks.sh.
#
#   criu_dev_build NAME TARGET BUILT [PATCH]
#
# extracts the archive into a temporary directory (the archive is a
# read-only input), applies PATCH (a file beside these scripts) when given,
# runs `make TARGET` there and copies BUILT (a path in the tree) into
# $CRIU_BUILDS/NAME/ (default ~/.cache/criu-builds, beside build.sh's
# builds), then prints "NAME PATH". A result built from the same archive,
# patch and scripts is reused. Needs what build.sh installs.
criu_dev_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

criu_dev_build() {
    local name=$1 target=$2 built=$3 patch=${4:-}
    local archive=${CRIU_DEV_ARCHIVE:-$criu_dev_here/../../shared/vendor/criu/criu-2cf8f13.tar.gz}
    local cache=${CRIU_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/criu-builds}
    local out=$cache/$name result
    result=$out/$(basename "$built")
    local stamp
    stamp=$(sha256sum "$archive" ${patch:+"$criu_dev_here/$patch"} "$criu_dev_here/criu-dev.sh" "$0" \
        | sha256sum | cut -c1-16)
    if [ -f "$result" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$name $result"
        return 0
    fi
    local src
    src=$(mktemp -d)
    # shellcheck disable=SC2064 # the paths are fixed now
    trap "rm -rf '$src' '$src.log'" EXIT
    tar -xzf "$archive" -C "$src" --strip-components=1
    [ -z "$patch" ] || patch -d "$src" -p1 -s < "$criu_dev_here/$patch"
    if ! make -C "$src" -j"$(nproc)" "$target" >"$src.log" 2>&1; then
        tail -n 30 "$src.log"
        echo "$(basename "$0"): make $target of criu-dev failed" >&2
        exit 1
    fi
    mkdir -p "$out"
    cp "$src/$built" "$result.partial"
    mv "$result.partial" "$result"
    echo "$stamp" > "$out/stamp"
    echo "$name $result"
}
