package tests

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestClientJS: the JavaScript client's own tests (clients/js/test, Node's
// built-in runner; no npm install, as the package has no runtime dependency)
// pass against two live gateways over 3 redis-servers, one without API keys
// (REDLOCKD_URL) and one with (REDLOCKD_TESTS_AUTH_URL, REDLOCKD_API_KEY)
// (docs/clients.md "JavaScript/TypeScript: `clients/js`").
func TestClientJS(t *testing.T) {
	t.Parallel()
	slow(t)
	node := needTool(t, "node")
	_, g, authed, key := clientGateways(t, "js")
	dir, err := filepath.Abs(filepath.Join("..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no clients/js/test/*.test.js (%v)", err)
	}
	cmd := exec.Command(node, append([]string{"--test", "--test-reporter=tap"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "REDLOCKD_URL="+g.URL, "REDLOCKD_TESTS_AUTH_URL="+authed.URL, "REDLOCKD_API_KEY="+key.Key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	pass := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindSubmatch(out)
	if pass == nil || string(pass[1]) == "0" {
		t.Fatalf("node --test ran no test:\n%s", out)
	}
	t.Logf("clients/js: %s tests passed", pass[1])
}

// clientGateways starts what the tests of a client package run against: 3
// redis-servers, a gateway without API keys and one with an API keys file
// holding key (named and in the namespace name).
func clientGateways(t *testing.T, name string) (nodes []*RedisNode, g, authed *Gateway, key apiKey) {
	t.Helper()
	nodes = startCluster(t, 3)
	g = startGateway(t, nodes)
	key = keygen(t, name, name)
	return nodes, g, startGateway(t, nodes, "--api-keys-file", keysFile(t, key)), key
}
