package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandsAlone: the client is a module of its own whose packages link the
// standard library and what the generated code needs only: neither the
// gateway's packages (redlock, server, ...) nor go-redis nor zerolog, and its
// module graph — what `go get` of it adds to a program's — is small.
func TestStandsAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := []string{"github.com/redlockd/redlockd/client", "github.com/oapi-codegen/runtime", "github.com/apapsch/go-jsonmerge/v2", "github.com/google/uuid"}
	for dep := range strings.FieldsSeq(string(out)) {
		ok := false
		for _, a := range allowed {
			ok = ok || dep == a || strings.HasPrefix(dep, a+"/")
		}
		if !ok {
			t.Errorf("package client depends on %s", dep)
		}
	}
	out, err = exec.Command("go", "list", "-m", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	for m := range strings.Lines(string(out)) {
		if path, _, _ := strings.Cut(strings.TrimSpace(m), " "); path == "github.com/redlockd/redlockd" ||
			strings.HasPrefix(path, "github.com/redis/") || strings.HasPrefix(path, "github.com/rs/zerolog") {
			t.Errorf("the client's module graph holds %s", path)
		}
	}
	if n := strings.Count(string(out), "\n"); n > 20 {
		t.Errorf("the client's module graph holds %d modules, want a small one:\n%s", n, out)
	}
}
