package swarmworker

import (
	"testing"
	"time"
)

func TestLeaseWriteRetriesBackOffFromASecondToHalfThePermitWithJitter(t *testing.T) {
	ceiling := 10 * time.Second
	var r retry
	for _, upper := range []time.Duration{1, 2, 4, 8, 10, 10, 10, 10} {
		upper *= time.Second
		if delay := r.next(ceiling); delay < upper/2 || delay > upper {
			t.Fatalf("%v not in %v..=%v", delay, upper/2, upper)
		}
	}
	spread := map[time.Duration]bool{}
	for range 20 {
		var fresh retry
		spread[fresh.next(ceiling)] = true
	}
	if len(spread) < 2 {
		t.Fatalf("no jitter: %v", spread)
	}
}

func TestRetryDelaysAreTheUpperHalfOfTheDoubling(t *testing.T) {
	for _, draw := range []float64{0, 0.999999} {
		r := retry{draw: func() float64 { return draw }}
		for _, upper := range []time.Duration{1, 2, 4, 8, 10, 10} {
			upper *= time.Second
			want := upper/2 + time.Duration(float64(upper)*draw/2)
			if got := r.next(10 * time.Second); got != want {
				t.Fatalf("draw %v: %v, want %v", draw, got, want)
			}
		}
	}
}

func TestAShortPermitRetriesLeaseWritesWithinHalfOfIt(t *testing.T) {
	var r retry
	for range 5 {
		if delay := r.next(500 * time.Millisecond); delay > 500*time.Millisecond {
			t.Fatalf("%v", delay)
		}
	}
}
