// Package openapi holds the reference of DKV's HTTP/JSON gateway: one
// OpenAPI 2.0 (Swagger) document for every service, generated from the
// .proto files and the HTTP rules of gateway.yaml by scripts/generate.sh
// (protoc-gen-openapiv2, options in options.yaml), committed, and served
// by every node at GET /v1/openapi.json (server/httpapi). docs/http.md is
// its guide.
//
// Field names are the .proto names, as the gateway writes them; a test
// (server/httpapi) fails when a rule in gateway.yaml has no path here.
package openapi

import _ "embed"

// JSON is the document, dkv.swagger.json. It is a string so that no
// caller can change what every other caller serves.
//
//go:embed dkv.swagger.json
var JSON string
