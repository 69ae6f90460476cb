package proxytest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redistest"
)

// TestServer proves the harness: the proxies reach their upstreams and
// carry toxics, a server never takes another's port for its own, and Stop
// ends the process by PID.
func TestServer(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "toxiproxy-server")
	if err := Build(ctx, "", bin); err != nil {
		t.Fatal(err)
	}
	nodes := redistest.Cluster(t, 2)
	s, err := Launch(bin, t.TempDir(), []string{nodes[0].Addr(), nodes[1].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	// Each proxy reaches its own upstream.
	for i, p := range s.Proxies {
		c := redis.NewClient(&redis.Options{Addr: p.Listen, MaxRetries: -1})
		defer c.Close()
		info, err := c.InfoMap(ctx, "server").Result()
		if err != nil {
			t.Fatalf("through proxy %d: %v", i, err)
		}
		if got, want := info["Server"]["tcp_port"], strings.TrimPrefix(nodes[i].Addr(), "127.0.0.1:"); got != want {
			t.Errorf("proxy %d reaches port %s, want %s", i, got, want)
		}
	}

	// A toxic acts on the proxy it is added to.
	slow := s.Proxies[1]
	if _, err := slow.AddToxic("", "latency", "downstream", 1, toxiproxy.Attributes{"latency": 300}); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: slow.Listen, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING through a proxy 300ms late answered within 100ms")
	}

	// A server whose port another server holds lists none of its proxies
	// there: it is refused, and gone.
	config := []toxiproxy.Proxy{{Name: "another-0", Listen: "127.0.0.1:0", Upstream: nodes[0].Addr(), Enabled: true}}
	file := filepath.Join(t.TempDir(), "another.json")
	b, _ := json.Marshal(config)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(s.API)
	taken, _ := strconv.Atoi(port)
	if other, err := spawn(bin, file, config, taken); err == nil {
		other.Stop()
		t.Fatal("a server was started on the port of another")
	} else if !strings.Contains(err.Error(), "another toxiproxy-server's port") {
		t.Errorf("spawn on a taken port: %v", err)
	}

	pid := s.PID()
	s.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Stop (kill -0: %v)", pid, err)
	}
}
