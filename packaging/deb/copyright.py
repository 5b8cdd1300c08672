#!/usr/bin/env python3
"""Writes the Debian package's copyright file (machine-readable format 1.0).

    copyright.py WORKSPACE_ROOT

The file is copyright.head (this project), then one paragraph per Rust crate
linked into the shipped binaries (the plugin .so and the CLI), then one
paragraph per license those use, from licenses/. The crate set is what
`cargo tree` resolves for the two packages on the host target, normal
dependencies only, proc-macros left out (they run at build time and are not
in the binaries); each crate's Copyright lines are taken from the license
and copyright files it ships, its `authors` when it ships none. A license
with no text in licenses/ is an error: add its text there.

Runs cargo offline and locked: the crates must be the ones the release build
used, already in cargo's cache.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = ["amdgpu-criu", "criu-plugin-amdgpu"]
# DEP-5 short name -> file in licenses/.
LICENSE_FILES = {
    "MIT": "MIT",
    "Apache-2.0": "Apache-2.0",
    "Apache-2.0 with LLVM exception": "Apache-2.0-with-LLVM-exception",
    "BSD-2-Clause": "BSD-2-Clause",
    "Unlicense": "Unlicense",
    "Zlib": "Zlib",
    "0BSD": "0BSD",
}
NOTICE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|COPYRIGHT|UNLICENSE|NOTICE)", re.IGNORECASE)
# "Copyright (c) 2014 The Rust Project Developers", not the Apache
# appendix's template ("Copyright [yyyy] [name of copyright owner]") nor a
# clause about "copyright notice".
NOTICE_LINE = re.compile(r"^\s*Copyright\s+(?:\(c\)\s*|©\s*)?(?=[0-9A-Z])(.*)$")


def cargo(*args, cwd):
    cmd = [os.environ.get("CARGO", "cargo"), *args, "--offline", "--locked"]
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"copyright.py: {' '.join(cmd)} failed:\n{run.stderr}")
    return run.stdout


def host_target(cwd):
    out = subprocess.run(["rustc", "-vV"], cwd=cwd, check=True, capture_output=True, text=True)
    return next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("host:"))


def linked_crates(root, target):
    """(name, version) of every registry crate in the shipped binaries."""
    args = ["tree", "-e", "normal,no-proc-macro", "--target", target,
            "--prefix", "none", "--format", "{p}"]
    for package in SHIPPED:
        args += ["-p", package]
    crates = set()
    for line in cargo(*args, cwd=root).splitlines():
        fields = line.split()
        # "name v1.2.3", "name v1.2.3 (*)"; workspace crates carry their path.
        if len(fields) < 2 or "(/" in line:
            continue
        crates.add((fields[0], fields[1].removeprefix("v")))
    return sorted(crates)


def dep5_license(spdx):
    """An SPDX expression in DEP-5 syntax, and the license names it uses."""
    spdx = spdx.replace("/", " OR ")
    spdx = re.sub(r"\s+WITH\s+([A-Za-z0-9.+]+)-exception", r" with \1 exception", spdx)
    expression = re.sub(r"\bOR\b", "or", re.sub(r"\bAND\b", "and", spdx))
    names = [n.strip() for n in re.split(r"\bor\b|\band\b|[()]", expression) if n.strip()]
    return " ".join(expression.split()), names


def notices(package):
    """The crate's own Copyright lines, else its authors."""
    crate_dir = Path(package["manifest_path"]).parent
    lines = []
    for path in sorted(crate_dir.iterdir()):
        if not (path.is_file() and NOTICE_FILE.match(path.name)):
            continue
        for line in path.read_text(errors="replace").splitlines():
            m = NOTICE_LINE.match(line)
            if m and "[yyyy]" not in line and "notice" not in line.lower():
                text = " ".join(m.group(1).split())
                if text not in lines:
                    lines.append(text)
    if not lines:
        lines = [" ".join(a.split()) for a in package.get("authors", [])]
    return lines or [f"the {package['name']} developers"]


def indented(text):
    return "\n".join(" " + line if line.strip() else " ." for line in text.rstrip("\n").splitlines())


def main():
    root = Path(sys.argv[1]).resolve()
    target = host_target(root)
    metadata = json.loads(cargo("metadata", "--format-version", "1", "--filter-platform", target, cwd=root))
    by_id = {(p["name"], p["version"]): p for p in metadata["packages"]}
    out = [(HERE / "copyright.head").read_text().rstrip("\n")]
    used = {"MIT", "Apache-2.0"}
    for name, version in linked_crates(root, target):
        package = by_id[(name, version)]
        if not package.get("license"):
            sys.exit(f"copyright.py: crate {name} {version} declares no license")
        expression, names = dep5_license(package["license"])
        used.update(names)
        copyright_lines = "\n ".join(notices(package))
        out.append(f"Files: vendor/{name}-{version}/*\n"
                   f"Copyright: {copyright_lines}\n"
                   f"License: {expression}")
    missing = sorted(used - LICENSE_FILES.keys())
    if missing:
        sys.exit("copyright.py: no license text in packaging/deb/licenses for "
                 + ", ".join(missing) + ": add it there and to LICENSE_FILES")
    for name in sorted(used):
        text = (HERE / "licenses" / LICENSE_FILES[name]).read_text()
        out.append(f"License: {name}\n{indented(text)}")
    sys.stdout.write("\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
