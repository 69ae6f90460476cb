package tests

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestClientPython: the Python client's unittest suite (clients/python/tests)
// passes, none skipped, against two live gateways over three real
// redis-servers, one without API keys and one with an API keys file
// (docs/clients.md "Python: `clients/python`").
func TestClientPython(t *testing.T) {
	t.Parallel()
	slow(t)
	python := needTool(t, "python3")
	nodes, g, authed, key := clientGateways(t, "python")

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "clients/python/tests", "-v")
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), "PYTHONPATH="+filepath.Join(root, "clients/python/src"), "PYTHONDONTWRITEBYTECODE=1",
		"REDLOCKD_URL="+g.URL, "REDLOCKD_TESTS_AUTH_URL="+authed.URL, "REDLOCKD_API_KEY="+key.Key, "REDLOCKD_REDIS="+redisURLs(nodes))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	// Every test ran: none skipped for a missing gateway.
	if m := regexp.MustCompile(`(?m)^Ran (\d+) tests?`).FindSubmatch(out); m == nil || strings.Contains(string(out), "skipped") {
		t.Fatalf("python3 -m unittest: no test count or tests skipped:\n%s", out)
	} else {
		t.Logf("python3 -m unittest: ran %s tests", m[1])
	}
}
