package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandsAlone: a program that uses the client links neither package
// redlock nor go-redis nor zerolog (nor anything below them).
func TestStandsAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	banned := []string{"github.com/redlockd/redlockd/redlock", "github.com/redis/go-redis", "github.com/rs/zerolog"}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("package client depends on %s", dep)
			}
		}
	}
}
