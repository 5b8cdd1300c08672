# Build and install the CRIU plugin and the amdgpu-criu tool.
#
#   make                                  release build (plugin .so + CLI)
#   sudo make install PREFIX=/usr         plugin in /usr/lib/criu, CRIU's default plugin dir
#   make install DESTDIR=/tmp/pkg PREFIX=/usr   staged install (packaging)
#   sudo make uninstall PREFIX=/usr       removes exactly what install wrote
#   make deb                              Debian package in target/debian
#   make sim                              also what `amdgpu-criu sim` runs programs with
#   make criu [CRIU_SRC=DIR|ARCHIVE] [CRIU_REF=v4.2]   a CRIU for `amdgpu-criu sim`
#
# PREFIX defaults to /usr/local. CRIU looks for plugins in /usr/lib/criu
# (its compile-time default) unless given --libdir DIR or CRIU_LIBS_DIR=DIR;
# with the default PREFIX the plugin lands in /usr/local/lib/criu and CRIU
# must be pointed there (criu dump --libdir /usr/local/lib/criu ...).
#
# `install` never builds: it installs what `make` built, so it can run as
# root without running cargo. PROFILE (default release), BUILD_DIR (the
# CLI's, default $(CARGO_TARGET_DIR)/$(PROFILE)) and PLUGIN_BUILD_DIR (the
# plugin's, default BUILD_DIR) select the artifacts; the workspace test
# installs the debug artifacts of `cargo test` this way.
#
# Installed binaries are stripped (objcopy --strip-unneeded, and the
# compilers' .comment; the release build keeps line tables, `debug = 1`,
# which would make the .so ten times its size). STRIP=0 installs them as
# built; DEBUG_SYMBOLS=1 also installs
# their debug information as separate files under $(PREFIX)/lib/debug
# (objcopy --only-keep-debug, linked with --add-gnu-debuglink), where gdb
# finds them for PREFIX=/usr.
#
# Every installed file and every directory install had to create is listed
# in $(PREFIX)/share/amdgpu-criu/install-manifest (written as files are
# installed, so a failed install can be undone too); `uninstall` removes
# those files, then those directories if they are empty, never a directory
# that existed before. Installing over an existing manifest is refused:
# uninstall first. Paths must not contain white space.
#
# Install never destroys a file it did not write: if any file it would
# install is already there (the distribution's C amdgpu_plugin.so, for one),
# it refuses and names it. With FORCE=1 it keeps each such file as FILE.orig
# (recorded as "o PATH" in the manifest) and uninstall puts it back.
#
# `deb` never builds either: it stages what `make` built with `install`
# (PREFIX=/usr, stripped; zsh completion in Debian's vendor-completions)
# and packages it with packaging/deb/build.sh as
# $(DEB_DIR)/amdgpu-criu_VERSION-$(DEB_REVISION)_ARCH.deb, VERSION the
# CLI's. Needs dpkg-dev and python3; Maintainer is "$DEBFULLNAME
# <$DEBEMAIL>" (else git's user.name and user.email). The package diverts
# another package's /usr/lib/criu/amdgpu_plugin.so (the distribution's C
# plugin) while it is installed: see packaging/deb/preinst.

PREFIX ?= /usr/local
DESTDIR ?=
PROFILE ?= release
CARGO ?= cargo
CARGO_TARGET_DIR ?= target
STRIP ?= 1
DEBUG_SYMBOLS ?= 0
OBJCOPY ?= objcopy
BUILD_DIR ?= $(CARGO_TARGET_DIR)/$(PROFILE)
DEB_DIR ?= $(CARGO_TARGET_DIR)/debian
DEB_REVISION ?= 1

# The plugin crate depends on neither the simulator nor the CRIU host
# emulator, so the .so of any workspace build is the one to ship.
PLUGIN_BUILD_DIR ?= $(BUILD_DIR)
PLUGIN_SO := $(PLUGIN_BUILD_DIR)/libcriu_plugin_amdgpu.so
CLI_BIN := $(BUILD_DIR)/amdgpu-criu
MAN_PAGES := docs/man/criu-amdgpu-plugin.1 docs/man/amdgpu-criu.1
MAN_PAGES_FA := docs/man/fa/criu-amdgpu-plugin.1
FORCE ?=

