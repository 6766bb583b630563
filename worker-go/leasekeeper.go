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

// leaseWrite is a successful Lease write: the acknowledged version it carries (nil: none, the
// write at start).
type leaseWrite struct {
	acked *uint64
}

// leaseKeeper writes the worker's Lease when the worker starts and on each acknowledgement,
// and at no other time: nothing is written to stay a member. A failed write is retried after
// 1 s, doubling up to F/2, with jitter, and one the API server shed (429) once the worker's
// hold lets it; it never stops a job, only permits do. A refusal (a 401 or 403) is not
// retried: the keeper reports it, and Run stops every job and returns.
type leaseKeeper struct {
	leases   coordinationclient.LeaseInterface
	holder   Holder
	permit   time.Duration // the Lease's leaseDurationSeconds
	ack      *latest[uint64]
	written  *latest[leaseWrite]
	refusals refusals
	shed     *shed // holds every write while the worker is shed
	log      *slog.Logger
}

// keep writes the Lease until ctx ends, publishing each success on written, or until a request
// is refused for good, which it reports.
func (k *leaseKeeper) keep(ctx context.Context) {
	var current *coordinationv1.Lease
	var backoff retry
	var want *uint64
	due := true // the write at start
	for ctx.Err() == nil {
		if version, ok := k.ack.take(); ok && (want == nil || *want != version) {
			want, due = &version, true
		}
		if !due {
			select {
			case <-ctx.Done():
			case <-k.ack.changed():
			}
			continue
		}
		pass, err := k.shed.admit(ctx)
		if err != nil {
			return
		}
		// The hold may have been long: write the newest acknowledgement.
		if version, ok := k.ack.take(); ok {
			want = &version
		}
		err = k.writeInTime(ctx, &current, want)
		pass.done(err)
		var refused *RefusedError
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsTooManyRequests(err):
			k.log.Warn("the API server shed the Lease write; writing it once the worker's hold ends", "lease", k.holder.Pod)
			continue
		case errors.As(err, &refused):
			k.refusals.report(refused)
			return
		case err == nil:
			backoff, due = retry{}, false
			k.written.set(leaseWrite{acked: want})
			if want != nil {
				k.log.Info("acknowledged", "version", *want)
			}
			continue
		}
		// The Lease read is kept: a write that timed out but landed makes the next one
		// conflict, which reads it again; a re-read on every failure would double the
		// requests of every worker when the API server is slowest.
		wait := backoff.next(ReadInterval(k.permit))
		k.log.Warn("cannot write the worker Lease", "lease", k.holder.Pod, "error", err, "retryIn", wait)
		sleep(ctx, wait)
	}
}

// writeInTime is one write, given up after F/2: by then the next one is due anyway.
func (k *leaseKeeper) writeInTime(ctx context.Context, current **coordinationv1.Lease, acked *uint64) error {
	ctx, cancel := context.WithTimeout(ctx, ReadInterval(k.permit))
	defer cancel()
	return k.write(ctx, current, acked)
}

// write is one read-modify-write, retried from a fresh read when the Lease changed since it
// was read (a conflict, or it was created or deleted meanwhile, or a write that timed out
// landed after all).
func (k *leaseKeeper) write(ctx context.Context, current **coordinationv1.Lease, acked *uint64) error {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		if *current == nil {
			read, err := k.leases.Get(ctx, k.holder.Pod, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return k.failed(err, "get")
			default:
				*current = read
			}
		}
		lease := RenewedLease(*current, k.holder, acked, k.permit, time.Now())
		var stored *coordinationv1.Lease
		var err error
		verb := "update"
		if *current == nil {
			verb = "create"
			stored, err = k.leases.Create(ctx, lease, metav1.CreateOptions{})
		} else {
			stored, err = k.leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err == nil {
			*current = stored
			return nil
		}
		changed := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		if !changed || attempt >= attempts {
			return k.failed(err, verb)
		}
		k.log.Debug("Lease changed since read; retrying", "lease", k.holder.Pod)
		*current = nil
	}
}

// failed is err, or the [*RefusedError] it is when retrying cannot cure it.
func (k *leaseKeeper) failed(err error, verb string) error {
	if refused := refusal(err, verb, "Lease", k.holder.Namespace, k.holder.Pod); refused != nil {
		return refused
	}
	return err
}
