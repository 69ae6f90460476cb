package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Version returns the version of this binary: the -ldflags version if set,
// else the module version (go install ...@v1.2.3), else "dev" with the VCS
// revision from the build info when the build recorded it.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	return versionFrom(version, bi, ok)
}

func versionFrom(v string, bi *debug.BuildInfo, ok bool) string {
	if v != "dev" || !ok {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		return mv
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return v + "+" + rev
}

// runVersion prints "redlockd VERSION (GOVERSION)".
func runVersion(w io.Writer) {
	goVersion := "unknown Go"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	fmt.Fprintf(w, "redlockd %s (%s)\n", Version(), goVersion)
}
