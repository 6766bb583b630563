package swarmworker

import (
	"slices"
	"time"
)

// Read is the answer to one fence read: a GET of the worker's own ConfigMap with no
// resourceVersion, which the API server answers with a quorum read.
type Read struct {
	// SentAt is when the request was sent, on the monotonic clock: the permit counts from
	// here, not from the answer.
	SentAt time.Time
	// Version is the config version the ConfigMap shows; nil when there is no ConfigMap, or
	// no config.yml in it.
	Version *uint64
	// Jobs are this pod's entry; empty when the config has none for it.
	Jobs []string
}

// Fence is one worker process's fence, with no I/O: which jobs it may run and until when,
// when it reads next, whether it answers ready, and which versions it acknowledges. Times are
// on the monotonic clock (values of time.Now()); the shell performs what it decides: stop the
// jobs it no longer lists, then extend the others' permits and start the new ones, then write
// the acknowledgement.
//
// A process starts fenced: it runs nothing until its first fence read. A read sent at s
// gives each job of its entry a permit until s + F, unless answered at or after s + F; a job
// runs only while the last read answered lists it and its permit holds. After [Fence.Terminate]
// nothing runs again and only entries without jobs are acknowledged.
type Fence struct {
	permit      time.Duration
	running     []string  // sorted
	until       time.Time // when the running jobs' permit lapses
	version     *uint64   // the version of the last read answered
	sent        time.Time // when the last successful read was sent
	hasSent     bool
	failures    uint
	nextRead    time.Time
	terminating bool
	acked       *acknowledged
}

// acknowledged is the last version a Fence acknowledged.
type acknowledged struct {
	version uint64
	empty   bool // whether its entry had no jobs
}

// NewFence is the fence of a process started at start with permit F: it runs nothing, is not
// ready, and reads at once.
func NewFence(permit time.Duration, start time.Time) *Fence {
	return &Fence{permit: permit, nextRead: start}
}

// Answered applies a read answered at at, and returns the version it acknowledges, if any:
// one higher than the last acknowledged, of an entry the worker now runs exactly (a read that
// gives a permit while not terminating, or an entry without jobs).
func (f *Fence) Answered(at time.Time, read Read) (uint64, bool) {
	f.Tick(at)
	f.sent, f.hasSent = read.SentAt, true
	f.failures = 0
	f.nextRead = read.SentAt.Add(ReadInterval(f.permit))
	f.version = read.Version
	entry := slices.Compact(slices.Sorted(slices.Values(read.Jobs)))
	permitted := !f.terminating && at.Before(read.SentAt.Add(f.permit))
	f.running, f.until = nil, time.Time{}
	if permitted && len(entry) > 0 {
		f.running, f.until = entry, read.SentAt.Add(f.permit)
	}
	exact := permitted || len(entry) == 0
	if read.Version == nil || !exact || (f.acked != nil && *read.Version <= f.acked.version) {
		return 0, false
	}
	f.acked = &acknowledged{version: *read.Version, empty: len(entry) == 0}
	return *read.Version, true
}

// Failed records a read that failed at at: the next one is a retry, 1 s after the first
// failure in a row, doubling, at most F/8 apart.
func (f *Fence) Failed(at time.Time) {
	f.failures++
	f.nextRead = at.Add(RetryDelay(f.failures, f.permit))
}

// Shed records a read the API server shed at at (429): the next one goes a quarter to half
// the permit later, at draw (in [0, 1)) between the two.
func (f *Fence) Shed(at time.Time, draw float64) {
	f.failures++
	f.nextRead = at.Add(ShedRetryDelay(f.permit, draw))
}

// Watched records a watch event at at: it proves nothing, and asks for a read at once.
func (f *Fence) Watched(at time.Time) {
	f.nextRead = at
}

// Tick stops the jobs whose permit has lapsed at at; true when it did.
func (f *Fence) Tick(at time.Time) bool {
	if len(f.running) == 0 || at.Before(f.until) {
		return false
	}
	f.running, f.until = nil, time.Time{}
	return true
}

// Terminate records SIGTERM: nothing runs from now on and the worker is not ready.
func (f *Fence) Terminate() {
	f.terminating = true
	f.running, f.until = nil, time.Time{}
}

// Running are the jobs the worker runs, sorted.
func (f *Fence) Running() []string {
	return slices.Clone(f.running)
}

// Until is when the running jobs' permit lapses; false when nothing runs.
func (f *Fence) Until() (time.Time, bool) {
	return f.until, len(f.running) > 0
}

// Version is the config version the last read answered showed, if any.
func (f *Fence) Version() *uint64 {
	return f.version
}

// NextRead is when to send the next fence read.
func (f *Fence) NextRead() time.Time {
	return f.nextRead
}

// ReadyUntil is when the worker stops answering ready: [ReadyWithin] after the send of its
// last successful read; false before the first one and once terminating.
func (f *Fence) ReadyUntil() (time.Time, bool) {
	if f.terminating || !f.hasSent {
		return time.Time{}, false
	}
	return f.sent.Add(ReadyWithin(f.permit)), true
}

// Ready reports whether the worker answers ready at at.
func (f *Fence) Ready(at time.Time) bool {
	until, ok := f.ReadyUntil()
	return ok && at.Before(until)
}

// Terminating reports whether [Fence.Terminate] was called.
func (f *Fence) Terminating() bool {
	return f.terminating
}

// Done reports whether a terminating worker whose Lease carries written (nil: no
// acknowledgement) may exit: it has acknowledged, last, a version whose entry has no jobs.
func (f *Fence) Done(written *uint64) bool {
	return f.terminating && f.acked != nil && f.acked.empty && written != nil && *written == f.acked.version
}
