package stamp

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendSameAsFormat compares Append with time.Format over times
// spread from year 0 to 9999 and beyond, in several zones, and at the
// edges of seconds, days and years.
func TestAppendSameAsFormat(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -11*3600)}
	times := []time.Time{
		{}, time.Unix(0, 0), time.Unix(0, 999_999_999), time.Unix(-1, 0), time.Unix(1<<33, 1_000_000),
		time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 500_000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Now(),
	}
	min, max := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()/1e9, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	for range 100_000 {
		times = append(times, time.Unix(min+rand.Int64N(max-min), rand.Int64N(1e9)))
	}
	for _, tt := range times {
		for _, z := range zones {
			tz := tt.In(z)
			want := tz.UTC().Format(Layout)
			if got := string(Append([]byte("x"), tz)); got != "x"+want {
				t.Fatalf("Append(%v) = %q, want %q", tz, got, "x"+want)
			}
			if got := Format(tz); got != want {
				t.Fatalf("Format(%v) = %q, want %q", tz, got, want)
			}
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	now := time.Now()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = Append(buf[:0], now)
	}
}

func BenchmarkAppendFormat(b *testing.B) {
	now := time.Now()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = now.UTC().AppendFormat(buf[:0], Layout)
	}
}
