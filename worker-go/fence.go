package swarmworker

import "time"

// Renewal is what a successful Lease write means for the [Fence].
type Renewal struct {
	// NewlyFenced: the renewal revealed that the Lease was expired meanwhile; stop every job
	// now.
	NewlyFenced bool
	// Read, when not 0, asks for a ConfigMap GET now: fenced and renewed in time, the answer
	// to this read (given to [Fence.Read] with this tag) may lift the fence.
	Read uint64
}

type fenceState int

const (
	fenceLive fenceState = iota
	fenceFenced
	fenceReading // fenced, renewed since, awaiting the GET tagged awaited
)

// Fence decides, with no I/O, when a worker must stop every job because its Lease may look
// expired to the operator, and when it may run jobs again. Times are on the monotonic clock
// (values of time.Now()).
//
// The operator hands a worker's jobs to others once its Lease has gone unrenewed for
// leaseDurationSeconds plus a grace on the operator's clock. The worker fences itself earlier:
// once the limit (duration - margin) has passed since it sent its last successful Lease write.
// Fenced, it runs nothing until a Lease write succeeds again and then a ConfigMap GET issued
// after that success has answered. A process starts fenced: a restarted container keeps its
// pod's uid, so the operator cannot tell its start from the old process's last renewal.
type Fence struct {
	limit   time.Duration
	renewed time.Time // when the last successful Lease write was sent, or the start
	state   fenceState
	awaited uint64
	reads   uint64
}

// NewFence is the fence of a worker process started at start: fenced until its first Lease
// write succeeds and a read after it answers, then fenced again once limit passes without a
// renewal.
func NewFence(limit time.Duration, start time.Time) *Fence {
	return &Fence{limit: limit, renewed: start, state: fenceFenced}
}

// IsLive reports whether the worker may run jobs.
func (f *Fence) IsLive() bool {
	return f.state == fenceLive
}

// Deadline is when to check the fence next; false while fenced.
func (f *Fence) Deadline() (time.Time, bool) {
	if !f.IsLive() {
		return time.Time{}, false
	}
	return f.renewed.Add(f.limit), true
}

// Expired reports whether the last renewal is too old at now for jobs to run.
func (f *Fence) Expired(now time.Time) bool {
	return now.Sub(f.renewed) >= f.limit
}

// Check fences the worker if its renewal is too old at now; true when it just did (stop every
// job now).
func (f *Fence) Check(now time.Time) bool {
	if f.IsLive() && f.Expired(now) {
		f.state = fenceFenced
		return true
	}
	return false
}

// Renewed records a successful Lease write sent at sent, learnt at now, the last of a run of
// renewals that began at streak: the first success after a gap of the limit or more since the
// one before (or the start). A live worker whose run of renewals began after the last renewal
// it knew of was expired in between (a process paused, say), even if no check ran meanwhile:
// it fences.
func (f *Fence) Renewed(sent, streak, now time.Time) Renewal {
	gap := streak.After(f.renewed)
	if sent.After(f.renewed) {
		f.renewed = sent
	}
	renewal := Renewal{NewlyFenced: f.IsLive() && (gap || f.Expired(now))}
	if renewal.NewlyFenced {
		f.state = fenceFenced
	}
	if f.state == fenceFenced && !f.Expired(now) {
		f.reads++
		f.state, f.awaited = fenceReading, f.reads
		renewal.Read = f.reads
	}
	return renewal
}

// Read reports whether the ConfigMap read tagged read, answered at now, lifts the fence. A
// read that is not the awaited one changes nothing; the awaited one answered too late fences
// again until the next renewal.
func (f *Fence) Read(read uint64, now time.Time) bool {
	if f.state != fenceReading || f.awaited != read {
		return false
	}
	if f.Expired(now) {
		f.state = fenceFenced
		return false
	}
	f.state = fenceLive
	return true
}

// ReadFailed records that the read tagged read failed: the worker stays fenced until the next
// renewal asks for another.
func (f *Fence) ReadFailed(read uint64) {
	if f.state == fenceReading && f.awaited == read {
		f.state = fenceFenced
	}
}
