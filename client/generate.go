package client

// The code in client.gen.go is generated from ../openapi.yaml (models and an
// HTTP client, see cfg.yaml). Never edit it by hand: change openapi.yaml and
// run go generate ./client. The typed API around it is in client.go.

//go:generate go tool oapi-codegen -config cfg.yaml ../openapi.yaml