PLUGIN_DIR := $(PREFIX)/lib/criu
BIN_DIR := $(PREFIX)/bin
MAN1_DIR := $(PREFIX)/share/man/man1
MAN1_FA_DIR := $(PREFIX)/share/man/fa/man1
BASH_DIR := $(PREFIX)/share/bash-completion/completions
ZSH_DIR := $(PREFIX)/share/zsh/site-functions
FISH_DIR := $(PREFIX)/share/fish/vendor_completions.d
DATA_DIR := $(PREFIX)/share/amdgpu-criu
DEBUG_DIR := $(PREFIX)/lib/debug
MANIFEST := $(DATA_DIR)/install-manifest
INSTALLED := $(PLUGIN_DIR)/amdgpu_plugin.so $(BIN_DIR)/amdgpu-criu \
	$(addprefix $(MAN1_DIR)/,$(notdir $(MAN_PAGES))) \
	$(addprefix $(MAN1_FA_DIR)/,$(notdir $(MAN_PAGES_FA))) \
	$(BASH_DIR)/amdgpu-criu $(ZSH_DIR)/_amdgpu-criu $(FISH_DIR)/amdgpu-criu.fish

ifeq ($(PROFILE),release)
CARGO_PROFILE_FLAG := --release
else ifeq ($(PROFILE),debug)
CARGO_PROFILE_FLAG :=
else
CARGO_PROFILE_FLAG := --profile $(PROFILE)
endif

.PHONY: all build test install uninstall deb sim criu

all: build

build:
	$(CARGO) build $(CARGO_PROFILE_FLAG) -p amdgpu-criu -p criu-plugin-amdgpu

test:
	$(CARGO) test --workspace

# `amdgpu-criu sim` finds its companions next to itself: the interposer
# (libkfd_sim_preload.so) and the CRIU plugin that carries a program's
# connection to its simulated machine (libkfd_sim_remote_plugin.so), beside
# the tool and this project's plugin. Test support: `install` leaves them out.
sim:
	$(CARGO) build $(CARGO_PROFILE_FLAG) -p amdgpu-criu -p criu-plugin-amdgpu \
		-p kfd-sim-preload -p kfd-sim-remote-plugin

# A CRIU binary in $$CRIU_BUILDS/NAME/criu (default ~/.cache/criu-builds),
# where `amdgpu-criu sim` looks after `criu` on PATH: from CRIU's git
# (CRIU_REF, default criu-dev) or a source tree or archive (CRIU_SRC). See
# packaging/criu/build.sh.
criu:
	CRIU_SRC="$(CRIU_SRC)" CRIU_REF="$(CRIU_REF)" bash packaging/criu/build.sh

# mkd DIR: create DIR under DESTDIR one component at a time, recording each
# component created (as "d PATH") in the manifest being written.
# put MODE SRC DEST: install one file, recording it (as "f PATH"); a file
# already at DEST (allowed by FORCE=1 only) is first kept as DEST.orig and
# recorded (as "o PATH").
define INSTALL_FUNCS
set -e; \
man=$$(mktemp); tmpman=$$man; trap 'rm -f "$$tmpman"' EXIT; \
mkd() { \
	p=""; \
	for c in $$(echo "$$1" | tr / ' '); do \
		p="$$p/$$c"; \
		if [ ! -d "$(DESTDIR)$$p" ]; then \
			mkdir "$(DESTDIR)$$p"; echo "d $$p" >> "$$man"; \
		fi; \
	done; \
}; \
put() { \
	if [ -e "$(DESTDIR)$$3" ]; then \
		mv "$(DESTDIR)$$3" "$(DESTDIR)$$3.orig"; echo "o $$3" >> "$$man"; \
		echo "kept $$3 as $$3.orig"; \
	fi; \
	install -m "$$1" "$$2" "$(DESTDIR)$$3"; echo "f $$3" >> "$$man"; \
}; \
putbin() { \
	if [ "$(STRIP)" = 0 ]; then put "$$1" "$$2" "$$3"; return; fi; \
	b="$$tmp/$${3##*/}"; \
	$(OBJCOPY) --strip-unneeded --remove-section=.comment "$$2" "$$b"; \
	if [ "$(DEBUG_SYMBOLS)" = 1 ]; then \
		$(OBJCOPY) --only-keep-debug "$$2" "$$b.debug"; \
		$(OBJCOPY) --add-gnu-debuglink="$$b.debug" "$$b"; \
		mkd "$(DEBUG_DIR)$${3%/*}"; \
		put 0644 "$$b.debug" "$(DEBUG_DIR)$$3.debug"; \
	fi; \
	put "$$1" "$$b" "$$3"; \
}
endef

