#!/usr/bin/env bash
# Builds a CRIU binary for `amdgpu-criu sim` (and anything else that wants a
# CRIU newer than the distribution's), from a CRIU source tree or archive
# you name, or from CRIU's git repository.
#
#   packaging/criu/build.sh                     criu-dev from git (as "head")
#   CRIU_REF=v4.2 packaging/criu/build.sh       a tag or branch from git
#   CRIU_SRC=~/src/criu packaging/criu/build.sh     a source tree
#   CRIU_SRC=criu-4.2.tar.gz packaging/criu/build.sh  a source archive
#   make criu [CRIU_SRC=...|CRIU_REF=...]       the same through make
#
# The binary lands in $CRIU_BUILDS/<name>/criu (default
# ~/.cache/criu-builds; <name> is CRIU_NAME, else "head" for criu-dev, else
# the ref, else the source's directory or archive name), where
# `amdgpu-criu sim checkpoint|restore` look for it after `--criu` and
# `criu` on PATH. The script prints "NAME PATH". A binary already built from
# the same ref (git) or the same archive is reused.
#
# CRIU's build needs Debian's build-essential pkg-config libprotobuf-dev
# libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf
# libnl-3-dev libnet1-dev libcap-dev libbsd-dev libgnutls28-dev
# libnftables-dev libaio-dev libdrm-dev uuid-dev (and git to fetch): the
# script names the missing ones and stops, or installs them with apt-get
# when INSTALL_DEPS=1 (as root).
#
# CRIU before 4.0 fails `criu check` on kernels from 6.13 on (vDSO
# layout; upstream commit 8ee2eba47 fixes it): build 4.0 or later there.
set -euo pipefail

builds=${CRIU_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/criu-builds}
repo=${CRIU_REPO:-https://github.com/checkpoint-restore/criu.git}
src=${CRIU_SRC:-}
ref=${CRIU_REF:-}
if [ -n "$src" ] && [ -n "$ref" ]; then
    echo "build.sh: give CRIU_SRC or CRIU_REF, not both" >&2
    exit 2
fi
[ -n "$src" ] || ref=${ref:-criu-dev}

if [ -n "${CRIU_NAME:-}" ]; then
    name=$CRIU_NAME
elif [ -n "$ref" ]; then
    name=$ref
    [ "$ref" != criu-dev ] || name=head
else
    name=$(basename "${src%/}")
    name=${name%.tar.gz}
    name=${name%.tgz}
fi
case $name in */* | "" | . | ..)
    echo "build.sh: cannot name the build after \"$name\": set CRIU_NAME" >&2
    exit 2 ;;
esac

out=$builds/$name
# What the build is made from, known before fetching or unpacking: a build
# from the same commit or archive is reused.
if [ -n "$ref" ]; then
    if ! command -v git >/dev/null; then
        echo "build.sh: fetching CRIU needs git: apt-get install git, or give CRIU_SRC" >&2
        exit 2
    fi
    if ! remote=$(git ls-remote "$repo" "refs/heads/$ref" "refs/tags/$ref^{}" "refs/tags/$ref"); then
        echo "build.sh: cannot reach $repo: give a CRIU source tree or archive you have with CRIU_SRC" >&2
        exit 2
    fi
    commit=$(printf '%s\n' "$remote" | head -n 1 | cut -f1)
    if [ -z "$commit" ]; then
        echo "build.sh: $repo has no branch or tag $ref" >&2
        exit 2
    fi
    stamp="git $commit"
elif [ -f "$src" ]; then
    stamp="archive $(sha256sum "$src" | cut -c1-16)"
elif [ -d "$src" ]; then
    stamp=""
else
    echo "build.sh: CRIU_SRC=$src is neither a directory nor an archive" >&2
    exit 2
fi
if [ -n "$stamp" ] && [ -x "$out/criu" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$name $out/criu"
    exit 0
fi

deps=(build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
      protobuf-compiler python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev
      libgnutls28-dev libnftables-dev libaio-dev libdrm-dev uuid-dev)
if command -v dpkg-query >/dev/null; then
    missing=()
    for p in "${deps[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "${INSTALL_DEPS:-0}" = 1 ]; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends "${missing[@]}"
        else
            echo "build.sh: CRIU's build needs: ${missing[*]}" >&2
            echo "build.sh: apt-get install ${missing[*]} (or run with INSTALL_DEPS=1 as root)" >&2
            exit 2
        fi
    fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/criu
if [ -n "$ref" ]; then
    git clone -q --depth 1 --branch "$ref" "$repo" "$tree"
elif [ -d "$src" ]; then
    cp -a "$src/." "$tree"
else
    mkdir "$tree"
    tar -xzf "$src" -C "$tree" --strip-components=1
fi
if ! make -C "$tree" -j"$(nproc)" criu >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    echo "build.sh: building CRIU ($name) failed; the lines above say why" >&2
    exit 1
fi
mkdir -p "$out"
cp "$tree/criu/criu" "$out/criu"
printf '%s\n' "$stamp" > "$out/stamp"
echo "$name $out/criu"
