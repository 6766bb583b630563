package swarmworker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
)

// shell is the event loop's state and what it drives: the pure [Fence], the application's
// jobs and their permits, readiness, the report, and the channels to and from the background
// goroutines (the fence reads, the watch, the Lease keeper).
type shell struct {
	fence    *Fence
	jobs     Jobs
	permits  map[string]Permit // the jobs started and not stopped, each with its own permit
	until    time.Time         // the deadline the permits were last extended to
	ready    Permit            // what /readyz answers: held until ReadyWithin after a read's send
	report   *reporter
	reads    chan readAnswer     // the answer of the fence read in flight
	inFlight bool                // a fence read is in flight: no other is sent
	watched  bool                // a watch event came while a read was in flight
	events   chan struct{}       // from the watch: read at once
	ack      *latest[uint64]     // to the Lease keeper: the version to acknowledge
	written  *latest[leaseWrite] // from the Lease keeper: its last success
	shed     *shed               // shared with the Lease keeper and the watch

	shutdown   <-chan struct{}
	refusals   refusals // from every request: a refusal that ends Run
	configMaps coreclient.ConfigMapInterface
	settings   Settings
	log        *slog.Logger
	tasks      *sync.WaitGroup
}

// readAnswer is the answer to one fence read.
type readAnswer struct {
	read Read
	err  error
}

// spawn runs task in a goroutine Run waits for.
func (s *shell) spawn(task func()) {
	s.tasks.Add(1)
	go func() {
		defer s.tasks.Done()
		task()
	}()
}

// send sends a fence read once the API server no longer sheds the worker's requests: a GET
// with no resourceVersion, which the API server answers from etcd with a quorum read. The
// permit counts from the send, taken after any hold and before the request so that
// client-side delays only shorten it. A read is given up only once its answer could renew
// nothing (ReadTimeout): a slow API server gets no more reads than a quick one.
func (s *shell) send(ctx context.Context) {
	s.inFlight = true
	s.spawn(func() {
		pass, err := s.shed.admitFenceRead(ctx)
		if err != nil {
			return // Run is over
		}
		get, cancel := context.WithTimeout(ctx, ReadTimeout(s.settings.Permit))
		defer cancel()
		sent := time.Now()
		configMap, err := s.configMaps.Get(get, s.settings.OwnConfigMap(), metav1.GetOptions{})
		pass.done(err)
		var answer readAnswer
		switch {
		case err == nil:
			answer.read, answer.err = readEntry(configMap, s.settings.PodName)
		case apierrors.IsNotFound(err):
			// No ConfigMap: no jobs.
		default:
			if refused := refusal(err, "get", "ConfigMap", s.settings.Namespace, s.settings.OwnConfigMap()); refused != nil {
				// The read stays in flight: no other is sent, and Run ends.
				s.refusals.report(refused)
				return
			}
			answer.err = err
		}
		answer.read.SentAt = sent
		select {
		case s.reads <- answer:
		case <-ctx.Done():
		}
	})
}

// readEntry is what a ConfigMap read shows pod: no jobs without a config.yml; a config.yml
// that cannot be read is a failed read, which gives no permit.
func readEntry(configMap *corev1.ConfigMap, pod string) (Read, error) {
	text, ok := configMap.Data[ConfigKey]
	if !ok {
		return Read{}, nil
	}
	observed, err := ParseEntry(text, pod)
	if err != nil {
		return Read{}, fmt.Errorf("the ConfigMap's %s is unusable: %w", ConfigKey, err)
	}
	return Read{Version: &observed.Version, Jobs: observed.Jobs}, nil
}

// answered applies the answer to the fence read in flight, then hands its acknowledgement,
// if any, to the Lease keeper.
func (s *shell) answered(ctx context.Context, answer readAnswer) {
	s.inFlight = false
	now := time.Now()
	if answer.err != nil {
		if apierrors.IsTooManyRequests(answer.err) {
			s.fence.Shed(now, rand.Float64())
		} else {
			s.fence.Failed(now)
		}
		s.log.Warn("fence read failed", "configMap", s.settings.OwnConfigMap(), "error", answer.err,
			"retryIn", s.fence.NextRead().Sub(now))
		return
	}
	version, ack := s.fence.Answered(now, answer.read)
	if s.watched {
		// The read was sent before the event came, and may not show what it announced.
		s.watched = false
		s.fence.Watched(now)
	}
	if until, ok := s.fence.ReadyUntil(); ok {
		s.ready.extend(until)
	}
	if late := now.Sub(answer.read.SentAt); late >= s.settings.Permit {
		s.log.Warn("fence read answered after the permit; it gives none", "answeredAfter", late)
	}
	s.apply(ctx)
	if ack {
		s.ack.set(version)
	}
}

