package swarmworker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Jobs is what the application does with its jobs. The worker calls these from one goroutine,
// one at a time, never for a job in a state it is not in: Stop only for a job it started.
type Jobs interface {
	// Start starts job and returns once it is launched (it then runs until stopped). The job
	// checks permit before each unit of work and does none while it does not hold: that keeps
	// a resumed process from working on a job the operator gave to another worker before this
	// worker's fence stops it. ctx is the one given to [Worker.Run].
	Start(ctx context.Context, job string, permit Permit)
	// Stop stops job and returns only once it no longer runs anywhere in this pod, since the
	// acknowledgement that follows lets the operator grant it to another pod. ctx carries the
	// values of the one given to [Worker.Run] but is never canceled: a stop must finish.
	Stop(ctx context.Context, job string)
}

// ExitReason is why [Worker.Run] returned.
type ExitReason int

const (
	// Acknowledged: terminating, the worker acknowledged Exit.Version, in which its own
	// entry has no jobs.
	Acknowledged ExitReason = iota + 1
	// DeadlineReached: terminating, no version without jobs was acknowledged within the
	// termination deadline.
	DeadlineReached
	// Canceled: the context given to Run ended; every job was stopped.
	Canceled
)

// String names the reason.
func (r ExitReason) String() string {
	switch r {
	case Acknowledged:
		return "Acknowledged"
	case DeadlineReached:
		return "DeadlineReached"
	case Canceled:
		return "Canceled"
	}
	return fmt.Sprintf("ExitReason(%d)", int(r))
}

// Exit is how [Worker.Run] ended.
type Exit struct {
	// Reason is why it returned.
	Reason ExitReason
	// Version is the config version acknowledged last, with Acknowledged.
	Version uint64
}

// Worker runs an application's [Jobs] through the protocol; make one with [New].
type Worker struct {
	settings Settings
	client   kubernetes.Interface
	log      *slog.Logger
	shutdown <-chan struct{}
}

// Settings are the settings the worker runs with.
func (w *Worker) Settings() Settings {
	return w.settings
}

// Run runs jobs as the pool's config says until terminated: it applies each new version of
// this pod's entry (stops first, then starts) and acknowledges it on the Lease. When the Lease
// has not been renewed for the fence limit it stops every job, and runs them again only once
// the Lease is renewed and the ConfigMap read afresh. On the shutdown signal (SIGTERM or
// SIGINT unless [WithShutdown] says otherwise) it stops every job, starts none again, and
// returns once it has acknowledged a version whose entry has no jobs, or at the termination
// deadline. A Worker runs once.
func (w *Worker) Run(ctx context.Context, jobs Jobs) Exit {
	shutdown := w.shutdown
	if shutdown == nil {
		signals, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		shutdown = signals.Done()
	}
	ctx, cancel := context.WithCancel(ctx)
	var tasks sync.WaitGroup
	// The background goroutines end with Run.
	defer tasks.Wait()
	defer cancel()
	s := w.start(ctx, jobs, shutdown, &tasks)
	return s.run(ctx)
}

// start writes the report's first line and starts the Lease keeper and the ConfigMap
// follower; it returns the event loop's state.
func (w *Worker) start(ctx context.Context, jobs Jobs, shutdown <-chan struct{}, tasks *sync.WaitGroup) *shell {
	settings := w.settings
	permit := newPermit()
	report := &reporter{path: settings.Report, pod: settings.PodName, uid: settings.PodUID, permit: permit, log: w.log}
	report.write(nil, nil)
	start := time.Now()
	s := &shell{
		core:       NewHandoff(),
		fence:      NewFence(settings.FenceAfter(), start),
		permit:     permit,
		jobs:       jobs,
		report:     report,
		ack:        newLatest[uint64](),
		written:    newLatest[written](),
		config:     newLatest[Observed](),
		reads:      make(chan readAnswer, 1),
		shutdown:   shutdown,
		configMaps: w.client.CoreV1().ConfigMaps(settings.Namespace),
		settings:   settings,
		log:        w.log,
		tasks:      tasks,
	}
	keeper := &leaseKeeper{
		leases:   w.client.CoordinationV1().Leases(settings.Namespace),
		holder:   Holder{Pod: settings.PodName, Namespace: settings.Namespace, UID: settings.PodUID, Pool: settings.Pool},
		duration: settings.LeaseDuration,
		timeout:  settings.FenceAfter(),
		start:    start,
		ack:      s.ack,
		written:  s.written,
		log:      w.log,
	}
	follower := &source{configMaps: s.configMaps, name: settings.OwnConfigMap(), pod: settings.PodName, out: s.config, log: w.log}
	w.log.Info("following the worker's own ConfigMap", "configMap", follower.name, "lease", settings.PodName)
	s.spawn(func() { keeper.keep(ctx) })
	s.spawn(func() { follower.follow(ctx) })
	return s
}

// run is the event loop: the fence first when it is due, then whatever comes.
func (s *shell) run(ctx context.Context) Exit {
	terminate := s.shutdown
	var deadline <-chan time.Time
	fenceTimer := time.NewTimer(time.Hour)
	defer fenceTimer.Stop()
	for {
		var fenceDue <-chan time.Time
		fenceTimer.Stop()
		if at, ok := s.fence.Deadline(); ok {
			fenceTimer.Reset(time.Until(at))
			fenceDue = fenceTimer.C
		}
		select {
		case <-ctx.Done():
			s.abort(ctx)
			return Exit{Reason: Canceled}
		case <-fenceDue:
			s.checkFence(ctx)
		case <-s.written.changed():
			s.fenceFirst(ctx)
			s.syncFence(ctx)
		case answer := <-s.reads:
			s.fenceFirst(ctx)
			s.readAfresh(ctx, answer)
			// What the watch delivered while fenced was ignored; now live, the newest of it
			// applies (an older version than the one read is ignored as a replay).
			s.handleLatest(ctx)
		case <-s.config.changed():
			s.fenceFirst(ctx)
			s.handleLatest(ctx)
		case <-terminate:
			terminate = nil
			s.fenceFirst(ctx)
			s.terminate(ctx)
			deadline = time.After(s.settings.TerminationDeadline)
		case <-deadline:
			s.log.Warn("termination deadline reached without an acknowledgement")
			return Exit{Reason: DeadlineReached}
		}
		if version, ok := s.core.Acknowledged(); ok && s.core.Done() {
			s.log.Info("terminated: acknowledged a version without jobs", "version", version)
			return Exit{Reason: Acknowledged, Version: version}
		}
	}
}
