#!/usr/bin/env bash
# Regenerates api/dkv/v1 (Go code and the gateway's OpenAPI document) from
# the .proto files. Needs protoc (Debian: protobuf-compiler) and installs
# the plugins at pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOBIN="${GOBIN:-$(go env GOPATH)/bin}"
export PATH="$GOBIN:$PATH"
command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.33.0
go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@v2.33.0
# Generate from the roots so the files register as "dkv/v1/kv.proto" and
# "dkv/peer/v1/peer.proto": protobuf's registry is global, and a bare
# "kv.proto" collides with other projects' files (etcd's, for one) in any
# program that links both.
protoc -I api \
  --go_out=api --go_opt=paths=source_relative \
  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
  api/dkv/v1/*.proto
# The HTTP gateway goes into a package of its own (api/dkv/v1/dkvgw), so
# the messages, and everything that links them (the state machine, the
# client), link neither net/http's gateway runtime nor grpc-gateway.
# "standalone" makes the generated code import the messages' package;
# the package clause is renamed from the messages' name to dkvgw.
rm -f api/dkv/v1/dkvgw/*.pb.gw.go
protoc -I api \
  --grpc-gateway_out=api/dkv/v1/dkvgw \
  --grpc-gateway_opt=module=github.com/dkv-io/dkv/api/dkv/v1 \
  --grpc-gateway_opt=standalone=true \
  --grpc-gateway_opt=grpc_api_configuration=api/dkv/v1/gateway.yaml \
  api/dkv/v1/*.proto
sed -i 's/^package dkvpb$/package dkvgw/' api/dkv/v1/dkvgw/*.pb.gw.go
# The gateway's reference: one OpenAPI 2.0 document for every service,
# with the paths of gateway.yaml, served at /v1/openapi.json
# (api/dkv/v1/openapi). Field names are the .proto names, as the
# gateway's marshaler writes them (UseProtoNames in server/httpapi).
rm -f api/dkv/v1/openapi/*.swagger.json
protoc -I api \
  --openapiv2_out=api/dkv/v1/openapi \
  --openapiv2_opt=allow_merge=true,merge_file_name=dkv \
  --openapiv2_opt=json_names_for_fields=false \
  --openapiv2_opt=grpc_api_configuration=api/dkv/v1/gateway.yaml \
  --openapiv2_opt=openapi_configuration=api/dkv/v1/openapi/options.yaml \
  api/dkv/v1/*.proto
protoc -I internal/transport \
  --go_out=internal/transport --go_opt=paths=source_relative \
  --go-grpc_out=internal/transport --go-grpc_opt=paths=source_relative \
  internal/transport/transportpb/peer.proto
