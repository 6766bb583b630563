package swarmworker

import (
	"slices"
	"testing"
)

// applyAll runs a change to the end, as the worker does, and returns the version to
// acknowledge.
func applyAll(h *Handoff, change Change) (uint64, bool) {
	for _, job := range change.Stop {
		h.Stopped(job)
	}
	for _, job := range h.Starting() {
		h.Started(job)
	}
	return h.TakeAck()
}

func offer(t *testing.T, h *Handoff, version uint64, entry ...string) Change {
	t.Helper()
	change, ok := h.Offer(version, entry)
	if !ok {
		t.Fatalf("version %d ignored", version)
	}
	return change
}

func wantJobs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

func wantAck(t *testing.T, h *Handoff, want uint64, ok bool) {
	t.Helper()
	version, got := h.TakeAck()
	if got != ok || (ok && version != want) {
		t.Fatalf("TakeAck = %d, %v; want %d, %v", version, got, want, ok)
	}
}

func TestAFirstVersionStartsTheEntryAndIsAcknowledgedAfterTheStarts(t *testing.T) {
	h := NewHandoff()
	change := offer(t, h, 1, "a", "b")
	wantJobs(t, "stop", change.Stop)
	wantJobs(t, "start", change.Start, "a", "b")
	wantAck(t, h, 0, false)
	wantJobs(t, "starting", h.Starting(), "a", "b")
	wantJobs(t, "running", h.Running(), "a", "b")
	h.Started("a")
	wantAck(t, h, 0, false)
	h.Started("b")
	wantAck(t, h, 1, true)
	wantAck(t, h, 0, false) // each version is handed out once
}

func TestAReplayedOrStaleVersionIsIgnored(t *testing.T) {
	h := NewHandoff()
	if v, ok := applyAll(h, offer(t, h, 5, "a")); !ok || v != 5 {
		t.Fatal("version 5 not acknowledged")
	}
	h.Acked(5)
	for _, version := range []uint64{5, 4, 3} {
		if _, ok := h.Offer(version, []string{"b"}); ok {
			t.Fatalf("version %d not ignored", version)
		}
	}
	wantJobs(t, "running", h.Running(), "a")
	if applied, _ := h.Applied(); applied != 5 {
		t.Fatalf("applied %d", applied)
	}
	offer(t, h, 6, "b")
}

func TestAVersionStopsWhatItsEntryNoLongerListsBeforeItStartsAnything(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a", "b", "c"))
	change := offer(t, h, 2, "c", "d", "a")
	wantJobs(t, "stop", change.Stop, "b")
	wantJobs(t, "start", change.Start, "d")
	wantJobs(t, "starting while b runs", h.Starting())
	wantAck(t, h, 0, false)
	h.Stopped("b")
	wantJobs(t, "running", h.Running(), "a", "c")
	wantJobs(t, "starting", h.Starting(), "d")
	wantJobs(t, "starting again", h.Starting())
	wantAck(t, h, 0, false)
	h.Started("d")
	wantAck(t, h, 2, true)
	wantJobs(t, "running", h.Running(), "a", "c", "d")
}

func TestAVersionIsAcknowledgedOnlyAfterItsStopsAreConfirmed(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a", "b"))
	change := offer(t, h, 2, "a")
	wantJobs(t, "stop", change.Stop, "b")
	wantJobs(t, "starting", h.Starting())
	wantAck(t, h, 0, false)
	h.Stopped("b")
	wantAck(t, h, 2, true)
}

func TestAVersionThatChangesNothingIsAcknowledgedAtOnce(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a"))
	if !offer(t, h, 2, "a").IsEmpty() {
		t.Fatal("version 2 changes something")
	}
	wantAck(t, h, 2, true)
	none := offer(t, h, 3)
	wantJobs(t, "stop", none.Stop, "a")
	applyAll(h, none)
	if !offer(t, h, 4).IsEmpty() {
		t.Fatal("version 4 changes something")
	}
	wantAck(t, h, 4, true)
}

func TestARepeatedJobInTheEntryStartsOnce(t *testing.T) {
	h := NewHandoff()
	wantJobs(t, "start", offer(t, h, 1, "a", "a").Start, "a")
}

