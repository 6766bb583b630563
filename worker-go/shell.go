package swarmworker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
)

// shell is the event loop's state and what it drives: the pure [Handoff] and [Fence], the
// application's jobs, the report, and the channels to and from the background goroutines.
type shell struct {
	core    *Handoff
	fence   *Fence
	permit  Permit // what the jobs check before each unit of work: held until the fence's deadline
	held    bool   // whether the permit is held, and until when
	until   time.Time
	jobs    Jobs
	report  *reporter
	ack     *latest[uint64]   // to the Lease keeper: the version to acknowledge
	written *latest[written]  // from the Lease keeper: its last success
	config  *latest[Observed] // from the ConfigMap follower: the version observed last
	reads   chan readAnswer   // the answers of the reads issued after a renewal while fenced

	shutdown   <-chan struct{}
	configMaps coreclient.ConfigMapInterface
	settings   Settings
	log        *slog.Logger
	tasks      *sync.WaitGroup
}

// readAnswer is the answer of a ConfigMap GET the fence asked for.
type readAnswer struct {
	read  uint64
	found *Observed // nil: no ConfigMap yet
	err   error
}

var (
	errNoConfig = errors.New("no usable worker config in the ConfigMap")
	errReadLate = errors.New("no answer in time")
)

// spawn runs task in a goroutine Run waits for.
func (s *shell) spawn(task func()) {
	s.tasks.Add(1)
	go func() {
		defer s.tasks.Done()
		task()
	}()
}

// fenceFirst fences the worker if its deadline has passed, before anything else is handled:
// nothing may start a job on an old renewal.
func (s *shell) fenceFirst(ctx context.Context) {
	if at, ok := s.fence.Deadline(); ok && !time.Now().Before(at) {
		s.checkFence(ctx)
	}
}

// checkFence fences the worker if its last renewal is too old; true if it is fenced now.
func (s *shell) checkFence(ctx context.Context) bool {
	s.syncFence(ctx)
	if s.fence.Check(time.Now()) {
		s.followFence()
		s.fenceJobs(ctx)
	}
	return !s.fence.IsLive()
}

// followFence moves the jobs' permit to the fence's deadline; a report line says when a
// renewal extended it for running jobs.
func (s *shell) followFence() {
	until, held := s.fence.Deadline()
	if held == s.held && until.Equal(s.until) {
		return
	}
	s.held, s.until = held, until
	s.permit.set(until, held)
	if running := s.core.Running(); held && len(running) > 0 {
		s.report.write(s.applied(), running)
	}
}

// syncFence brings the fence and the acknowledgement up to date with the Lease keeper's last
// success (the loop may have been busy with a stop meanwhile); a fenced worker renewed in time
// reads the ConfigMap again.
func (s *shell) syncFence(ctx context.Context) {
	w, ok := s.written.get()
	if !ok {
		return
	}
	if w.acked != nil {
		if version, ok := s.core.Acknowledged(); !ok || version != *w.acked {
			s.core.Acked(*w.acked)
			s.log.Info("acknowledged", "version", *w.acked)
		}
	}
	renewal := s.fence.Renewed(w.sent, w.streak, time.Now())
	s.followFence()
	if renewal.NewlyFenced {
		s.fenceJobs(ctx)
	}
	if renewal.Read != 0 {
		s.readLater(ctx, renewal.Read)
	}
}

// readLater GETs the ConfigMap for the fence's read and hands the answer to the event loop:
// the entry, or none when there is no ConfigMap yet (whatever the watch delivers later was
// written after this read); a config without a usable entry, or no answer in time, is a
// failed read.
func (s *shell) readLater(ctx context.Context, read uint64) {
	s.spawn(func() {
		get, cancel := context.WithTimeout(ctx, s.settings.FenceAfter())
		defer cancel()
		answer := readAnswer{read: read}
		configMap, err := s.configMaps.Get(get, s.settings.OwnConfigMap(), metav1.GetOptions{})
		switch {
		case err == nil:
			if observed, ok := observe(configMap, s.settings.PodName, s.log); ok {
				answer.found = &observed
			} else {
				answer.err = errNoConfig
			}
		case apierrors.IsNotFound(err):
		case errors.Is(get.Err(), context.DeadlineExceeded):
			answer.err = errReadLate
		default:
			answer.err = err
		}
		select {
		case s.reads <- answer:
		case <-ctx.Done():
		}
	})
}

