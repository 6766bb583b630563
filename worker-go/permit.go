package swarmworker

import (
	"sync/atomic"
	"time"
)

// permitBase is an instant before every deadline of this process, on the monotonic clock.
var permitBase = time.Now()

// Permit says whether the worker may still work on its jobs: a job checks [Permit.Holds]
// before each unit of work. The worker stops every job when its Lease may look expired, but a
// process paused by SIGSTOP resumes all its goroutines at once, so a job may run before the
// worker's fence does; the permit is a deadline on the monotonic clock, not a flag someone
// must clear, so it has lapsed whichever goroutine runs first. Copies share one deadline; the
// zero Permit never holds.
type Permit struct {
	// until is nanoseconds after permitBase until which the permit holds, plus one; 0: not
	// held.
	until *atomic.Int64
}

func newPermit() Permit {
	return Permit{until: new(atomic.Int64)}
}

// Holds reports whether the permit holds now: the worker's last Lease renewal is recent
// enough that the operator cannot have handed its jobs to another worker.
func (p Permit) Holds() bool {
	until, ok := p.Until()
	return ok && time.Now().Before(until)
}

// Until is when the permit lapses, if it is held at all.
func (p Permit) Until() (time.Time, bool) {
	if p.until == nil {
		return time.Time{}, false
	}
	nanos := p.until.Load()
	if nanos == 0 {
		return time.Time{}, false
	}
	return permitBase.Add(time.Duration(nanos - 1)), true
}

// set moves the deadline: the fence's, or none while fenced.
func (p Permit) set(until time.Time, held bool) {
	if !held {
		p.until.Store(0)
		return
	}
	p.until.Store(max(int64(until.Sub(permitBase)), 0) + 1)
}
