package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Handoff is one acquisition in a contended run.
type Handoff struct {
	Client   int
	Asked    time.Time // first request for this acquisition sent
	Acquired time.Time // 201 received
	Released time.Time // 204 received
}

// ContendResult is what a contended run measured.
type ContendResult struct {
	Name     string
	Clients  int
	Duration time.Duration
	Acquired int
	// Requests counts acquire requests sent (a polling client sends many per
	// acquisition).
	Requests int
	// Handoff percentiles: from one holder's release response to the next
	// holder's 201.
	P50, P90, P99, Max time.Duration
	// SameClient is the share of acquisitions won by the client that held
	// the lock just before.
	SameClient float64
	// WaitP50, WaitP99 and WaitMax are how long clients waited for the lock:
	// first request to 201.
	WaitP50, WaitP99, WaitMax time.Duration
}

// Mode is how a contending client asks for the lock.
type Mode int

const (
	// Wait asks with wait_ms and lets the gateway queue it.
	Wait Mode = iota
	// Poll asks with wait_ms 0 and, on 409, sleeps a random 50–250ms before
	// asking again, as redsync and node-redlock do.
	Poll
)

// Contend runs clients that contend for one resource for d: each takes the
// lock, holds it for hold, releases it and at once asks again. Client i uses
// urls[i%len(urls)].
func Contend(ctx context.Context, name string, urls []string, resource string, clients int, hold, d time.Duration, mode Mode) ContendResult {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	hc := NewHTTPClient(clients)
	defer hc.CloseIdleConnections()
	var (
		mu       sync.Mutex
		events   []Handoff
		requests int
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := urls[i%len(urls)] + "/locks/" + resource
			body := `{"ttl_ms":10000,"wait_ms":5000}`
			if mode == Poll {
				body = `{"ttl_ms":10000}`
			}
			asked := time.Now()
			for ctx.Err() == nil {
				token, status := post(ctx, hc, u, body)
				mu.Lock()
				requests++
				mu.Unlock()
				if status != http.StatusCreated {
					if mode == Poll && status == http.StatusConflict {
						sleep(ctx, 50*time.Millisecond+rand.N(200*time.Millisecond))
					}
					continue
				}
				acquired := time.Now()
				sleep(ctx, hold)
				// Release even when the run is over, so the next run starts free.
				released, ok := del(hc, u, token)
				if ok {
					mu.Lock()
					events = append(events, Handoff{Client: i, Asked: asked, Acquired: acquired, Released: released})
					mu.Unlock()
				}
				asked = time.Now()
			}
		}()
	}
	wg.Wait()
	r := ContendResult{Name: name, Clients: clients, Duration: time.Since(start), Acquired: len(events), Requests: requests}
	slices.SortFunc(events, func(a, b Handoff) int { return a.Acquired.Compare(b.Acquired) })
	var gaps []time.Duration
	same := 0
	for i := 1; i < len(events); i++ {
		gaps = append(gaps, max(0, events[i].Acquired.Sub(events[i-1].Released)))
		if events[i].Client == events[i-1].Client {
			same++
		}
	}
	var waits []time.Duration
	for _, e := range events {
		waits = append(waits, e.Acquired.Sub(e.Asked))
	}
	slices.Sort(waits)
	if n := len(waits); n > 0 {
		r.WaitP50, r.WaitP99, r.WaitMax = waits[n/2], waits[min(n-1, n*99/100)], waits[n-1]
	}
	slices.Sort(gaps)
	if n := len(gaps); n > 0 {
		pct := func(p float64) time.Duration { return gaps[min(n-1, int(p*float64(n)))] }
		r.P50, r.P90, r.P99, r.Max = pct(0.5), pct(0.9), pct(0.99), gaps[n-1]
		r.SameClient = float64(same) / float64(n)
	}
	return r
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// post acquires; it returns the token and the status (0 on a transport error).
func post(ctx context.Context, hc *http.Client, u, body string) (string, int) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	var b struct {
		Token string `json:"token"`
	}
	if resp.StatusCode == http.StatusCreated && json.NewDecoder(resp.Body).Decode(&b) != nil {
		return "", 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return b.Token, resp.StatusCode
}

// del releases and returns when the 204 arrived.
func del(hc *http.Client, u, token string) (time.Time, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
	req.Header.Set("Lock-Token", token)
	resp, err := hc.Do(req)
	if err != nil {
		return time.Time{}, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Now(), resp.StatusCode == http.StatusNoContent
}

// ContendTable formats contended runs.
func ContendTable(rs []ContendResult, extra func(ContendResult) string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-34s %8s %9s %9s %9s %9s %9s %9s %10s %10s %10s  %s\n", "mode", "acquired", "requests",
		"handoff50", "handoff90", "handoff99", "handoffmax", "same", "wait50", "wait99", "waitmax", "")
	for _, r := range rs {
		ms := func(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }
		e := ""
		if extra != nil {
			e = extra(r)
		}
		fmt.Fprintf(&b, "%-34s %8d %9d %9s %9s %9s %9s %8.1f%% %10s %10s %10s  %s\n", r.Name, r.Acquired, r.Requests,
			ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max), 100*r.SameClient, ms(r.WaitP50), ms(r.WaitP99), ms(r.WaitMax), e)
	}
	return b.String()
}