install:
	@for f in "$(PLUGIN_SO)" "$(CLI_BIN)"; do \
		if [ ! -f "$$f" ]; then \
			echo "make install: $$f is missing; run 'make' first (or set PROFILE, BUILD_DIR, PLUGIN_BUILD_DIR)" >&2; \
			exit 1; \
		fi; \
	done
	@if [ -f "$(DESTDIR)$(MANIFEST)" ]; then \
		echo "make install: $(DESTDIR)$(MANIFEST) exists; run 'make uninstall' first" >&2; \
		exit 1; \
	fi
	@case "$(PREFIX)" in /*) ;; *) echo "make install: PREFIX must be absolute" >&2; exit 1;; esac
	@if [ "$(STRIP)" != 0 ] && ! $(OBJCOPY) --version >/dev/null 2>&1; then \
		echo "make install: $(OBJCOPY) (binutils) is needed to strip the binaries; install it or set STRIP=0" >&2; \
		exit 1; \
	fi
	@for f in $(INSTALLED); do \
		if [ -e "$(DESTDIR)$$f.orig" ] && [ -e "$(DESTDIR)$$f" ]; then \
			echo "make install: $(DESTDIR)$$f and $(DESTDIR)$$f.orig both exist; move one away first" >&2; \
			exit 1; \
		fi; \
		if [ -e "$(DESTDIR)$$f" ] && [ "$(FORCE)" != 1 ]; then \
			echo "make install: $(DESTDIR)$$f exists and was not installed by this Makefile" \
				"(another package's file?); refusing to overwrite it. Remove it, or run with" \
				"FORCE=1 to keep it as $$f.orig and put it back on 'make uninstall'" >&2; \
			exit 1; \
		fi; \
	done
	@$(INSTALL_FUNCS); \
	tmp=$$(mktemp -d); trap 'rm -f "$$tmpman"; rm -rf "$$tmp"' EXIT; \
	if [ -n "$(DESTDIR)" ]; then mkdir -p "$(DESTDIR)"; fi; \
	for d in "$(PLUGIN_DIR)" "$(BIN_DIR)" "$(MAN1_DIR)" "$(MAN1_FA_DIR)" "$(BASH_DIR)" \
		"$(ZSH_DIR)" "$(FISH_DIR)" "$(DATA_DIR)"; do mkd "$$d"; done; \
	cat "$$man" > "$(DESTDIR)$(MANIFEST)"; man="$(DESTDIR)$(MANIFEST)"; \
	echo "f $(MANIFEST)" >> "$$man"; \
	putbin 0644 "$(PLUGIN_SO)" "$(PLUGIN_DIR)/amdgpu_plugin.so"; \
	putbin 0755 "$(CLI_BIN)" "$(BIN_DIR)/amdgpu-criu"; \
	for m in $(MAN_PAGES); do put 0644 "$$m" "$(MAN1_DIR)/$${m##*/}"; done; \
	for m in $(MAN_PAGES_FA); do put 0644 "$$m" "$(MAN1_FA_DIR)/$${m##*/}"; done; \
	"$(CLI_BIN)" completions bash > "$$tmp/amdgpu-criu"; \
	"$(CLI_BIN)" completions zsh > "$$tmp/_amdgpu-criu"; \
	"$(CLI_BIN)" completions fish > "$$tmp/amdgpu-criu.fish"; \
	put 0644 "$$tmp/amdgpu-criu" "$(BASH_DIR)/amdgpu-criu"; \
	put 0644 "$$tmp/_amdgpu-criu" "$(ZSH_DIR)/_amdgpu-criu"; \
	put 0644 "$$tmp/amdgpu-criu.fish" "$(FISH_DIR)/amdgpu-criu.fish"; \
	chmod 0644 "$$man"; \
	sed -n 's/^f /installed /p' "$$man"

uninstall:
	@if [ ! -f "$(DESTDIR)$(MANIFEST)" ]; then \
		echo "make uninstall: no $(DESTDIR)$(MANIFEST); nothing was installed with PREFIX=$(PREFIX)" >&2; \
		exit 1; \
	fi
	@set -e; \
	sed -n 's/^f //p' "$(DESTDIR)$(MANIFEST)" | while IFS= read -r f; do \
		case "$$f" in "$(MANIFEST)") continue;; esac; \
		rm -f "$(DESTDIR)$$f"; echo "removed $$f"; \
	done; \
	sed -n 's/^o //p' "$(DESTDIR)$(MANIFEST)" | while IFS= read -r f; do \
		mv "$(DESTDIR)$$f.orig" "$(DESTDIR)$$f"; echo "put back $$f"; \
	done; \
	dirs=$$(sed -n 's/^d //p' "$(DESTDIR)$(MANIFEST)" | sort -r); \
	rm -f "$(DESTDIR)$(MANIFEST)"; \
	for d in $$dirs; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done

deb:
	@stage=$$(mktemp -d); trap 'rm -rf "$$stage"' EXIT; \
	$(MAKE) -s --no-print-directory install DESTDIR="$$stage" PREFIX=/usr \
		ZSH_DIR=/usr/share/zsh/vendor-completions STRIP=1 DEBUG_SYMBOLS=0 FORCE= >/dev/null && \
	CARGO="$(CARGO)" bash packaging/deb/build.sh "$$stage" "$(DEB_DIR)" "$(DEB_REVISION)"
