package redlock

import (
	"testing"
	"time"
)

// TestCensus: the key census counts each namespace's keys on a node: a
// released lock leaves its fence counter, which counts until it expires.
func TestCensus(t *testing.T) {
	cl := newCluster(t, 3, Options{CensusInterval: 20 * time.Millisecond})
	ctx := t.Context()
	for i := range 4 {
		ns := "tenant-a"
		if i == 3 {
			ns = "tenant-b"
		}
		l, err := cl.c.Acquire(ctx, uniq(t), AcquireOptions{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.c.Release(ctx, ns, l.Resource, l.Token); err != nil {
			t.Fatal(err)
		}
	}
	// Each released lock leaves a fence counter and a release tombstone.
	eventually(t, patience, "a census of the keys", func() bool {
		k := cl.c.Census().Keys
		return k["tenant-a"] == 6 && k["tenant-b"] == 2 && len(k) == 2
	})
	if c := cl.c.Census(); c.Node == "" || c.At.IsZero() {
		t.Fatalf("census %+v: no node or time", c)
	}
}
