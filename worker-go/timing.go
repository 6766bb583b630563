package swarmworker

import "time"

// The fence arithmetic every worker and the operator share (protocol/src/fence.rs,
// protocol/vectors/fence.json). A worker runs a job only while a quorum GET of its own
// ConfigMap, sent less than the permit F ago on its monotonic clock, showed the job in its
// entry.

// DefaultPermit is the permit F unless SWARM_PERMIT_SECONDS says otherwise.
const DefaultPermit = 30 * time.Second

// MinPermit is the shortest permit a worker accepts: reads every second, readiness within
// 1.2 s.
const MinPermit = 2 * time.Second

// ClockRateBound is how far any clock's rate may stray from real time, the operator's and the
// workers': 2 %, thousands of times what an NTP-disciplined clock drifts.
const ClockRateBound = 0.02

// ReadInterval is how often a worker sends a fence read when nothing fails: every half of the
// permit, so a read that fails leaves half of it to retry in.
func ReadInterval(permit time.Duration) time.Duration {
	return permit / 2
}

// ReadTimeout is how long a worker waits for the answer to a fence read before it gives the read
// up: the permit, after which its answer could renew nothing. A read is never abandoned sooner:
// each worker has one read in flight and sends the next only once it has ended, so an API
// server slow to answer gets fewer reads, never more.
func ReadTimeout(permit time.Duration) time.Duration {
	return permit
}

// ReadyWithin is how long after the send of its last successful read a worker answers ready:
// three fifths of the permit, so one read may be late by a fifth of it before the kubelet marks
// the pod NotReady.
func ReadyWithin(permit time.Duration) time.Duration {
	return permit * 3 / 5
}

// RetryCap is the longest wait between retries of a failed read: an eighth of the permit, so a
// worker cut off tries four times or more before its permit lapses.
func RetryCap(permit time.Duration) time.Duration {
	return permit / 8
}

// RetryDelay is the wait before the retry that follows failures failed reads in a row (1 or
// more): 1 s, doubling, held to [RetryCap].
func RetryDelay(failures uint, permit time.Duration) time.Duration {
	doubled := time.Second << (min(max(failures, 1), 16) - 1)
	return min(doubled, RetryCap(permit))
}

// ShedRetryDelay is the wait before the next read after the API server shed one (429 Too Many
// Requests): a quarter of the permit plus draw (in [0, 1)) times another quarter. Workers
// turned away together come back spread out and at about their resting rate, not at the quick
// retries of a failure that would keep an overloaded server overloaded; one more read still
// fits before the permit lapses.
func ShedRetryDelay(permit time.Duration, draw float64) time.Duration {
	draw = min(max(draw, 0), 1)
	return permit/4 + time.Duration(float64(permit/4)*draw)
}

// RevokeWait is how long the operator waits, on its own clock, from the answer to a write that
// revoked jobs from a worker with this permit until it may grant them elsewhere without an
// acknowledgement: permit (1 + ρ) / (1 − ρ) + grace. The worker uses it nowhere; it is here
// so that one package states the whole arithmetic.
func RevokeWait(permit, grace time.Duration) time.Duration {
	return time.Duration(float64(permit)*(1+ClockRateBound)/(1-ClockRateBound)) + grace
}
