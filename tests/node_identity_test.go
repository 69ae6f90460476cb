package tests

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Node identity (docs/safety.md "Guarantees and limits, in plain words",
// One server, one vote): a node is its Redis server's run_id, not its URL.
// Two URLs of one server would cast two votes, so serve refuses them at
// start (exit 64), and a node that could not be reached at start and then
// turns out to be another node's server never votes.

// TestNodeIdentitySameServerTwiceRefusesToStart: two URLs of one server
// (127.0.0.1 and localhost of one port, or databases /0 and /1) are one
// node, so serve refuses them: it exits 64 and says so (docs/safety.md
// "Guarantees and limits, in plain words", One server, one vote).
func TestNodeIdentitySameServerTwiceRefusesToStart(t *testing.T) {
	t.Parallel()
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	nodes := startCluster(t, 2)
	a, b := nodes[0], nodes[1]
	port := strings.TrimPrefix(a.Addr, "127.0.0.1:")
	for name, urls := range map[string]string{
		"TwoHostNames": "redis://127.0.0.1:" + port + ",redis://localhost:" + port + ",redis://" + b.Addr,
		"TwoDatabases": "redis://" + a.Addr + "/0,redis://" + a.Addr + "/1,redis://" + b.Addr,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, "serve", "--listen", "127.0.0.1:0", "--redis", urls)
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 64 {
				t.Fatalf("redlockd serve --redis %s: %v, want exit 64\n%s", urls, err, out)
			}
			// Two databases of one host:port are caught before any is dialled.
			if o := string(out); !strings.Contains(o, "reach one Redis server") && !strings.Contains(o, "is already URL") || strings.Contains(o, `"listening"`) {
				t.Errorf("serve with one server named twice: output does not say so, or it listened:\n%s", out)
			}
		})
	}
}

// TestNodeIdentityAliasFoundLaterNeverVotes: a node unreachable at start
// that turns out, once it answers, to reach another node's server never
// votes: /readyz shows it down with the reason, and the log says so
// (docs/safety.md "Guarantees and limits, in plain words", One server, one
// vote). Here the fourth URL reaches node 0's server through a proxy that
// refuses connections while the gateway starts; with node 1 down the other
// two servers are no quorum of 4, although three URLs answer.
func TestNodeIdentityAliasFoundLaterNeverVotes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	proxy := startProxies(t, nodes[:1])[0]
	proxy.Cut()
	gw := startGatewayAt(t, []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr, proxy.Addr()},
		"--node-timeout", nodeTimeout.String())
	gw.waitReady(t) // three of four vote
	if !strings.Contains(gw.Stderr(), "not reached at start") {
		t.Errorf("the node unreachable at start is not logged:\n%s", tail(gw.Stderr(), 20))
	}

	proxy.Restore()
	eventually(t, 10*time.Second, "the proxied node found to be node 0's server", func() bool {
		r := gw.do(t, http.MethodGet, "/readyz", "")
		m := readyNode(t, r, proxy.Addr())
		e, _ := m["err"].(string)
		return m["up"] == false && strings.Contains(e, "same Redis server as node 0")
	})
	waitLogPrefix(t, gw, "redlock: two nodes reach one Redis server") // the log may come after /readyz

	nodes[1].Kill()
	for range 3 { // the first attempts may meet node 1's dead connection
		r := acquire(t, gw, resourceName(t), "")
		wantProblem(t, r, http.StatusServiceUnavailable, "quorum-unavailable")
		if d := r.str(t, "detail"); !strings.Contains(d, "the same server as another node (never voting)") && !strings.Contains(d, "could not be reached") {
			t.Errorf("detail %q does not say why", d)
		}
	}
	r := gw.do(t, http.MethodGet, "/readyz", "")
	wantStatus(t, r, http.StatusServiceUnavailable)
}
