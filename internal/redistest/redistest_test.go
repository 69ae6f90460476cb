package redistest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestHarness proves the helpers: five servers start at once on distinct
// ports, and Kill/Pause/Resume/Restart act on the right PID.
func TestHarness(t *testing.T) {
	ctx := context.Background()
	servers := Cluster(t, 5)
	seen := map[int]bool{}
	for i, s := range servers {
		if err := s.Client().Ping(ctx).Err(); err != nil {
			t.Fatalf("server %d PING: %v", i, err)
		}
		if seen[s.Port] {
			t.Fatalf("port %d used twice", s.Port)
		}
		seen[s.Port] = true
	}

	// Kill acts on this server only, by PID.
	victim, other := servers[0], servers[1]
	pid := victim.PID()
	victim.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Kill (kill -0: %v)", pid, err)
	}
	if victim.PID() != 0 {
		t.Fatal("a killed server says it runs")
	}
	dead := redis.NewClient(&redis.Options{Addr: victim.Addr(), MaxRetries: -1})
	defer dead.Close()
	if err := dead.Ping(ctx).Err(); err == nil {
		t.Fatal("killed server still answers PING")
	}
	if err := other.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("other server stopped answering after Kill: %v", err)
	}

	// Restart: same port, empty memory.
	s := servers[2]
	if err := s.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	oldPID := s.PID()
	s.Restart()
	if s.PID() == oldPID {
		t.Fatal("Restart kept the PID")
	}
	if got, err := s.Client().DBSize(ctx).Result(); err != nil || got != 0 {
		t.Fatalf("after Restart: DBSIZE = %d, %v; want 0, nil", got, err)
	}
	victim.Restart()
	if err := victim.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("killed server restarted: PING: %v", err)
	}

	// Pause: no answer within a short timeout; Resume: answers again.
	p := servers[3]
	p.Pause()
	short := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer short.Close()
	if err := short.Ping(ctx).Err(); err == nil {
		t.Fatal("paused server answered PING")
	}
	p.Resume()
	if err := p.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("resumed server: PING: %v", err)
	}

	// A server left paused is still cleaned up (killed).
	servers[4].Pause()
}

// TestPassword: a server with requirepass refuses clients without it, and
// its Options, URL and Client carry it.
func TestPassword(t *testing.T) {
	ctx := context.Background()
	for _, c := range []Config{{Password: "pw-1"}, {User: "alice", Password: "pw-2"}} {
		s := StartWith(t, c)
		if err := s.Client().Ping(ctx).Err(); err != nil {
			t.Fatalf("%+v: PING: %v", c, err)
		}
		anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("%+v: PING without credentials: %v, want NOAUTH", c, err)
		}
		anon.Close()
		u, err := url.Parse(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		if pw, _ := u.User.Password(); pw != c.Password || u.User.Username() != c.User || u.Scheme != "redis" {
			t.Errorf("%+v: URL %s", c, s.URL())
		}
	}
}
