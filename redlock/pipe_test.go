package redlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redistest"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{"+OK\r\n", "OK"},
		{"-NOSCRIPT No matching script\r\n", redisError("NOSCRIPT No matching script")},
		{":-42\r\n", int64(-42)},
		{"$5\r\nab\r\nc\r\n", "ab\r\nc"},
		{"$0\r\n\r\n", ""},
		{"$-1\r\n", nil},
		{"*-1\r\n", nil},
		{"*0\r\n", []any{}},
		{"*4\r\n:1\r\n:7\r\n$-1\r\n*1\r\n+x\r\n", []any{int64(1), int64(7), nil, []any{"x"}}},
	} {
		got, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("readReply(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "+OK", "+OK\n", ":x\r\n", "$3\r\nab\r\n", "$2\r\nabcd\r\n", "$-2\r\n", "*2\r\n:1\r\n",
		"$99999999999\r\n", "*2000000\r\n", "%1\r\n", "\r\n",
	} {
		if got, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("readReply(%q) = %#v, want an error", in, got)
		}
	}
	if !isNoScript(redisError("NOSCRIPT No matching script")) {
		t.Error("a NOSCRIPT reply is not seen as one")
	}
}

func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "*2\r\n:1\r\n$1\r\nx\r\n", "-ERR x\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(strings.NewReader(string(b)))
		for range 4 {
			if _, err := readReply(r); err != nil {
				return
			}
		}
	})
}

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, "EVALSHA", "ab", 2, int64(-7), []byte("k")))
	want := "*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$2\r\n-7\r\n$1\r\nk\r\n"
	if got != want {
		t.Fatalf("appendCommand = %q, want %q", got, want)
	}
}

// TestEvalSha: the encoding is EVALSHA's command, made in one allocation
// whatever the lengths of the keys and arguments.
func TestEvalSha(t *testing.T) {
	script := redis.NewScript("return 1")
	long := strings.Repeat("k", 300)
	for _, tc := range []struct {
		keys []string
		args []any
	}{
		{[]string{"a"}, nil},
		{[]string{"redlockd:lock:/r", "redlockd:meta:/r"}, []any{"tok", 10000, int64(-1), "owner"}},
		{[]string{long, long, long, long}, []any{long, 1 << 62, long, "2"}},
	} {
		want := appendCommand(nil, append([]any{"EVALSHA", script.Hash(), len(tc.keys)}, append(stringsToAny(tc.keys), tc.args...)...)...)
		if got := evalSha(script, tc.keys, tc.args); string(got) != string(want) {
			t.Errorf("evalSha = %q, want %q", got, want)
		}
		if n := testing.AllocsPerRun(10, func() { evalSha(script, tc.keys, tc.args) }); n > 1 {
			t.Errorf("evalSha with keys of %d bytes: %v allocations, want 1", len(tc.keys[0]), n)
		}
	}
}

func stringsToAny(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}

// echo sends ECHO v through p and returns the reply. The pipe must answer
// every command by its deadline: a command that gets nothing in far longer
// fails the test.
func echo(t *testing.T, p *pipe, v string, timeout time.Duration) (any, error) {
	t.Helper()
	rd := newRound(1, 1)
	c := &call{enc: appendCommand(nil, "ECHO", v), deadline: time.Now().Add(timeout), round: rd}
	p.submit(c)
	select {
	case <-rd.all:
	case <-time.After(timeout + 5*time.Second):
		t.Errorf("ECHO %s: no answer and no error within %v", v, timeout+5*time.Second)
		return nil, errors.New("no answer")
	}
	return c.res.val, c.res.err
}

// echoAll sends n ECHOs at once from n goroutines and checks that each got
// its own value back or an error; it returns how many got their value.
func echoAll(t *testing.T, p *pipe, prefix string, n int, timeout time.Duration) (ok int, errs []error) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			want := fmt.Sprintf("%s-%d", prefix, i)
			v, err := echo(t, p, want, timeout)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case v != want:
				t.Errorf("ECHO %s answered %#v: a reply went to the wrong command", want, v)
			default:
				ok++
			}
		})
	}
	wg.Wait()
	return ok, errs
}

// TestPipeConcurrent: concurrent commands share the connection and each
// gets its own reply, across a pause of the server (replies late past the
// deadline) and a restart (connection lost), after which the pipe
// reconnects.
func TestPipeConcurrent(t *testing.T) {
	cl := newCluster(t, 1, Options{NodeTimeout: 100 * time.Millisecond})
	p := cl.c.nodes[0].pipe
	const n = 200
	if ok, errs := echoAll(t, p, "a", n, time.Second); ok != n {
		t.Fatalf("healthy node: %d of %d ECHOs answered; errors %v", ok, n, errs)
	}

	cl.servers[0].Pause()
	start := time.Now()
	ok, errs := echoAll(t, p, "b", n, 100*time.Millisecond)
	if el := time.Since(start); ok != 0 || el > 2*time.Second {
		t.Fatalf("paused node: %d answered, after %v", ok, el)
	}
	for _, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("paused node: error %v, want the deadline", err)
		}
	}
	cl.servers[0].Resume() // its late replies to the "b" ECHOs must reach no one
	if ok, errs := echoAll(t, p, "c", n, time.Second); ok != n {
		t.Fatalf("after the pause: %d of %d ECHOs answered; errors %v", ok, n, errs)
	}

	cl.servers[0].Restart()
	// The first command after the restart may find the old connection
	// closed; a new one is dialled for the next.
	_, _ = echo(t, p, "d", time.Second)
	if ok, errs := echoAll(t, p, "e", n, time.Second); ok != n {
		t.Fatalf("after a restart: %d of %d ECHOs answered; errors %v", ok, n, errs)
	}
}

// TestPipeDialFails: with the server gone, commands fail with the dial's
// error within the node timeout, and the pipe connects again once the
// server is back.
func TestPipeDialFails(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]*redis.Options{srv.Options()}, Options{NodeTimeout: 100 * time.Millisecond, NoQuarantine: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.nodes[0].pipe
	if v, err := echo(t, p, "x", time.Second); err != nil || v != "x" {
		t.Fatalf("ECHO = %v, %v", v, err)
	}
	srv.Kill()
	_, _ = echo(t, p, "y", time.Second) // may find the old connection closed
	if _, err := echo(t, p, "z", time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ECHO to a killed server: err = %v, want the dial's", err)
	}
	srv.Restart()
	if v, err := echo(t, p, "w", time.Second); err != nil || v != "w" {
		t.Fatalf("ECHO after the restart = %v, %v", v, err)
	}
}

// TestPipeClose: Close fails what is queued or out, and later commands, with
// redis.ErrClosed, and returns although the server does not answer.
func TestPipeClose(t *testing.T) {
	cl := newCluster(t, 1, Options{NodeTimeout: 10 * time.Second})
	p := cl.c.nodes[0].pipe
	if v, err := echo(t, p, "x", time.Second); err != nil || v != "x" {
		t.Fatalf("ECHO = %v, %v", v, err)
	}
	cl.servers[0].Pause()
	defer cl.servers[0].Resume()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() {
			_, err := echo(t, p, fmt.Sprint(i), 10*time.Second)
			errs <- err
		})
	}
	// Close once every command is out or queued.
	for {
		p.mu.Lock()
		n := len(p.inflight) - p.head + len(p.queued)
		p.mu.Unlock()
		if n == 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil {
			t.Fatal("a command to a paused server succeeded")
		}
	}
	if _, err := echo(t, p, "late", time.Second); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("ECHO after close: %v, want redis.ErrClosed", err)
	}
}