// readAfresh takes the answer to a read after a fence: the fence lifts if it is the awaited
// one, in time, and the entry read is applied.
func (s *shell) readAfresh(ctx context.Context, answer readAnswer) {
	if answer.err != nil {
		s.log.Warn("cannot read the ConfigMap again; still fenced", "error", answer.err)
		s.fence.ReadFailed(answer.read)
		s.followFence()
		return
	}
	if !s.fence.Read(answer.read, time.Now()) {
		return
	}
	s.followFence()
	if answer.found == nil {
		s.log.Info("Lease renewed; no ConfigMap yet: running nothing until it comes")
		return
	}
	s.log.Info("Lease renewed and config read again: running", "version", answer.found.Version)
	s.handle(ctx, *answer.found)
}

// handleLatest applies the version the watch delivered last, unless fenced: then only a read
// issued after a renewal counts.
func (s *shell) handleLatest(ctx context.Context) {
	if observed, ok := s.config.take(); ok && s.fence.IsLive() {
		s.handle(ctx, observed)
	}
}

// handle applies one observed version and hands its acknowledgement to the Lease keeper.
func (s *shell) handle(ctx context.Context, observed Observed) {
	s.apply(ctx, observed)
	if version, ok := s.core.TakeAck(); ok {
		s.ack.set(version)
	}
}

// apply applies one observed version: stops, a report line, then (unless terminating or
// fenced) a report line and starts.
func (s *shell) apply(ctx context.Context, observed Observed) {
	change, ok := s.core.Offer(observed.Version, observed.Jobs)
	if !ok {
		s.log.Debug("version ignored", "version", observed.Version)
		return
	}
	version := change.Version
	if !change.IsEmpty() {
		s.log.Info("applying", "version", version, "stop", change.Stop, "start", change.Start)
	}
	if len(change.Stop) > 0 {
		s.stop(ctx, change.Stop)
		s.report.write(&version, s.core.Running())
	}
	// A SIGTERM during the stops: the event loop stops the rest and nothing starts.
	if s.signalled() {
		return
	}
	// The stops may have taken long, or the process been paused: no start on an old renewal.
	if s.checkFence(ctx) {
		return
	}
	start := s.core.Starting()
	if len(start) == 0 {
		return
	}
	s.report.write(&version, s.core.Running())
	for _, job := range start {
		s.jobs.Start(ctx, job, s.permit)
		s.core.Started(job)
	}
}

// stop stops jobs one at a time, each confirmed to the handoff once it no longer runs.
func (s *shell) stop(ctx context.Context, jobs []string) {
	ctx = context.WithoutCancel(ctx)
	for _, job := range jobs {
		s.jobs.Stop(ctx, job)
		s.core.Stopped(job)
	}
}

// fenceJobs stops every job: the Lease may look expired to the operator, which then hands
// them on.
func (s *shell) fenceJobs(ctx context.Context) {
	stopped := s.core.Fence()
	s.stop(ctx, stopped)
	if len(stopped) > 0 {
		s.report.write(s.applied(), s.core.Running())
	}
	s.log.Warn("fenced: the Lease was not renewed in time; no job runs until it is renewed and the config read again", "stopped", stopped)
}

// terminate stops every job on the shutdown signal; nothing starts again.
func (s *shell) terminate(ctx context.Context) {
	s.log.Info("terminating: stopping every job")
	stopped := s.core.Terminate()
	s.stop(ctx, stopped)
	if len(stopped) > 0 {
		s.report.write(s.applied(), s.core.Running())
	}
}

// abort stops every job when Run's context ends.
func (s *shell) abort(ctx context.Context) {
	s.log.Info("canceled: stopping every job")
	stopped := s.core.Terminate()
	s.stop(ctx, stopped)
	if len(stopped) > 0 {
		s.report.write(s.applied(), s.core.Running())
	}
}

// signalled reports whether the shutdown signal has come, handled or not.
func (s *shell) signalled() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// applied is the version applied, for a report line.
func (s *shell) applied() *uint64 {
	if version, ok := s.core.Applied(); ok {
		return &version
	}
	return nil
}
