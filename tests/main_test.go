// Package tests holds black-box tests of redlockd: they build the binary, run
// it against real redis-server processes, inject faults (kill, pause, restart
// a node) and speak to it over HTTP only. Of the project's packages they use
// only test helpers (internal/) and, as the load tests' baseline, the
// redlock library.
package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redistest"
)

var (
	// binDir holds the binaries the tests build (removed by TestMain).
	binDir string
	// binPath is the redlockd binary built by TestMain.
	binPath string
	// buildErr is set when the binary did not build; tests that need it fail
	// with it.
	buildErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	redis.SetLogger(quietLogger{}) // dial errors to killed nodes are expected
	if _, err := exec.LookPath(redistest.Binary()); err != nil {
		fmt.Fprintln(os.Stderr, "tests: redis-server not found in PATH:", err)
		return 1
	}

	var err error
	if binDir, err = os.MkdirTemp("", "redlockd-tests-"); err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	defer os.RemoveAll(binDir)

	binPath = filepath.Join(binDir, "redlockd")
	buildErr = build(binPath)
	code := m.Run()
	report, ok := contractReport()
	if !ok || testing.Verbose() {
		fmt.Fprint(os.Stderr, report)
	}
	if !ok && code == 0 {
		fmt.Fprintln(os.Stderr, "FAIL: responses or requests that do not conform to openapi.yaml (above)")
		code = 1
	}
	return code
}

// build compiles ./cmd/redlockd of the module that contains this package,
// as the Dockerfile does (no cgo, paths trimmed): the binary under test is
// the one the image ships, and TestDockerBuildVersion's builds of a clone
// find every package compiled in the build cache and only link.
func build(out string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("module root not found at %s: %w", root, err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/redlockd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/redlockd: %w\n%s", err, b)
	}
	return nil
}

// quietLogger silences go-redis's internal logging.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
