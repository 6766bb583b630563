package swarmworker

import (
	"testing"
	"time"
)

const testLimit = 8 * time.Second

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// liveFrom is a fence that renewed and read at start (read 1): live.
func liveFrom(t *testing.T, start time.Time) *Fence {
	t.Helper()
	f := NewFence(testLimit, start)
	if r := f.Renewed(start, start, start); r.Read != 1 {
		t.Fatalf("renewal %+v", r)
	}
	if !f.Read(1, start) {
		t.Fatal("read 1 did not lift the fence")
	}
	return f
}

func wantRenewal(t *testing.T, got, want Renewal) {
	t.Helper()
	if got != want {
		t.Fatalf("renewal %+v, want %+v", got, want)
	}
}

func TestANewProcessRunsNothingBeforeItsFirstRenewalAndAReadAfterIt(t *testing.T) {
	start := time.Now()
	f := NewFence(testLimit, start)
	if f.IsLive() {
		t.Fatal("its start is no renewal the operator saw")
	}
	if _, ok := f.Deadline(); ok {
		t.Fatal("a deadline while fenced")
	}
	if f.Check(start.Add(secs(1))) {
		t.Fatal("fenced already")
	}
	wantRenewal(t, f.Renewed(start.Add(secs(0.5)), start.Add(secs(0.5)), start.Add(secs(0.6))), Renewal{Read: 1})
	if f.IsLive() {
		t.Fatal("live before the read")
	}
	if !f.Read(1, start.Add(secs(0.7))) {
		t.Fatal("the read did not lift the fence")
	}
	if at, _ := f.Deadline(); !at.Equal(start.Add(secs(0.5) + testLimit)) {
		t.Fatalf("deadline %v", at.Sub(start))
	}
}

func TestAWorkerRenewingInTimeStaysLive(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	if f.Check(start.Add(secs(7.9))) {
		t.Fatal("fenced early")
	}
	wantRenewal(t, f.Renewed(start.Add(secs(2.5)), start, start.Add(secs(7.9))), Renewal{})
	if at, _ := f.Deadline(); !at.Equal(start.Add(secs(10.5))) {
		t.Fatalf("deadline %v", at.Sub(start))
	}
	if f.Check(start.Add(secs(10))) || !f.IsLive() {
		t.Fatal("fenced")
	}
}

func TestNoRenewalWithinTheLimitFencesOnce(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	if !f.Check(start.Add(testLimit)) {
		t.Fatal("not fenced at the limit")
	}
	if f.IsLive() || f.Check(start.Add(secs(20))) {
		t.Fatal("fenced twice, or live")
	}
}

func TestTheSendTimeCountsNotTheAnswerTime(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	// Sent at 1 s, answered at 6 s: the worker may run until 9 s, not 14 s.
	wantRenewal(t, f.Renewed(start.Add(secs(1)), start, start.Add(secs(6))), Renewal{})
	if !f.Check(start.Add(secs(9))) {
		t.Fatal("not fenced at 9 s")
	}
}

func TestRenewalsMissedByABusyReaderCountIfTheyCameWithoutAGap(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	wantRenewal(t, f.Renewed(start.Add(secs(20)), start, start.Add(secs(20.1))), Renewal{})
	// A run that began at 30 s after a gap: expired in between.
	wantRenewal(t, f.Renewed(start.Add(secs(40)), start.Add(secs(30)), start.Add(secs(40.1))), Renewal{NewlyFenced: true, Read: 2})
}

func TestARenewalAnsweredAfterTheLimitFencesEvenWithoutACheck(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	wantRenewal(t, f.Renewed(start.Add(secs(1)), start, start.Add(secs(30))), Renewal{NewlyFenced: true})
	if f.IsLive() {
		t.Fatal("live")
	}
}

func TestARenewalSentAfterAGapLongerThanTheLimitFencesThenAsksForARead(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	// Paused from 1 s to 30 s: the first write after the pause succeeds before any check.
	wantRenewal(t, f.Renewed(start.Add(secs(30)), start.Add(secs(30)), start.Add(secs(30.1))), Renewal{NewlyFenced: true, Read: 2})
	if f.IsLive() || !f.Read(2, start.Add(secs(30.2))) || !f.IsLive() {
		t.Fatal("the read did not lift the fence")
	}
}

func TestAFenceLiftsOnlyAfterARenewalAndThenTheReadItAskedFor(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	f.Check(start.Add(secs(9)))
	if f.Read(0, start.Add(secs(9.5))) {
		t.Fatal("no read was asked for")
	}
	renewal := f.Renewed(start.Add(secs(10)), start.Add(secs(10)), start.Add(secs(10.1)))
	if renewal.NewlyFenced || renewal.Read == 0 {
		t.Fatalf("renewal %+v", renewal)
	}
	wantRenewal(t, f.Renewed(start.Add(secs(11)), start.Add(secs(11)), start.Add(secs(11.1))), Renewal{}) // one read at a time
	if f.Read(renewal.Read+1, start.Add(secs(11.2))) || f.IsLive() {
		t.Fatal("not the awaited read")
	}
	if !f.Read(renewal.Read, start.Add(secs(11.3))) {
		t.Fatal("the awaited read did not lift the fence")
	}
	if at, _ := f.Deadline(); !at.Equal(start.Add(secs(19))) {
		t.Fatalf("deadline %v", at.Sub(start))
	}
}

func TestAReadAnsweredAfterTheRenewalExpiredAgainKeepsTheFence(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	f.Check(start.Add(secs(9)))
	read := f.Renewed(start.Add(secs(10)), start.Add(secs(10)), start.Add(secs(10))).Read
	if read == 0 || f.Read(read, start.Add(secs(18))) || f.IsLive() {
		t.Fatal("a late read lifted the fence")
	}
	if r := f.Renewed(start.Add(secs(18.5)), start.Add(secs(18.5)), start.Add(secs(18.6))); r.Read != read+1 {
		t.Fatalf("renewal %+v", r)
	}
}

func TestAFailedReadWaitsForTheNextRenewal(t *testing.T) {
	start := time.Now()
	f := liveFrom(t, start)
	f.Check(start.Add(secs(9)))
	read := f.Renewed(start.Add(secs(10)), start.Add(secs(10)), start.Add(secs(10))).Read
	f.ReadFailed(read)
	if f.Read(read, start.Add(secs(10.5))) {
		t.Fatal("a failed read lifted the fence")
	}
	wantRenewal(t, f.Renewed(start.Add(secs(11)), start.Add(secs(11)), start.Add(secs(11))), Renewal{Read: read + 1})
}

func TestTheMarginIsAtLeastTwoSecondsAFifthOfTheDurationAndAtMostHalf(t *testing.T) {
	for _, c := range []struct{ duration, margin, limit time.Duration }{
		{secs(10), DefaultMargin(secs(10)), secs(8)},
		{secs(30), DefaultMargin(secs(30)), secs(24)},
		{secs(2), DefaultMargin(secs(2)), secs(1)},
		{secs(3), DefaultMargin(secs(3)), secs(1.5)},
		{secs(10), secs(9), secs(5)},
	} {
		if got := FenceLimit(c.duration, c.margin); got != c.limit {
			t.Errorf("FenceLimit(%v, %v) = %v, want %v", c.duration, c.margin, got, c.limit)
		}
	}
}
