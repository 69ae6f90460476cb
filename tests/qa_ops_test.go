package tests

import (
	"net/http"
	"testing"
)

// TestAcquisitionsCountMultiLocks: redlockd_acquisitions_total counts the
// acquires of locks on several resources (POST /locks) by outcome, as it
// does those of locks, read locks and permits; listing (GET /locks) is no
// acquire.
func TestAcquisitionsCountMultiLocks(t *testing.T) {
	nodes := startCluster(t, 3)
	gw := startGateway(t, nodes)
	a, b := resourceName(t), resourceName(t)+"-b"
	before := scrapeMetrics(t, gw)
	wantStatus(t, gw.do(t, http.MethodPost, "/locks", `{"resources":["`+a+`","`+b+`"]}`), http.StatusCreated)
	wantProblem(t, gw.do(t, http.MethodPost, "/locks", `{"resources":["`+b+`"]}`), http.StatusConflict, "lock-held")
	wantStatus(t, gw.do(t, http.MethodGet, "/locks", ""), http.StatusOK)
	after := scrapeMetrics(t, gw)
	for outcome, want := range map[string]float64{"acquired": 1, "held": 1} {
		got := after.value("redlockd_acquisitions_total", "outcome", outcome) - before.value("redlockd_acquisitions_total", "outcome", outcome)
		if got != want {
			t.Errorf("redlockd_acquisitions_total{outcome=%q} moved by %v after multi-lock acquires, want %v", outcome, got, want)
		}
	}
}