func TestANewerVersionReplacesOneWhoseChangeHasNotFinished(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a", "b"))
	offer(t, h, 2, "a")
	// b's stop is under way when version 3 arrives; it gives b back.
	third := offer(t, h, 3, "a", "b", "c")
	wantJobs(t, "stop", third.Stop)
	wantJobs(t, "start", third.Start, "c")
	h.Stopped("b")
	wantAck(t, h, 0, false)
	wantJobs(t, "starting", h.Starting(), "c", "b")
	h.Started("c")
	h.Started("b")
	wantAck(t, h, 3, true)
	wantJobs(t, "running", h.Running(), "a", "c", "b")
}

func TestATerminatingWorkerStopsEverythingAndNeverStartsAJobAgain(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a", "b"))
	h.Acked(1)
	wantJobs(t, "terminate", h.Terminate(), "a", "b")
	h.Stopped("a")
	h.Stopped("b")
	if h.Done() {
		t.Fatal("done while version 1 still lists jobs")
	}
	if _, ok := h.Offer(2, []string{"a", "c"}); ok {
		t.Fatal("an entry with jobs offered while terminating")
	}
	wantJobs(t, "starting", h.Starting())
	wantAck(t, h, 0, false)
	if !offer(t, h, 3).IsEmpty() {
		t.Fatal("empty version changes something")
	}
	wantAck(t, h, 3, true)
	if h.Done() {
		t.Fatal("done before the acknowledgement is written")
	}
	h.Acked(3)
	if !h.Done() || len(h.Running()) != 0 {
		t.Fatal("not done")
	}
}

func TestATerminatingWorkerAbandonsTheVersionItWasApplying(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a"))
	offer(t, h, 2, "b")
	h.Stopped("a")
	wantJobs(t, "terminate", h.Terminate())
	wantJobs(t, "starting", h.Starting())
	wantAck(t, h, 0, false)
	if _, ok := h.Offer(2, []string{"b"}); ok {
		t.Fatal("a replay offered")
	}
}

func TestAFencedWorkerStopsEverythingAndAppliesTheSameVersionAgainAfterwards(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a", "b"))
	h.Acked(1)
	offer(t, h, 2, "a", "c")
	wantJobs(t, "fence", h.Fence(), "a", "b")
	h.Stopped("a")
	h.Stopped("b")
	wantJobs(t, "running", h.Running())
	wantJobs(t, "starting", h.Starting())
	wantAck(t, h, 0, false)
	if _, ok := h.Offer(1, []string{"a"}); ok {
		t.Fatal("an older version offered")
	}
	again := offer(t, h, 2, "a", "c")
	wantJobs(t, "start", again.Start, "a", "c")
	if v, ok := applyAll(h, again); !ok || v != 2 {
		t.Fatal("version 2 not acknowledged")
	}
	if _, ok := h.Offer(2, []string{"a", "c"}); ok {
		t.Fatal("a replay offered")
	}
}

func TestAnAcknowledgementAfterSigtermForAnEntryWithJobsDoesNotEndTheWorker(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1, "a"))
	h.Terminate()
	h.Stopped("a")
	h.Acked(1)
	if h.Done() {
		t.Fatal("done")
	}
	if v, ok := h.Acknowledged(); !ok || v != 1 {
		t.Fatal("version 1 not acknowledged")
	}
}

func TestAWorkerWithoutJobsWhoseEmptyEntryIsAcknowledgedIsDoneAtSigterm(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 7))
	h.Acked(7)
	if h.Done() {
		t.Fatal("done before SIGTERM")
	}
	wantJobs(t, "terminate", h.Terminate())
	if !h.Done() {
		t.Fatal("not done")
	}
}

func TestAConfirmationOfAnotherVersionThanTheOneSentIsNoAcknowledgement(t *testing.T) {
	h := NewHandoff()
	applyAll(h, offer(t, h, 1))
	h.Acked(9)
	if _, ok := h.Acknowledged(); ok {
		t.Fatal("9 counted")
	}
	h.Acked(1)
	if v, ok := h.Acknowledged(); !ok || v != 1 {
		t.Fatal("1 not counted")
	}
}
