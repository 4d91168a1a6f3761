# Developer entry points. The two commands README.md gives need nothing but
# Go: `go run ./cmd/dkv serve` and `go test -race ./...`.

GO ?= go

.PHONY: build test lint generate compare chaos bench

build:
	$(GO) build -o bin/dkv ./cmd/dkv

test:
	$(GO) test -race -timeout 30m ./...

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

# Regenerate api/dkv/v1 and the peer transport from the .proto files
# (needs protoc: apt-get install protobuf-compiler).
generate:
	./scripts/generate.sh
