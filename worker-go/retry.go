package swarmworker

import (
	"math/rand/v2"
	"time"
)

// retry spaces failed Lease writes: 1 s doubling up to half the permit, each delay drawn
// at random from its upper half, so that thousands of workers that lost the API server at once
// come back spread out and no faster than they read, instead of all every second.
type retry struct {
	failures uint
	draw     func() float64 // in [0, 1); rand.Float64 unless a test sets it
}

const firstRetry = time.Second

// next is the wait after one more failure in a row, at most ceiling.
func (r *retry) next(ceiling time.Duration) time.Duration {
	doubled := firstRetry << min(r.failures, 16)
	r.failures++
	delay := min(doubled, ceiling)
	draw := r.draw
	if draw == nil {
		draw = rand.Float64
	}
	return delay/2 + time.Duration(float64(delay)*draw()/2)
}
