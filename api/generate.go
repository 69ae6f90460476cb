package api

// The code in api.gen.go is generated from ../openapi.yaml (models, a chi
// router and the strict server interface, see cfg.yaml). Never edit it by
// hand: change openapi.yaml and run go generate ./api.

//go:generate go tool oapi-codegen -config cfg.yaml ../openapi.yaml
