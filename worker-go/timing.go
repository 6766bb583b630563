package swarmworker

import "time"

// The Lease timing every worker shares (protocol/vectors/fence.json and timing.json). The
// defaults are a node's heartbeat: a 40 s Lease renewed every quarter of it.

// DefaultLeaseDuration is the Lease duration unless SWARM_LEASE_DURATION_SECONDS says
// otherwise.
const DefaultLeaseDuration = 40 * time.Second

// MinMargin is the least fence margin: room for stopping jobs and for clock rate drift.
const MinMargin = 2 * time.Second

// RenewInterval is how often a Lease of duration is renewed when nothing changes: a quarter of
// it, so a failed renewal is retried twice more before the fence stops the jobs. An
// acknowledgement is written at once, whatever the interval.
func RenewInterval(duration time.Duration) time.Duration {
	return duration / 4
}

// DefaultMargin is the fence margin for a Lease duration: max(2 s, duration / 5).
func DefaultMargin(duration time.Duration) time.Duration {
	return max(MinMargin, duration/5)
}

// FenceLimit is how long after its last successful Lease write was sent a worker may run
// jobs: duration - margin, the margin held to half the duration so a short Lease still
// leaves time for two renewals.
func FenceLimit(duration, margin time.Duration) time.Duration {
	return duration - min(margin, duration/2)
}
