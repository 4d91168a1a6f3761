# Developer entry points. The two commands README.md gives need nothing but
# Go: `go run ./cmd/dkv serve` and `go test -race ./...`.

GO ?= go

.PHONY: build image test lint generate check-generated compare chaos bench

# The version `dkv version` reports is the server's (server.Version, what
# `dkv status` shows) with the commit Go stamps into the build; a release
# sets it with VERSION=v1.2.3.
# COMMIT is stamped in too: Go's own VCS stamp is off where GOFLAGS has
# -buildvcs=false.
VERSION ?=
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X github.com/dkv-io/dkv/internal/cli.version=$(VERSION)) $(if $(COMMIT),-X github.com/dkv-io/dkv/internal/cli.commit=$(COMMIT))

# A static binary (no cgo, so no libc to find at run time): the Dockerfile
# copies bin/dkv into a FROM scratch image, where a dynamically linked one
# fails with "exec /dkv: no such file or directory".
BIN ?= bin/dkv
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dkv

# The FROM scratch image dkv:dev that deploy/docker-compose.yml runs.
IMAGE ?= dkv:dev
image: build
	docker build -f Dockerfile -t $(IMAGE) bin/

test:
	$(GO) test -race -timeout 30m ./...

# go vet, gofmt and staticcheck (which also finds unused code) over the
# main module; any finding fails. staticcheck runs at a pinned version
# from the module proxy, so it is not a dependency of the module.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) run $(STATICCHECK) ./...

# Regenerate api/dkv/v1 and the peer transport from the .proto files
# (needs protoc: apt-get install protobuf-compiler).
generate:
	./scripts/generate.sh

# Fails if regenerating changes or adds a file: the committed code is what
# the committed .proto files and the pinned plugins produce.
GENERATED := api internal/transport
check-generated: generate
	@test -z "$$(git status --porcelain --untracked-files=all -- $(GENERATED))" || (echo "make generate changed generated code; commit the result:"; git status --porcelain --untracked-files=all -- $(GENERATED); git diff --stat -- $(GENERATED); exit 1)

# Randomized fault schedule (docs/reliability.md): DURATION is split
# between a 3-node in-process cluster and 3 `dkv serve` processes behind
# fault proxies. The seed is printed; SEED=... replays the schedule.
# Fails on any anomaly; evidence goes to ./artifacts ($DKV_ARTIFACTS).
# CHAOSFLAGS=-chaos.watch-proxy puts the process phase's watchers behind a
# `dkv proxy` process that the nemesis also kills (kill9-proxy).
SEED ?= 0
DURATION ?= 60s
chaos:
	DKV_ARTIFACTS=$${DKV_ARTIFACTS:-$(CURDIR)/artifacts} $(GO) test -count=1 -v -timeout 0 -run '^TestChaos$$' ./tests/chaos \
		-args -chaos.seed=$(SEED) -chaos.duration=$(DURATION) $(CHAOSFLAGS)

# Side-by-side comparison with etcd (installs Debian's etcd-server if
# missing). NODES=1|3, DURATION per workload, ZK=1 adds ZooKeeper as a
# third column (opt-in, slower); CURVES=1 (or a list) adds the scaling
# curves' plots under docs/bench; see bench/compare/README.md.
compare:
	$(MAKE) -C bench compare
