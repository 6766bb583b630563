package swarmworker

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// One hold per worker for an API server that sheds load (429 Too Many Requests, API Priority
// and Fairness): a 429 on any of the worker's requests (fence read, watch, Lease read or write)
// holds all of them until a random moment F/4 to F/2 after that answer, then lets one request
// at a time through (the probe: the fence read when one waits, as it is what keeps the jobs
// running) until one is answered without a 429. With a backoff per kind of request, each came
// back on its own schedule and an overloaded API server was sent about three times what one
// hold sends (docs/worker-protocol.md, "One hold per worker").

// passKind is whether a request went while the worker was not shed, or as the probe.
type passKind int

const (
	freePass passKind = iota
	probePass
)

// outcome is how a request that went through the gate ended.
type outcome int

const (
	// answeredOutcome: the API server answered with anything but a 429.
	answeredOutcome outcome = iota
	// shedOutcome: the API server answered 429.
	shedOutcome
	// failedOutcome: no answer (a broken connection, a timeout) or given up.
	failedOutcome
)

// gate is the shed state with no I/O, driven by explicit times.
type gate struct {
	held      bool      // shed: nothing before heldUntil, then one probe at a time
	heldUntil time.Time // with held
	probing   bool      // a probe is in flight
	// Fence reads waiting to be sent: the probe is theirs, or a Lease write or a watch could
	// take every probe while the jobs' permits lapse.
	fencesWaiting int
}

// turn is what a request that asks to be sent is told.
type turn struct {
	send bool     // send now, as kind
	kind passKind // with send
	// Not sent: ask again at until, or, when it is zero, once the probe in flight has ended.
	until time.Time
}

// ask is the turn of a request that asks to be sent at now; fence for a fence read.
func (g *gate) ask(now time.Time, fence bool) turn {
	switch {
	case !g.held:
		return turn{send: true, kind: freePass}
	case now.Before(g.heldUntil):
		return turn{until: g.heldUntil}
	case g.probing, !fence && g.fencesWaiting > 0:
		return turn{}
	}
	g.probing = true
	return turn{send: true, kind: probePass}
}

// ended records how a request of kind ended; shedUntil is the hold a 429 asks for. A hold only
// lengthens. A probe answered without a 429 ends the hold; one that failed otherwise or was
// given up lets the next request probe. A request sent before the hold began ends nothing,
// since a 429 came after it was sent.
func (g *gate) ended(kind passKind, how outcome, shedUntil time.Time) {
	if kind == probePass {
		g.probing = false
	}
	switch {
	case how == shedOutcome:
		if !g.held || shedUntil.After(g.heldUntil) {
			g.heldUntil = shedUntil
		}
		g.held = true
	case how == answeredOutcome && kind == probePass:
		g.held, g.heldUntil = false, time.Time{}
	}
}

// shed is the gate shared by a worker's requests.
type shed struct {
	mu     sync.Mutex
	gate   gate
	probed chan struct{} // closed, and replaced, when a probe ends or a fence read stops waiting
	permit time.Duration // scales the hold
	draw   func() float64
}

func newShed(permit time.Duration) *shed {
	return &shed{probed: make(chan struct{}), permit: permit, draw: rand.Float64}
}

// admit waits until a request may be sent, or ctx ends; the pass must be ended with
// [pass.done] once the request has its answer or is given up.
func (s *shed) admit(ctx context.Context) (*pass, error) {
	return s.admitAs(ctx, false)
}

// admitFenceRead is [shed.admit] for a fence read, which is the probe once a hold ends: it
// counts as waiting from its call until it is admitted or given up.
func (s *shed) admitFenceRead(ctx context.Context) (*pass, error) {
	s.mu.Lock()
	s.gate.fencesWaiting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.gate.fencesWaiting--
		// A request that deferred to this fence read may probe now.
		s.wake()
	}()
	return s.admitAs(ctx, true)
}

func (s *shed) admitAs(ctx context.Context, fence bool) (*pass, error) {
	for {
		s.mu.Lock()
		t := s.gate.ask(time.Now(), fence)
		probed := s.probed
		s.mu.Unlock()
		if t.send {
			return &pass{shed: s, kind: t.kind}, nil
		}
		if err := wait(ctx, t.until, probed); err != nil {
			return nil, err
		}
	}
}

// wait waits until until (zero: no time) or probed is closed, or ctx ends.
func wait(ctx context.Context, until time.Time, probed <-chan struct{}) error {
	var due <-chan time.Time
	if !until.IsZero() {
		timer := time.NewTimer(time.Until(until))
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-due:
	case <-probed:
	}
	return nil
}

// pass is leave to send one request.
type pass struct {
	shed *shed
	kind passKind
}

// done records the request's end: err is what it returned (nil: answered).
func (p *pass) done(err error) {
	s := p.shed
	how := outcomeOf(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	var until time.Time
	if how == shedOutcome {
		until = time.Now().Add(ShedRetryDelay(s.permit, s.draw()))
	}
	s.gate.ended(p.kind, how, until)
	if p.kind == probePass {
		s.wake()
	}
}

// wake wakes the requests waiting for a probe; with s.mu held.
func (s *shed) wake() {
	close(s.probed)
	s.probed = make(chan struct{})
}

// outcomeOf is how a request that returned err ended.
func outcomeOf(err error) outcome {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return answeredOutcome
	case apierrors.IsTooManyRequests(err):
		return shedOutcome
	case errors.As(err, &status):
		return answeredOutcome
	}
	return failedOutcome
}

// withoutShedRetries makes the clients built from config hand a 429 to the worker at once.
// client-go retries a 429 carrying Retry-After (as API Priority and Fairness sends it) up to
// 10 times inside one call (rest.Request's maxRetries), unseen by the gate: an overloaded API
// server would get up to 11 requests where the hold sends one. Without the header the 429 is
// still a 429 (apierrors.IsTooManyRequests), returned on the first answer.
func withoutShedRetries(config *rest.Config) {
	config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return dropShedRetryAfter{next}
	})
}

// dropShedRetryAfter removes Retry-After from the 429 answers of next.
type dropShedRetryAfter struct{ next http.RoundTripper }

func (d dropShedRetryAfter) RoundTrip(request *http.Request) (*http.Response, error) {
	response, err := d.next.RoundTrip(request)
	if err == nil && response.StatusCode == http.StatusTooManyRequests {
		response.Header.Del("Retry-After")
	}
	return response, err
}
