package swarmworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	// a resumed process from working on a job the operator may have granted to another worker
	// before this worker's timer stops it. ctx is the one given to [Worker.Run].
	Start(ctx context.Context, job string, permit Permit)
	// Stop stops job and returns only once it no longer runs anywhere in this pod, since the
	// acknowledgement that follows lets the operator grant it to another pod. Its permit has
	// lapsed already. ctx carries the values of the one given to [Worker.Run] but is never
	// canceled: a stop must finish.
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
	// Refused: the API server refused a request for the worker's own objects for good (Run
	// returns the [*RefusedError]); every job was stopped.
	Refused
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
	case Refused:
		return "Refused"
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
	health   net.Listener
}

// Settings are the settings the worker runs with.
func (w *Worker) Settings() Settings {
	return w.settings
}

// HealthAddr is the address the worker serves /readyz and /healthz on: the health address,
// with the port the system picked when it asked for port 0.
func (w *Worker) HealthAddr() net.Addr {
	return w.health.Addr()
}

// Run runs jobs as fence reads of the pod's own ConfigMap say until terminated. It reads every
// F/2 (at once on a watch event, sooner after a failure), runs exactly the jobs of its last
// read that still hold a permit (until the read's send plus F), stopping the jobs a read no
// longer lists before it starts new ones, and acknowledges each new version it runs exactly on
// its Lease. It serves readiness on [Worker.HealthAddr] and closes it when it returns. On the
// shutdown signal (SIGTERM or SIGINT unless [WithShutdown] says otherwise) it stops every job,
// answers not ready, starts no job again, and returns once it has acknowledged a version whose
// entry has no jobs, or at the termination deadline. A Worker runs once.
//
// Failed requests are retried, except a refusal retrying cannot cure: a 401 or 403 on a fence
// read or the watch of its ConfigMap, or on a read or write of its Lease (RBAC, or the Lease
// admission policy). Then Run stops every job and returns Exit{Reason: Refused} and a
// [*RefusedError] saying which request was refused, why, and what to fix; the error is nil
// otherwise. No job runs once Run has returned. A 429 (Too Many Requests) on any request holds
// all of them: nothing is sent until F/4 to F/2 after it, then one request at a time until one
// is answered without a 429.
//
// Run also sends klog's lines, and with them client-go's, to the worker's logger (see
// [WithLogger]) instead of stderr: klog's logger is set once per process, and its lines go to
// the logger of the Run started last.
func (w *Worker) Run(ctx context.Context, jobs Jobs) (Exit, error) {
	routeKlog(w.log)
	shutdown := w.shutdown
	if shutdown == nil {
		signals, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		shutdown = signals.Done()
	}
	var tasks sync.WaitGroup
	// The background goroutines and the health server end with Run.
	defer tasks.Wait()
	ctx, cancel := context.WithCancel(ctx)
	s := w.start(ctx, jobs, shutdown, &tasks)
	server := &http.Server{Handler: s.healthHandler(), ReadHeaderTimeout: 5 * time.Second}
	defer server.Close()
	defer cancel()
	w.log.Info("serving readiness on "+w.health.Addr().String(), "addr", w.health.Addr().String())
	s.spawn(func() {
		if err := server.Serve(w.health); !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("cannot serve readiness", "error", err)
		}
	})
	return s.run(ctx)
}

// start writes the report's first line and starts the Lease keeper and the watch; it returns
// the event loop's state.
func (w *Worker) start(ctx context.Context, jobs Jobs, shutdown <-chan struct{}, tasks *sync.WaitGroup) *shell {
	settings := w.settings
	report := &reporter{path: settings.Report, pod: settings.PodName, uid: settings.PodUID, log: w.log}
	report.write(nil, nil, time.Time{})
	events := make(chan struct{}, 1)
	s := &shell{
		fence:      NewFence(settings.Permit, time.Now()),
		jobs:       jobs,
		permits:    map[string]Permit{},
		ready:      newPermit(),
		report:     report,
		reads:      make(chan readAnswer, 1),
		events:     events,
		ack:        newLatest[uint64](),
		written:    newLatest[leaseWrite](),
		shed:       newShed(settings.Permit),
		shutdown:   shutdown,
		refusals:   newRefusals(),
		configMaps: w.client.CoreV1().ConfigMaps(settings.Namespace),
		settings:   settings,
		log:        w.log,
		tasks:      tasks,
	}
	keeper := &leaseKeeper{
		leases:   w.client.CoordinationV1().Leases(settings.Namespace),
		holder:   Holder{Pod: settings.PodName, Namespace: settings.Namespace, UID: settings.PodUID, Pool: settings.Pool},
		permit:   settings.Permit,
		ack:      s.ack,
		written:  s.written,
		refusals: s.refusals,
		shed:     s.shed,
		log:      w.log,
	}
	watch := &source{configMaps: s.configMaps, namespace: settings.Namespace, name: settings.OwnConfigMap(),
		events: events, refusals: s.refusals, shed: s.shed, log: w.log, retryCeiling: ReadInterval(settings.Permit)}
	w.log.Info("fenced by reads of the worker's own ConfigMap", "configMap", watch.name, "lease", settings.PodName,
		"permit", settings.Permit, "readEvery", settings.ReadEvery())
	s.spawn(func() { keeper.keep(ctx) })
	s.spawn(func() { watch.follow(ctx) })
	return s
}

// run is the event loop: lapsed permits first, then a read when one is due, then whatever
// comes.
func (s *shell) run(ctx context.Context) (Exit, error) {
	terminate := s.shutdown
	var deadline <-chan time.Time
	readTimer, lapseTimer := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	defer readTimer.Stop()
	defer lapseTimer.Stop()
	for {
		s.lapse(ctx)
		if !s.inFlight && !time.Now().Before(s.fence.NextRead()) {
			s.send(ctx)
		}
		var readDue, lapseDue <-chan time.Time
		if !s.inFlight {
			readTimer.Reset(time.Until(s.fence.NextRead()))
			readDue = readTimer.C
		}
		if until, ok := s.fence.Until(); ok {
			// A timer of its own, so that a hung request does not delay the stop.
			lapseTimer.Reset(time.Until(until))
			lapseDue = lapseTimer.C
		}
		select {
		case <-ctx.Done():
			s.abort(ctx)
			return Exit{Reason: Canceled}, nil
		case refused := <-s.refusals:
			s.refused(ctx, refused)
			return Exit{Reason: Refused}, refused
		case <-lapseDue:
		case <-readDue:
		case answer := <-s.reads:
			s.answered(ctx, answer)
		case <-s.events:
			if s.inFlight {
				s.watched = true
			} else {
				s.fence.Watched(time.Now())
			}
		case <-s.written.changed():
		case <-terminate:
			terminate = nil
			s.terminate(ctx)
			deadline = time.After(s.settings.TerminationDeadline)
		case <-deadline:
			s.log.Warn("termination deadline reached without an acknowledgement of a version without jobs")
			return Exit{Reason: DeadlineReached}, nil
		}
		if written, ok := s.written.take(); ok && s.fence.Done(written.acked) {
			s.log.Info("terminated: acknowledged a version without jobs", "version", *written.acked)
			return Exit{Reason: Acknowledged, Version: *written.acked}, nil
		}
	}
}
