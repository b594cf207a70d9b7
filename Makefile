# mroce build and test entry points. `make test` is what CI runs.
GO      ?= go
PKGS    := ./...
FUZZTIME ?= 10s

.PHONY: all build install test unit large lint vet fuzz bench bench-net bench-busy bench-kernel golden wireshark results pgo clean

all: build

build:
	$(GO) build -o bin/mroce ./cmd/mroce

# bin/mroce, its man page and its bash completion under PREFIX (DESTDIR
# for staging): make install PREFIX=$$HOME/.local
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 755 bin/mroce $(DESTDIR)$(PREFIX)/bin/mroce
	bin/mroce man > $(DESTDIR)$(PREFIX)/share/man/man1/mroce.1
	bin/mroce completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/mroce

# vet and gofmt, unit tests with the race detector (-short skips the large
# scenarios), then the large scenarios without the race detector.
test: lint vet unit large

lint:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# vet for this machine and for a 32-bit one, where an int holds less.
vet:
	$(GO) vet $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS)

unit:
	$(GO) test -race -short -count=1 $(PKGS)

# The scenarios -short skips: every package's Large tests, and the whole of
# sim (the incast at N = 64, transfers at 5% and 10% loss) without -short;
# udp again without the race detector, which defeats its allocation check
# (its Large tests ran on the line before);
# engine's short tests again without it, for the long scenarios it skips
# under the detector (skipUnderRace).
# One package at a time (-p 1): the real-time tests (sockets, the kernel
# path) must not share the two cores with another package's tests.
# cmd/mroce's runs, the results tables among them, can pass go test's
# default of 10 minutes a package on a slow machine.
large:
	$(GO) test -count=1 -p 1 -timeout 30m -run 'Large' $(PKGS)
	$(GO) test -count=1 -skip Large ./sim ./udp
	$(GO) test -count=1 -short ./engine

# Every fuzz target for FUZZTIME each (make fuzz FUZZTIME=60s for a longer run).
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# One mroce connection over real UDP on loopback beside raw UDP and Go TCP,
# measured in one run (BENCH_MIB each).
BENCH_MIB ?= 256
bench-net:
	$(GO) run ./cmd/mroce bench-net --size-mib $(BENCH_MIB)

# mroce on a busy machine: BUSY_LOAD spinning processes beside BUSY_RUNS
# loopback transfers of BUSY_MIB each, then mroce conformance run under
# the same load (tools/busyhost). No root needed.
BUSY_LOAD ?= 10
BUSY_RUNS ?= 5
BUSY_MIB ?= 256
bench-busy:
	$(GO) build -o bin/mroce ./cmd/mroce
	$(GO) build -o bin/busyhost ./tools/busyhost
	bin/busyhost --mroce bin/mroce --load $(BUSY_LOAD) --runs $(BUSY_RUNS) --size-mib $(BUSY_MIB) --conformance

# mroce beside kernel TCP through a testbed of network namespaces that
# tools/kbench builds and removes (root): a sender and a receiver joined by
# a router over KBENCH_PLANES planes of KBENCH_RATE_MBIT each, at the loss
# rates (percent) of KBENCH_LOSS; each transfer moves KBENCH_SIZE_MIB and
# stops after KBENCH_MAX_SECONDS. KBENCH_FLAGS adds flags (--json, ...).
KBENCH_PLANES ?= 4
KBENCH_RATE_MBIT ?= 1000
KBENCH_LOSS ?= 0,1,5,10
KBENCH_SIZE_MIB ?= 512
KBENCH_MAX_SECONDS ?= 15
KBENCH_OFFLOADS ?= off
KBENCH_FLAGS ?=
bench-kernel:
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "make bench-kernel needs root: it makes network namespaces, veth links, tc qdiscs and nftables rules (sudo make bench-kernel)" >&2; \
	  exit 1; \
	fi
	$(GO) build -o bin/mroce ./cmd/mroce
	$(GO) build -o bin/kbench ./tools/kbench
	bin/kbench --mroce bin/mroce --planes $(KBENCH_PLANES) --rate-mbit $(KBENCH_RATE_MBIT) --loss $(KBENCH_LOSS) \
	  --size-mib $(KBENCH_SIZE_MIB) --max-seconds $(KBENCH_MAX_SECONDS) --offloads $(KBENCH_OFFLOADS) $(KBENCH_FLAGS)

# Rebuild testdata/golden.pcap from the hand-written hex packets.
golden:
	$(GO) run ./cmd/mroce golden-pcap testdata/golden testdata/golden.pcap

# Rewrite the tables and plots of docs/results.md from what their commands
# make now (a table found by its title line); make test fails while they
# differ. The prose around them is the author's to read again.
results:
	$(GO) test -count=1 -v -run TestLargeResultsDocTablesReproduce ./cmd/mroce -args -update

# Rewrite the Wireshark dissector from the spec's layout tables.
wireshark:
	$(GO) run ./cmd/mroce wireshark-lua > tools/wireshark/mroce.lua

# Remake cmd/mroce/default.pgo, the CPU profile go build optimizes mroce
# with (profile-guided optimization: hot calls inlined, interface calls on
# the event path devirtualized), from the simulator's scenarios: a 64-host
# all-reduce, 4,032 connections on 8 planes, a lossy transfer, a 16-host
# all-to-all. The profiles are taken with a build that uses no profile.
pgo:
	@d=$$(mktemp -d) && \
	$(GO) build -pgo=off -o $$d/mroce ./cmd/mroce && \
	$$d/mroce sim allreduce --hosts 64 --sizes-mib 64 --no-baseline --losses 0 --plot "" --cpuprofile $$d/1.prof >/dev/null && \
	$$d/mroce sim planes --planes 8 --hosts 64 --size-kib 512 --plot "" --cpuprofile $$d/2.prof >/dev/null && \
	$$d/mroce sim loss --losses 0.01,0.1 --size-mib 32 --plot "" --cpuprofile $$d/3.prof >/dev/null && \
	$$d/mroce sim alltoall --hosts 16 --sizes-mib 16 --no-baseline --plot "" --cpuprofile $$d/4.prof >/dev/null && \
	$(GO) tool pprof -proto $$d/1.prof $$d/2.prof $$d/3.prof $$d/4.prof > cmd/mroce/default.pgo && \
	rm -rf $$d

clean:
	rm -rf bin
