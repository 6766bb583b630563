package swarmworker

import (
	"sync/atomic"
	"time"
)

// permitBase is an instant before every deadline of this process, on the monotonic clock.
var permitBase = time.Now()

// Permit says whether the worker may still work on a job: the job checks [Permit.Holds] before
// each unit of work. The worker stops a job when its permit lapses, but a process paused for
// longer than its permit (SIGSTOP, a frozen cgroup or VM) resumes all its goroutines at once,
// so a job may run before the worker's timer has stopped it; the permit is a deadline on the
// monotonic clock, not a flag someone must clear, so it has lapsed whichever goroutine runs
// first. Each job started gets a permit of its own: a fence read that does not list the job
// never extends it. Copies share one deadline; the zero Permit never holds.
type Permit struct {
	// until is nanoseconds after permitBase until which the permit holds, plus one; 0: not
	// held.
	until *atomic.Int64
}

func newPermit() Permit {
	return Permit{until: new(atomic.Int64)}
}

// Holds reports whether the permit holds now: a fence read that listed the job was sent less
// than the permit F ago, so the operator cannot have granted the job to another worker.
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

// extend moves the deadline to until.
func (p Permit) extend(until time.Time) {
	p.until.Store(max(int64(until.Sub(permitBase)), 0) + 1)
}

// revoke ends the permit now.
func (p Permit) revoke() {
	p.until.Store(0)
}
