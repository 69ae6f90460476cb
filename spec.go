// Package redlockd is an HTTP lock gateway implementing the Redlock algorithm.
// The root package only holds the API contract; see redlock/ for the
// algorithm, server/ for the HTTP adapter and cmd/redlockd for the binary.
package redlockd

import _ "embed"

// OpenAPI is openapi.yaml, the API contract that api/ is generated from. It is
// served at GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
