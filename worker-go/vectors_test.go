package swarmworker

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The protocol's test vectors (../protocol/vectors/), read here as by the Rust crate
// (protocol/tests/vectors.rs and worker/src/settings.rs) and the Python worker
// (test_protocol_vectors.py): what this
// package writes and reads is exactly what they say.

const vectorsDir = "../protocol/vectors"

// vectorFiles are the files the tests below read; TestEveryVectorFileIsRead fails on any
// other, so a new part of the contract cannot be left unchecked.
var vectorFiles = []string{"config.json", "fence.json", "lease.json", "names.json", "report.json", "settings.json", "slices.json"}

func readVectors(t *testing.T, file string, into any) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(vectorsDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(text, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestEveryVectorFileIsRead(t *testing.T) {
	found, err := filepath.Glob(filepath.Join(vectorsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, path := range found {
		names = append(names, filepath.Base(path))
	}
	if !slices.Equal(names, vectorFiles) {
		t.Fatalf("vector files %v, the tests read %v", names, vectorFiles)
	}
}

func TestVectorNames(t *testing.T) {
	var expected map[string]string
	readVectors(t, "names.json", &expected)
	ours := map[string]string{
		"VERSION_ANNOTATION":         VersionAnnotation,
		"PENDING_REFRESH_ANNOTATION": PendingRefreshAnnotation,
		"HANDOFF_ANNOTATION":         HandoffAnnotation,
		"SLOTS_ANNOTATION":           SlotsAnnotation,
		"AWAITING_ACK_ANNOTATION":    AwaitingAckAnnotation,
		"ACKED_VERSION_ANNOTATION":   AckedVersionAnnotation,
		"POOL_LABEL":                 PoolLabel,
		"MANAGED_BY_LABEL":           ManagedByLabel,
		"MANAGER":                    Manager,
		"STATEFULSET_POD_LABEL":      StatefulSetPodLabel,
		"DEPLOYMENT_POD_LABEL":       DeploymentPodLabel,
		"JOBS_SOURCE_LABEL":          JobsSourceLabel,
		"WORKER_LABEL":               WorkerLabel,
		"FENCED_AT_ANNOTATION":       FencedAtAnnotation,
		"CONFIG_KEY":                 ConfigKey,
		"INDEX_KEY":                  IndexKey,
	}
	if !reflect.DeepEqual(ours, expected) {
		t.Fatalf("names %v, vectors %v", ours, expected)
	}
}

func TestVectorConfig(t *testing.T) {
	type entry struct {
		Version uint64   `json:"version"`
		Jobs    []string `json:"jobs"`
	}
	var cases []struct {
		Name   string `json:"name"`
		Text   string `json:"text"`
		Pod    string `json:"pod"`
		Expect *entry `json:"expect"`
		// Refusal is what a refusal's message must name.
		Refusal string `json:"refusal"`
	}
	readVectors(t, "config.json", &cases)
	for _, c := range cases {
		observed, err := ParseEntry(c.Text, c.Pod)
		if err != nil && !strings.Contains(err.Error(), c.Refusal) {
			t.Errorf("%s: the refusal %q does not name %q", c.Name, err, c.Refusal)
		}
		var read *entry
		if err == nil {
			read = &entry{Version: observed.Version, Jobs: observed.Jobs}
		}
		if !reflect.DeepEqual(read, c.Expect) {
			t.Errorf("%s: read %+v (%v), want %+v", c.Name, read, err, c.Expect)
		}
	}
}

func TestVectorSlices(t *testing.T) {
	var slicesFile struct {
		Names []struct {
			ConfigMap string `json:"configMap"`
			Pod       string `json:"pod"`
			Expect    string `json:"expect"`
		} `json:"names"`
		Indexes []struct {
			Name   string `json:"name"`
			Text   string `json:"text"`
			Expect Index  `json:"expect"`
		} `json:"indexes"`
		Unusable []struct {
			Name    string `json:"name"`
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		} `json:"unusable"`
	}
	readVectors(t, "slices.json", &slicesFile)
	for _, c := range slicesFile.Names {
		if got := SliceName(c.ConfigMap, c.Pod); got != c.Expect {
			t.Errorf("SliceName(%q, %q) = %q, want %q", c.ConfigMap, c.Pod, got, c.Expect)
		}
		settings := Settings{ConfigMap: c.ConfigMap, PodName: c.Pod}
		if got := settings.OwnConfigMap(); got != c.Expect {
			t.Errorf("OwnConfigMap = %q, want %q", got, c.Expect)
		}
	}
	for _, c := range slicesFile.Indexes {
		index, err := ParseIndex(c.Text)
		if err != nil || !reflect.DeepEqual(index, c.Expect) {
			t.Errorf("%s: %+v (%v), want %+v", c.Name, index, err, c.Expect)
		}
		again, err := ParseIndex(c.Expect.Render())
		if err != nil || !reflect.DeepEqual(again, c.Expect) {
			t.Errorf("%s: rendered and read back %+v (%v)", c.Name, again, err)
		}
	}
	for _, c := range slicesFile.Unusable {
		if _, err := ParseIndex(c.Text); err == nil || !strings.Contains(err.Error(), c.Refusal) {
			t.Errorf("%s: refusal %v does not name %q", c.Name, err, c.Refusal)
		}
	}
}

func TestVectorLease(t *testing.T) {
	var cases []struct {
		Name            string                `json:"name"`
		Current         *coordinationv1.Lease `json:"current"`
		Holder          Holder                `json:"holder"`
		Acked           *uint64               `json:"acked"`
		DurationSeconds int64                 `json:"durationSeconds"`
		Now             time.Time             `json:"now"`
		Expect          any                   `json:"expect"`
	}
	readVectors(t, "lease.json", &cases)
	for _, c := range cases {
		lease := RenewedLease(c.Current, c.Holder, c.Acked, time.Duration(c.DurationSeconds)*time.Second, c.Now)
		text, err := json.Marshal(lease)
		if err != nil {
			t.Fatal(err)
		}
		var written any
		if err := json.Unmarshal(text, &written); err != nil {
			t.Fatal(err)
		}
		// Go's API types leave empty maps and lists out where serde writes {} or []: the same
		// object on the wire.
		if got, want := pruneEmpty(written), pruneEmpty(c.Expect); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, mustJSON(got), mustJSON(want))
		}
	}
}

// pruneEmpty is value without nulls, empty objects and empty lists, at any depth.
func pruneEmpty(value any) any {
	switch v := value.(type) {
	case map[string]any:
		out := map[string]any{}
		for key, item := range v {
			if item = pruneEmpty(item); item != nil {
				out[key] = item
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(v) == 0 {
			return nil
		}
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = pruneEmpty(item)
		}
		return out
	}
	return value
}

func mustJSON(value any) string {
	text, _ := json.Marshal(value)
	return string(text)
}

func TestVectorReport(t *testing.T) {
	var cases []struct {
		Name   string `json:"name"`
		Fields struct {
			Pod     string     `json:"pod"`
			UID     string     `json:"uid"`
			Version *uint64    `json:"version"`
			Running []string   `json:"running"`
			At      time.Time  `json:"at"`
			Until   *time.Time `json:"until"`
		} `json:"fields"`
		Line string `json:"line"`
	}
	readVectors(t, "report.json", &cases)
	for _, c := range cases {
		f := c.Fields
		line := ReportLine{Pod: f.Pod, UID: f.UID, Version: f.Version, Running: f.Running, At: Timestamp(f.At)}
		if f.Until != nil {
			line.Until = Timestamp(*f.Until)
		}
		if got := line.Render(); got != c.Line {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, got, c.Line)
		}
	}
}

// seconds is a vector's number of seconds as a duration, to the nanosecond.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// closeTo reports whether got is expect seconds, to the microsecond the vectors are written to.
func closeTo(got time.Duration, expect float64) bool {
	return math.Abs(got.Seconds()-expect) < 1e-6
}

type fenceVectors struct {
	DefaultPermitSeconds int64
	ClockRateBound       float64
	Timing               []struct {
		PermitSeconds      int64
		ReadEverySeconds   float64
		ReadTimeoutSeconds float64
		ReadyWithinSeconds float64
		RetrySeconds       []float64
		ShedRetrySeconds   [2]float64
		GraceSeconds       int64
		RevokeWaitSeconds  float64
	}
	Traces []struct {
		Name          string
		PermitSeconds int64
		Steps         []fenceStep
	}
}

type fenceStep struct {
	At      float64
	Event   string
	SentAt  *float64
	Version *uint64
	Jobs    []string
	Expect  struct {
		Running    []string
		Until      *float64
		Ready      bool
		Ack        *uint64
		NextReadAt float64
	}
}

func TestVectorFenceTiming(t *testing.T) {
	var vectors fenceVectors
	readVectors(t, "fence.json", &vectors)
	if DefaultPermit != time.Duration(vectors.DefaultPermitSeconds)*time.Second {
		t.Errorf("default permit %v, want %ds", DefaultPermit, vectors.DefaultPermitSeconds)
	}
	if ClockRateBound != vectors.ClockRateBound {
		t.Errorf("clock rate bound %v, want %v", ClockRateBound, vectors.ClockRateBound)
	}
	for _, c := range vectors.Timing {
		permit := time.Duration(c.PermitSeconds) * time.Second
		if got := ReadInterval(permit); !closeTo(got, c.ReadEverySeconds) {
			t.Errorf("permit %v: reads every %v, want %vs", permit, got, c.ReadEverySeconds)
		}
		if got := ReadTimeout(permit); !closeTo(got, c.ReadTimeoutSeconds) {
			t.Errorf("permit %v: read given up after %v, want %vs", permit, got, c.ReadTimeoutSeconds)
		}
		if got := ReadyWithin(permit); !closeTo(got, c.ReadyWithinSeconds) {
			t.Errorf("permit %v: ready within %v, want %vs", permit, got, c.ReadyWithinSeconds)
		}
		for i, expect := range c.RetrySeconds {
			if got := RetryDelay(uint(i+1), permit); !closeTo(got, expect) {
				t.Errorf("permit %v, %d failures: retry after %v, want %vs", permit, i+1, got, expect)
			}
		}
		if shortest, longest := ShedRetryDelay(permit, 0), ShedRetryDelay(permit, 1); !closeTo(shortest, c.ShedRetrySeconds[0]) || !closeTo(longest, c.ShedRetrySeconds[1]) {
			t.Errorf("permit %v: a shed read waits %v to %v, want %vs", permit, shortest, longest, c.ShedRetrySeconds)
		}
		grace := time.Duration(c.GraceSeconds) * time.Second
		if got := RevokeWait(permit, grace); !closeTo(got, c.RevokeWaitSeconds) {
			t.Errorf("permit %v, grace %v: revoke wait %v, want %vs", permit, grace, got, c.RevokeWaitSeconds)
		}
	}
}

// TestVectorFenceTraces replays each trace on a Fence, with the vectors' seconds as offsets
// from one instant, and checks every expected field after each step.
func TestVectorFenceTraces(t *testing.T) {
	var vectors fenceVectors
	readVectors(t, "fence.json", &vectors)
	if len(vectors.Traces) == 0 {
		t.Fatal("no traces")
	}
	base := time.Now()
	at := func(s float64) time.Time { return base.Add(seconds(s)) }
	for _, trace := range vectors.Traces {
		permit := time.Duration(trace.PermitSeconds) * time.Second
		var fence *Fence
		for i, step := range trace.Steps {
			where := fmt.Sprintf("%s, step %d (%s at %v)", trace.Name, i+1, step.Event, step.At)
			now := at(step.At)
			var ack *uint64
			switch step.Event {
			case "start":
				fence = NewFence(permit, now)
			case "read":
				if step.SentAt == nil {
					t.Fatalf("%s: no sentAt", where)
				}
				read := Read{SentAt: at(*step.SentAt), Version: step.Version, Jobs: step.Jobs}
				if version, ok := fence.Answered(now, read); ok {
					ack = &version
				}
			case "readFailed":
				fence.Failed(now)
			case "watch":
				fence.Watched(now)
			case "tick":
				fence.Tick(now)
			case "sigterm":
				fence.Terminate()
			default:
				t.Fatalf("%s: unknown event", where)
			}
			want := step.Expect
			if got := fence.Running(); !slices.Equal(got, want.Running) && len(got)+len(want.Running) > 0 {
				t.Errorf("%s: running %q, want %q", where, got, want.Running)
			}
			until, held := fence.Until()
			switch {
			case want.Until == nil && held:
				t.Errorf("%s: until %v, want none", where, until.Sub(base))
			case want.Until != nil && (!held || !closeTo(until.Sub(base), *want.Until)):
				t.Errorf("%s: until %v (%v), want %vs", where, until.Sub(base), held, *want.Until)
			}
			if got := fence.Ready(now); got != want.Ready {
				t.Errorf("%s: ready %v, want %v", where, got, want.Ready)
			}
			if !reflect.DeepEqual(ack, want.Ack) {
				t.Errorf("%s: acknowledged %v, want %v", where, logged(ack), logged(want.Ack))
			}
			if got := fence.NextRead().Sub(base); !closeTo(got, want.NextReadAt) {
				t.Errorf("%s: next read at %v, want %vs", where, got, want.NextReadAt)
			}
		}
	}
}

func TestVectorSettings(t *testing.T) {
	var file struct {
		Pod   map[string]string
		Cases []struct {
			Name        string
			Environment map[string]*string
			Error       string
			Settings    struct {
				OwnConfigMap       string
				PermitSeconds      float64
				ReadEverySeconds   float64
				ReadyWithinSeconds float64
				TerminationSeconds float64
				HealthAddr         string
			}
		}
	}
	readVectors(t, "settings.json", &file)
	for _, c := range file.Cases {
		env := maps.Clone(file.Pod)
		for name, value := range c.Environment {
			if value == nil {
				delete(env, name)
			} else {
				env[name] = *value
			}
		}
		settings, err := fromEnv(lookupIn(env)).complete()
		if c.Error != "" {
			if err == nil || !strings.Contains(err.Error(), c.Error) {
				t.Errorf("%s: error %v, want one naming %s", c.Name, err, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		want := c.Settings
		got := []any{settings.OwnConfigMap(), settings.Permit, settings.ReadEvery(), settings.ReadyWithin(),
			settings.TerminationDeadline, settings.HealthAddr}
		expected := []any{want.OwnConfigMap, seconds(want.PermitSeconds), seconds(want.ReadEverySeconds),
			seconds(want.ReadyWithinSeconds), seconds(want.TerminationSeconds), want.HealthAddr}
		if !reflect.DeepEqual(got, expected) {
			t.Errorf("%s: %v, want %v", c.Name, got, expected)
		}
	}
}

// podEnv is the downward API and pool variables of a pod.
func podEnv() map[string]string {
	return map[string]string{"POD_NAME": "w-0", "POD_NAMESPACE": "ns", "POD_UID": "u-1", "SWARM_POOL": "pool"}
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		value, ok := env[name]
		return value, ok
	}
}
