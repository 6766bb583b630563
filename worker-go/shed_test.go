package swarmworker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	sendFree  = turn{send: true, kind: freePass}
	sendProbe = turn{send: true, kind: probePass}
	forProbe  = turn{}
)

func waitUntil(at time.Time) turn { return turn{until: at} }

func checkTurn(t *testing.T, g *gate, at time.Time, want turn) {
	t.Helper()
	checkAsk(t, g, at, false, want)
}

// checkAsk checks the turn of a request asking at at, a fence read if fence.
func checkAsk(t *testing.T, g *gate, at time.Time, fence bool, want turn) {
	t.Helper()
	if got := g.ask(at, fence); got != want {
		t.Fatalf("at %v (fence read %v): %+v, want %+v", at, fence, got, want)
	}
}

func TestAShedRequestHoldsEveryRequestThenLetsOneProbeThroughAtATime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := time.Second
	var g gate
	checkTurn(t, &g, t0, sendFree)
	checkTurn(t, &g, t0, sendFree) // not shed: no limit
	g.ended(freePass, shedOutcome, t0.Add(10*s))
	// Whatever asks, fence read, Lease write or watch, waits for the same hold.
	for range 3 {
		checkTurn(t, &g, t0.Add(s), waitUntil(t0.Add(10*s)))
	}
	checkTurn(t, &g, t0.Add(10*s), sendProbe)
	checkTurn(t, &g, t0.Add(10*s), forProbe)
	checkTurn(t, &g, t0.Add(11*s), forProbe)
	// The probe is shed too: all wait again.
	g.ended(probePass, shedOutcome, t0.Add(20*s))
	checkTurn(t, &g, t0.Add(11*s), waitUntil(t0.Add(20*s)))
	checkTurn(t, &g, t0.Add(20*s), sendProbe)
	// Answered without a 429: the hold ends for all.
	g.ended(probePass, answeredOutcome, time.Time{})
	checkTurn(t, &g, t0.Add(21*s), sendFree)
	checkTurn(t, &g, t0.Add(21*s), sendFree)
}

func TestARequestSentBeforeTheHoldEndsNothingAndAHoldOnlyLengthens(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := time.Second
	var g gate
	g.ended(freePass, shedOutcome, t0.Add(10*s))
	g.ended(freePass, answeredOutcome, time.Time{})
	checkTurn(t, &g, t0, waitUntil(t0.Add(10*s)))
	g.ended(freePass, shedOutcome, t0.Add(5*s))
	checkTurn(t, &g, t0, waitUntil(t0.Add(10*s)))
	g.ended(freePass, shedOutcome, t0.Add(12*s))
	checkTurn(t, &g, t0, waitUntil(t0.Add(12*s)))
}

func TestAProbeThatFailsOtherwiseOrIsGivenUpLetsTheNextRequestProbe(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var g gate
	g.ended(freePass, shedOutcome, t0)
	checkTurn(t, &g, t0, sendProbe)
	checkTurn(t, &g, t0, forProbe)
	g.ended(probePass, failedOutcome, time.Time{})
	checkTurn(t, &g, t0, sendProbe)
	checkTurn(t, &g, t0, forProbe)
	g.ended(probePass, answeredOutcome, time.Time{})
	checkTurn(t, &g, t0, sendFree)
}

func TestOnceAHoldEndsAWaitingFenceReadIsTheProbe(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := time.Second
	var g gate
	g.ended(freePass, shedOutcome, t0.Add(s))
	g.fencesWaiting = 1
	checkAsk(t, &g, t0, true, waitUntil(t0.Add(s)))
	// A Lease write or a watch defers to the fence read waiting; the fence read probes.
	checkAsk(t, &g, t0.Add(s), false, forProbe)
	checkAsk(t, &g, t0.Add(s), true, sendProbe)
	checkAsk(t, &g, t0.Add(s), true, forProbe)
	g.fencesWaiting = 0
	// The fence read is shed too; with none waiting, any request probes.
	g.ended(probePass, shedOutcome, t0.Add(2*s))
	checkAsk(t, &g, t0.Add(2*s), false, sendProbe)
}

