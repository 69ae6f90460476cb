package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Version returns the -ldflags version if set, else the one the go command
// stamped into the build (a tag, or a pseudo-version with +dirty), else "dev".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	return versionFrom(version, bi, ok)
}

func versionFrom(v string, bi *debug.BuildInfo, ok bool) string {
	if v != "dev" || !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return v
	}
	return bi.Main.Version
}

// runVersion prints "redlockd VERSION (GOVERSION)".
func runVersion(w io.Writer) {
	fmt.Fprintf(w, "redlockd %s (%s)\n", Version(), runtime.Version())
}
