package redistest

import (
	"os"
	"testing"
)

// Slow skips t in a developer's quick run, go test -short: a test of many
// seconds (a soak, a client package's own suite, a build, a long fault
// schedule). The README's command, bash scripts/test.sh, never passes
// -short, and under CI (CI set) -short fails the test instead of skipping
// it: CI always runs every test.
func Slow(t testing.TB) {
	t.Helper()
	switch {
	case !testing.Short():
	case os.Getenv("CI") != "":
		t.Fatal("slow test under -short in CI: CI runs every test (bash scripts/test.sh passes no -short)")
	default:
		t.Skip("slow: skipped under -short; bash scripts/test.sh runs it")
	}
}
