package swarmworker

import "slices"

// Change is what one config version asks of a worker: stop Stop and wait, then start Start.
type Change struct {
	// Version is the config version.
	Version uint64
	// Stop are the running jobs the version's entry no longer lists, in the order they
	// started.
	Stop []string
	// Start are the jobs the entry lists that do not run yet, in the entry's order.
	Start []string
}

// IsEmpty reports whether the version leaves the worker's jobs as they are.
func (c Change) IsEmpty() bool {
	return len(c.Stop) == 0 && len(c.Start) == 0
}

// Handoff is one pod instance's progress through the config versions: the protocol's rules
// with no I/O, so they can be tested without an API server.
//   - A version at or below the one applied is a replay and is ignored.
//   - Every stop of a version finishes before any of its starts begins.
//   - A version is acknowledged only once its stops and starts are done, and at once when it
//     changes nothing.
//   - After [Handoff.Terminate] nothing starts again and only versions whose own entry has no
//     jobs are acknowledged; the worker is done once one such acknowledgement is written.
//   - After [Handoff.Fence] nothing runs, and the next version offered is applied even if it
//     is the one applied before.
//
// The zero Handoff runs nothing and has applied no version.
type Handoff struct {
	running     []string // jobs that run or are being started, in start order
	applied     *uint64  // the highest version offered and not ignored
	pending     *pending // the version being applied
	sent        *ack     // the last acknowledgement handed to the Lease writer
	acked       *ack     // the last acknowledgement the Lease writer confirmed
	terminating bool
	reapply     bool // fenced: the version applied is to be applied again
}

type pending struct {
	version  uint64
	stop     []string // stops not confirmed yet
	start    []string // starts not confirmed yet
	wanted   []string // the version's own entry
	starting bool     // whether start was handed out by Starting
	empty    bool     // whether the version's own entry has no jobs
}

type ack struct {
	version uint64
	empty   bool // whether the version's own entry has no jobs
}

// NewHandoff is a worker that runs nothing and has applied no version.
func NewHandoff() *Handoff {
	return &Handoff{}
}

// Offer offers config version, whose entry for this pod lists entry (empty when the config has
// none for it). It returns what to do, or false when the version is to be ignored: a replay
// (at or below the version applied, unless a fence asked for it to be applied again), or,
// while terminating, an entry that still lists jobs. A new offer replaces a version whose
// change has not finished.
func (h *Handoff) Offer(version uint64, entry []string) (Change, bool) {
	fresh := h.applied == nil || version > *h.applied || (version == *h.applied && h.reapply)
	if !fresh {
		return Change{}, false
	}
	h.applied = &version
	h.reapply = false
	wanted := make([]string, 0, len(entry))
	for _, job := range entry {
		if !slices.Contains(wanted, job) {
			wanted = append(wanted, job)
		}
	}
	if h.terminating && len(wanted) > 0 {
		h.pending = nil
		return Change{}, false
	}
	var stop, start []string
	for _, job := range h.running {
		if !slices.Contains(wanted, job) {
			stop = append(stop, job)
		}
	}
	for _, job := range wanted {
		if !slices.Contains(h.running, job) {
			start = append(start, job)
		}
	}
	h.pending = &pending{
		version: version,
		stop:    slices.Clone(stop),
		start:   slices.Clone(start),
		wanted:  wanted,
		empty:   len(wanted) == 0,
	}
	return Change{Version: version, Stop: stop, Start: start}, true
}

// Stopped records that job has stopped. A job the pending version lists (its stop was asked
// for by a version this one replaced) is to be started again.
func (h *Handoff) Stopped(job string) {
	h.running = remove(h.running, job)
	if p := h.pending; p != nil {
		p.stop = remove(p.stop, job)
		if slices.Contains(p.wanted, job) && !p.starting && !slices.Contains(p.start, job) {
			p.start = append(p.start, job)
		}
	}
}

// Starting hands out the jobs of the pending version to start now, counted as running from
// here on (so a report written before they start never misses one). It is empty until every
// stop of that version has finished, once handed out, and while terminating.
func (h *Handoff) Starting() []string {
	p := h.pending
	if p == nil || h.terminating || p.starting || len(p.stop) > 0 {
		return nil
	}
	p.starting = true
	for _, job := range p.start {
		if !slices.Contains(h.running, job) {
			h.running = append(h.running, job)
		}
	}
	return slices.Clone(p.start)
}

// Started records that job, handed out by [Handoff.Starting], has started.
func (h *Handoff) Started(job string) {
	if p := h.pending; p != nil && p.starting {
		p.start = remove(p.start, job)
	}
}

// TakeAck is the version to acknowledge now, if the pending one has finished; handing it out
// clears it, so each version is handed out once.
func (h *Handoff) TakeAck() (uint64, bool) {
	p := h.pending
	if p == nil || len(p.stop) > 0 || len(p.start) > 0 {
		return 0, false
	}
	h.pending = nil
	h.sent = &ack{version: p.version, empty: p.empty}
	return p.version, true
}

// Acked records that the Lease now carries version as acknowledged.
func (h *Handoff) Acked(version uint64) {
	if h.sent != nil && h.sent.version == version {
		confirmed := *h.sent
		h.acked = &confirmed
	}
}

// Terminate starts terminating (SIGTERM): the pending version is abandoned and nothing starts
// again. It returns the jobs to stop, all of them; report each with [Handoff.Stopped].
func (h *Handoff) Terminate() []string {
	h.terminating = true
	h.pending = nil
	return slices.Clone(h.running)
}

// Fence fences the worker (its Lease may look expired): the pending version is abandoned and
// the next version offered is applied from scratch, even the one applied now. It returns the
// jobs to stop, all of them; report each with [Handoff.Stopped].
func (h *Handoff) Fence() []string {
	h.pending = nil
	h.reapply = true
	return slices.Clone(h.running)
}

// Done reports whether the worker may exit: it terminates, runs nothing, and the Lease
// acknowledges a version in which its own entry has no jobs.
func (h *Handoff) Done() bool {
	return h.terminating && len(h.running) == 0 && h.acked != nil && h.acked.empty
}

// Terminating reports whether [Handoff.Terminate] was called.
func (h *Handoff) Terminating() bool {
	return h.terminating
}

// Running are the jobs running or being started, in start order.
func (h *Handoff) Running() []string {
	return slices.Clone(h.running)
}

// Applied is the highest version applied (or being applied), if any.
func (h *Handoff) Applied() (uint64, bool) {
	if h.applied == nil {
		return 0, false
	}
	return *h.applied, true
}

// Acknowledged is the version the Lease acknowledges, as last confirmed.
func (h *Handoff) Acknowledged() (uint64, bool) {
	if h.acked == nil {
		return 0, false
	}
	return h.acked.version, true
}

// remove is list without job.
func remove(list []string, job string) []string {
	return slices.DeleteFunc(list, func(item string) bool { return item == job })
}