// apply makes the jobs that run those of the fence: it stops the jobs it no longer lists and
// waits until each has stopped, then extends the others' permits and starts the new ones.
func (s *shell) apply(ctx context.Context) {
	target := s.fence.Running()
	var drop []string
	for _, job := range s.running() {
		if !slices.Contains(target, job) {
			drop = append(drop, job)
		}
	}
	if len(drop) > 0 {
		s.log.Info("stopping", "version", logged(s.fence.Version()), "jobs", drop)
		s.stop(ctx, drop)
		s.report.write(s.fence.Version(), s.running(), s.until)
	}
	// The stops may have taken long, or the process been paused: nothing is extended or
	// started on a permit that has lapsed meanwhile.
	if s.lapse(ctx) {
		return
	}
	until, held := s.fence.Until()
	if !held {
		return
	}
	var start []string
	for _, job := range target {
		if permit, ok := s.permits[job]; ok {
			permit.extend(until)
		} else {
			start = append(start, job)
		}
	}
	if len(start) == 0 && until.Equal(s.until) {
		return
	}
	s.until = until
	for _, job := range start {
		permit := newPermit()
		permit.extend(until)
		s.permits[job] = permit
	}
	// Written before the starts, so that the report never shows a job as not running while
	// it may run.
	s.report.write(s.fence.Version(), s.running(), until)
	if len(start) > 0 {
		s.log.Info("starting", "version", logged(s.fence.Version()), "jobs", start)
	}
	for _, job := range start {
		s.jobs.Start(ctx, job, s.permits[job])
	}
}

// lapse stops every job if their permit has lapsed (no fence read succeeded for F since the
// send of the last one that showed them); true when it did.
func (s *shell) lapse(ctx context.Context) bool {
	if !s.fence.Tick(time.Now()) {
		return false
	}
	stopped := s.running()
	s.log.Warn("permit lapsed: no fence read succeeded within the permit; stopping every job", "jobs", stopped, "permit", s.settings.Permit)
	s.stop(ctx, stopped)
	s.report.write(s.fence.Version(), s.running(), time.Time{})
	return true
}

// stop ends the permits of jobs at once, then stops them one at a time, each forgotten once
// Stop has returned.
func (s *shell) stop(ctx context.Context, jobs []string) {
	ctx = context.WithoutCancel(ctx)
	for _, job := range jobs {
		s.permits[job].revoke()
	}
	for _, job := range jobs {
		s.jobs.Stop(ctx, job)
		delete(s.permits, job)
	}
}

// stopAll stops every job and reports it.
func (s *shell) stopAll(ctx context.Context) {
	if running := s.running(); len(running) > 0 {
		s.stop(ctx, running)
		s.report.write(s.fence.Version(), s.running(), time.Time{})
	}
}

// terminate answers SIGTERM: not ready, every job stopped, and none started again.
func (s *shell) terminate(ctx context.Context) {
	s.log.Info("terminating: stopping every job")
	s.fence.Terminate()
	s.ready.revoke()
	s.stopAll(ctx)
}

// abort stops every job when Run's context ends.
func (s *shell) abort(ctx context.Context) {
	s.log.Info("canceled: stopping every job")
	s.ready.revoke()
	s.stopAll(ctx)
}

// refused stops every job when the API server refused a request for good.
func (s *shell) refused(ctx context.Context, refused *RefusedError) {
	s.log.Error("refused: stopping every job", "error", refused)
	s.ready.revoke()
	s.stopAll(ctx)
}

// running are the jobs started and not stopped, sorted.
func (s *shell) running() []string {
	return slices.Sorted(maps.Keys(s.permits))
}

// healthHandler answers the kubelet's probes: /readyz while the last successful fence read is
// recent enough and the worker does not terminate, /healthz while the process serves.
func (s *shell) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.ready.Holds() {
			fmt.Fprintln(w, "ok")
			return
		}
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// logged is a version for a log line: the number, or null.
func logged(version *uint64) any {
	if version == nil {
		return nil
	}
	return *version
}
