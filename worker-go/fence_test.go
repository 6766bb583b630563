package swarmworker

import (
	"slices"
	"testing"
	"time"
)

// The Fence beyond the shared traces (TestVectorFenceTraces).

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func readAt(start time.Time, sent float64, version uint64, jobs ...string) Read {
	return Read{SentAt: start.Add(secs(sent)), Version: &version, Jobs: jobs}
}

func TestAJobListedTwiceRunsOnce(t *testing.T) {
	start := time.Now()
	f := NewFence(DefaultPermit, start)
	f.Answered(start.Add(secs(0.1)), readAt(start, 0, 1, "b", "a", "b"))
	if got := f.Running(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("running %q", got)
	}
}

func TestAnOlderVersionIsRunButNotAcknowledged(t *testing.T) {
	start := time.Now()
	f := NewFence(DefaultPermit, start)
	if v, ok := f.Answered(start.Add(secs(0.1)), readAt(start, 0, 5, "a")); !ok || v != 5 {
		t.Fatalf("ack %d %v", v, ok)
	}
	// A ConfigMap deleted and written anew from an older state: the read is what runs.
	if _, ok := f.Answered(start.Add(secs(15.1)), readAt(start, 15, 4, "b")); ok {
		t.Fatal("version 4 acknowledged after 5")
	}
	if got := f.Running(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("running %q", got)
	}
}

func TestATerminatingWorkerIsDoneOnceTheLeaseCarriesAnEmptyEntrysVersion(t *testing.T) {
	start := time.Now()
	f := NewFence(DefaultPermit, start)
	f.Answered(start.Add(secs(0.1)), readAt(start, 0, 1, "a"))
	one, three := uint64(1), uint64(3)
	if f.Done(&one) {
		t.Fatal("done before SIGTERM")
	}
	f.Terminate()
	if f.Done(&one) {
		t.Fatal("done with version 1, which lists a job")
	}
	if v, ok := f.Answered(start.Add(secs(1.1)), readAt(start, 1, 3)); !ok || v != 3 {
		t.Fatalf("ack %d %v", v, ok)
	}
	if f.Done(&one) || f.Done(nil) {
		t.Fatal("done before the Lease carries version 3")
	}
	if !f.Done(&three) {
		t.Fatal("not done")
	}
}

func TestAWorkerWhoseLastAcknowledgementHadNoJobsIsDoneAtSigterm(t *testing.T) {
	start := time.Now()
	f := NewFence(DefaultPermit, start)
	f.Answered(start.Add(secs(0.1)), readAt(start, 0, 7))
	seven := uint64(7)
	f.Terminate()
	if !f.Done(&seven) {
		t.Fatal("not done")
	}
}

func TestAPermitLapsesExactlyFAfterTheSend(t *testing.T) {
	start := time.Now()
	f := NewFence(2*time.Second, start)
	f.Answered(start.Add(secs(1.9)), readAt(start, 0, 1, "a"))
	if f.Tick(start.Add(secs(1.999))) || len(f.Running()) != 1 {
		t.Fatal("lapsed early")
	}
	if !f.Tick(start.Add(secs(2))) || len(f.Running()) != 0 {
		t.Fatal("not lapsed at the send plus F")
	}
	if f.Tick(start.Add(secs(3))) {
		t.Fatal("lapsed twice")
	}
}

func TestAShedReadIsTriedAgainAQuarterToHalfThePermitLater(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFence(DefaultPermit, start)
	shedAt := start.Add(15 * time.Second)
	f.Shed(shedAt, 0.5)
	if got, want := f.NextRead().Sub(shedAt), 11250*time.Millisecond; got != want {
		t.Fatalf("next read %v after the shed read, want %v", got, want)
	}
	failedAt := f.NextRead()
	f.Failed(failedAt)
	if got := f.NextRead().Sub(failedAt); got > RetryCap(DefaultPermit) {
		t.Fatalf("a failure after a shed read waits %v, more than %v", got, RetryCap(DefaultPermit))
	}
}
