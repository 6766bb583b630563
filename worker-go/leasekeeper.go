package swarmworker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// written is a successful Lease write.
type written struct {
	acked  *uint64   // the acknowledged version the Lease now carries
	sent   time.Time // when the accepted request was sent: the renewal counts from here
	streak time.Time // when the current run of renewals without a gap of the limit began
}

// leaseKeeper writes the worker's Lease: at once, whenever the version to acknowledge changes,
// and every quarter of the duration after the last success (sooner after a failure).
type leaseKeeper struct {
	leases   coordinationclient.LeaseInterface
	holder   Holder
	duration time.Duration
	timeout  time.Duration // each write is given up after this (the fence limit)
	start    time.Time     // counts as the first renewal, for the streak
	ack      *latest[uint64]
	written  *latest[written]
	log      *slog.Logger
}

// errWriteTimedOut is a write answered too late to keep the worker from fencing.
var errWriteTimedOut = errors.New("no answer in time")

// keep writes the Lease until ctx ends, publishing each success on written.
func (k *leaseKeeper) keep(ctx context.Context) {
	renewEvery := RenewInterval(k.duration)
	var current *coordinationv1.Lease
	var backoff retry
	last, streak := k.start, k.start
	for ctx.Err() == nil {
		version, ok := k.ack.take()
		var want *uint64
		if ok {
			want = &version
		}
		sent, err := k.writeInTime(ctx, &current, want)
		wait := renewEvery
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			backoff = retry{}
			if sent.Sub(last) >= k.timeout {
				streak = sent
			}
			last = sent
			k.written.set(written{acked: want, sent: sent, streak: streak})
		default:
			// The Lease read is kept: a write that timed out but landed makes the next one
			// conflict, which reads it again; a re-read on every failure would double the
			// requests of every worker when the API server is slowest.
			wait = backoff.next(renewEvery)
			k.log.Warn("cannot write the worker Lease", "lease", k.holder.Pod, "error", err, "retryIn", wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-k.ack.changed():
			// An acknowledgement is written at once, whatever the renewal timer says.
		}
		timer.Stop()
	}
}

// writeInTime is one write, given up after the timeout.
func (k *leaseKeeper) writeInTime(ctx context.Context, current **coordinationv1.Lease, acked *uint64) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	sent, err := k.write(ctx, current, acked)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return sent, errWriteTimedOut
	}
	return sent, err
}

// write is one read-modify-write, retried from a fresh read when the Lease changed since it
// was read (a conflict, or it was created or deleted meanwhile, or a write that timed out
// landed after all). It returns when the accepted request was sent.
func (k *leaseKeeper) write(ctx context.Context, current **coordinationv1.Lease, acked *uint64) (time.Time, error) {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		if *current == nil {
			read, err := k.leases.Get(ctx, k.holder.Pod, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return time.Time{}, err
			default:
				*current = read
			}
		}
		lease := RenewedLease(*current, k.holder, acked, k.duration, time.Now())
		sent := time.Now()
		var stored *coordinationv1.Lease
		var err error
		if *current == nil {
			stored, err = k.leases.Create(ctx, lease, metav1.CreateOptions{})
		} else {
			stored, err = k.leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err == nil {
			*current = stored
			return sent, nil
		}
		changed := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		if !changed || attempt >= attempts {
			return time.Time{}, err
		}
		k.log.Debug("Lease changed since read; retrying", "lease", k.holder.Pod)
		*current = nil
	}
}
