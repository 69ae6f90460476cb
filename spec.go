// Package redlockd is an HTTP lock gateway implementing the Redlock algorithm.
// The root package only holds the API contract; see redlock/ for the
// algorithm, server/ for the HTTP adapter and cmd/redlockd for the binary.
package redlockd

import _ "embed"

// The Go client (client/) is a module of its own, which go generate ./...
// here does not reach: generate it too.
//
//go:generate go generate -C client ./...

// OpenAPI is openapi.yaml, the API contract that api/ is generated from. It is
// served at GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