func TestAnAnswerOtherThanA429IsAnAnswerAndNoAnswerIsAFailure(t *testing.T) {
	configMaps := schema.GroupResource{Resource: "configmaps"}
	cases := []struct {
		err  error
		want outcome
	}{
		{nil, answeredOutcome},
		{apierrors.NewNotFound(configMaps, "x"), answeredOutcome},
		{apierrors.NewInternalError(errors.New("etcd")), answeredOutcome},
		{apierrors.NewTooManyRequests("shed", 1), shedOutcome},
		{apierrors.NewGenericServerResponse(http.StatusTooManyRequests, "get", configMaps, "x", "", 0, false), shedOutcome},
		{&RefusedError{Err: apierrors.NewTooManyRequests("shed", 1)}, shedOutcome},
		{context.DeadlineExceeded, failedOutcome},
		{errors.New("connection refused"), failedOutcome},
	}
	for _, c := range cases {
		if got := outcomeOf(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOnceAProbeIsAnsweredTheWaitingRequestsGoAtOnce(t *testing.T) {
	s := newShed(80 * time.Millisecond)
	first, err := s.admit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first.done(apierrors.NewTooManyRequests("shed", 1))
	probe, err := s.admit(context.Background()) // after the 20 to 40 ms hold
	if err != nil || probe.kind != probePass {
		t.Fatalf("%+v, %v", probe, err)
	}
	admitted := make(chan time.Time, 2)
	for range 2 {
		go func() {
			if pass, err := s.admit(context.Background()); err == nil {
				admitted <- time.Now()
				pass.done(nil)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if len(admitted) > 0 {
		t.Fatal("a request went while the probe was in flight")
	}
	answeredAt := time.Now()
	probe.done(nil)
	for range 2 {
		select {
		case at := <-admitted:
			// Not woken by the answer, they would wait forever: no hold is left to end.
			if late := at.Sub(answeredAt); late > 500*time.Millisecond {
				t.Fatalf("a waiting request went %v after the probe's answer", late)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiting request did not go once the probe was answered")
		}
	}
}

func TestAWaitingRequestEndsWithItsContext(t *testing.T) {
	s := newShed(time.Hour)
	first, _ := s.admit(context.Background())
	first.done(apierrors.NewTooManyRequests("shed", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.admit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admit returned %v", err)
	}
}

// A Lease write waiting through a hold, and a fence read that came after it: the fence read is
// the probe, and the write goes once it is answered. Without the fence read's turn the write,
// which asked first, would probe and the jobs' permits would wait on it. Several rounds, as
// which of two requests woken by one hold's end asks first is the scheduler's choice; a round
// whose fence read a busy machine started only after the hold tests nothing and is left out.
func TestALeaseWriteWaitsForTheFenceReadToProbeFirst(t *testing.T) {
	tested := 0
	for round := range 10 {
		order, readInHold := writeThenFenceReadThroughAHold(t)
		if !readInHold {
			continue
		}
		tested++
		if !slices.Equal(order, []string{"read", "write"}) {
			t.Fatalf("round %d: sent %v", round, order)
		}
	}
	if tested < 3 {
		t.Fatalf("only %d rounds of 10 had the fence read ask within the hold", tested)
	}
}

// writeThenFenceReadThroughAHold is the order in which a Lease write, then a fence read 5 ms
// later, went through one hold of 200 ms, each answered 10 ms after it went; and whether the
// fence read asked before the hold ended.
func writeThenFenceReadThroughAHold(t *testing.T) ([]string, bool) {
	t.Helper()
	s := newShed(800 * time.Millisecond)
	s.draw = func() float64 { return 0 }
	first, err := s.admit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first.done(apierrors.NewTooManyRequests("shed", 1))
	heldUntil := s.gate.heldUntil
	var mu sync.Mutex
	var order []string
	send := func(name string, admit func(context.Context) (*pass, error)) {
		pass, err := admit(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		pass.done(nil)
	}
	var requests sync.WaitGroup
	requests.Go(func() { send("write", s.admit) })
	time.Sleep(5 * time.Millisecond)
	var readAsked time.Time
	requests.Go(func() {
		readAsked = time.Now()
		send("read", s.admitFenceRead)
	})
	requests.Wait()
	return order, readAsked.Before(heldUntil)
}

// Three kinds of request against an API server that sheds every one: with one gate they send
// about one request per hold (F/4 to F/2), where a backoff of their own each sent three.
func TestAWorkerTurnedAwaySendsOneRequestPerHoldWhateverItsKinds(t *testing.T) {
	const permit = 80 * time.Millisecond // holds of 20 to 40 ms
	s := newShed(permit)
	var sent atomic.Int64
	start := time.Now()
	var kinds sync.WaitGroup
	for range 3 {
		kinds.Go(func() {
			for time.Since(start) < 400*time.Millisecond {
				pass, err := s.admit(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				time.Sleep(time.Millisecond)
				pass.done(apierrors.NewTooManyRequests("shed", 1))
			}
		})
	}
	kinds.Wait()
	// The first three go before any answer; then one per hold of at least 20 ms, and a
	// straggler per kind that asked before the 400 ms ended.
	if n := sent.Load(); n < 4 || n > 3+20+3 {
		t.Fatalf("%d requests in 400 ms", n)
	}
}

// A worker started against an API server that sheds every request has a fence read, its Lease
// write and its watch to send: after the first answer it sends one request per hold, F/4 to F/2
// apart, whatever their kinds, and none of client-go's own retries; once the API server
// answers again it runs its jobs and acknowledges.
func TestAWorkerAnsweredOnly429sSendsOneRequestPerHoldAcrossItsKinds(t *testing.T) {
	// F/4 = 1.5 s, longer than the 1 s Retry-After client-go would wait before a retry.
	const permit = 6 * time.Second
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	api.shedAll(true)
	w := runWorker(t, WithClient(api.client(t)), WithPermit(permit))
	const shedFor = 9 * time.Second
	time.Sleep(shedFor)
	api.shedAll(false)
	shed := api.shedRequests()
	kinds := map[string]bool{}
	for _, request := range shed {
		kinds[request.request] = true
	}
	// All three start at once; whichever is answered first holds the others, which may wait
	// several holds for their turn as the probe.
	if len(kinds) < 2 {
		t.Fatalf("one kind of request only was shed: %s", timeline(shed))
	}
	// The requests sent before the first 429 was answered go at once (within 0.5 s on a busy
	// machine); every later one waits for a hold of at least F/4 after the one before it.
	const burst, slack = 500 * time.Millisecond, 100 * time.Millisecond
	first := 0
	for first < len(shed) && shed[first].at.Sub(shed[0].at) < burst {
		first++
	}
	for i := max(first, 1); i < len(shed); i++ {
		if gap := shed[i].at.Sub(shed[i-1].at); gap < permit/4-slack {
			t.Fatalf("%s sent %v after %s: within the hold of F/4 to F/2; all: %s", shed[i].request, gap, shed[i-1].request, timeline(shed))
		}
	}
	if most := first + int(shedFor/(permit/4)) + 1; len(shed) > most {
		t.Fatalf("%d requests shed in %v, more than %d: %s", len(shed), shedFor, most, timeline(shed))
	}
	eventually(t, 10*time.Second, "version 1 acknowledged once the API server answers", func() bool {
		acked, ok := api.acked()
		return ok && acked == 1
	})
	if running := w.jobs.running(); !slices.Equal(running, []string{"a"}) {
		t.Fatalf("running %v", running)
	}
}

// timeline is each request shed, with when it came after the first.
func timeline(shed []shedRequest) string {
	var lines []string
	for _, request := range shed {
		lines = append(lines, fmt.Sprintf("+%v %s", request.at.Sub(shed[0].at).Round(time.Millisecond), request.request))
	}
	return strings.Join(lines, ", ")
}

func TestAFenceReadHeldByTheGateCountsItsPermitFromWhenItLeaves(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	const permit = 400 * time.Millisecond // holds of 100 to 200 ms
	gate := newShed(permit)
	first, _ := gate.admit(context.Background())
	first.done(apierrors.NewTooManyRequests("shed", 1))
	gate.mu.Lock()
	heldUntil := gate.gate.heldUntil
	gate.mu.Unlock()
	var tasks sync.WaitGroup
	s := &shell{
		reads:      make(chan readAnswer, 1),
		refusals:   newRefusals(),
		configMaps: api.client(t).CoreV1().ConfigMaps("swarm-go"),
		settings:   Settings{PodName: testPod, Namespace: "swarm-go", ConfigMap: testConfigMap, Permit: permit},
		shed:       gate,
		tasks:      &tasks,
	}
	s.send(context.Background())
	defer tasks.Wait()
	select {
	case answer := <-s.reads:
		if answer.err != nil || !slices.Equal(answer.read.Jobs, []string{"a"}) {
			t.Fatalf("%+v", answer)
		}
		if answer.read.SentAt.Before(heldUntil) {
			t.Fatalf("the read counts from %v before the hold ended", heldUntil.Sub(answer.read.SentAt))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
}
