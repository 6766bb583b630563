package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	swarmworker "github.com/swarm-operator/swarm-operator/worker-go"
)

const config = "version: 3\nworkloads:\n  swarm-worker-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  swarm-worker-1:\n    version: 1\n    jobs: []\n"

func TestAWorkerFindsItsOwnJobsAndVersion(t *testing.T) {
	text := config
	if got := readAssignment(&text, "swarm-worker-0"); got.kind != hasJobs || got.version != 3 || got.since != 3 || !slices.Equal(got.jobs, []string{"a", "b"}) {
		t.Fatalf("%+v", got)
	}
	if got := readAssignment(&text, "swarm-worker-1"); got.kind != hasJobs || got.since != 1 || len(got.jobs) != 0 {
		t.Fatalf("%+v", got)
	}
}

func TestAWorkerWithoutFileOrEntryWaits(t *testing.T) {
	text, bad := config, "{{{ not yaml"
	if got := readAssignment(nil, "swarm-worker-0"); got.kind != noFile {
		t.Fatalf("%+v", got)
	}
	if got := readAssignment(&text, "swarm-worker-7"); got.kind != noEntry || got.version != 3 {
		t.Fatalf("%+v", got)
	}
	if got := readAssignment(&bad, "swarm-worker-0"); got.kind != unreadable {
		t.Fatalf("%+v", got)
	}
}

func TestAStoppedJobHasEndedWhenStopReturns(t *testing.T) {
	jobs := &loggingJobs{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	jobs.Start(context.Background(), "a", swarmworker.Permit{})
	done := jobs.running["a"].done
	jobs.Stop(context.Background(), "a")
	select {
	case <-done:
	default:
		t.Fatal("the job still runs")
	}
	if len(jobs.running) != 0 {
		t.Fatal("still listed")
	}
	jobs.Stop(context.Background(), "never-started")
}

func TestTheModeDefaultsToAcknowledgeWithAPodUID(t *testing.T) {
	t.Setenv("POD_UID", "")
	t.Setenv("SWARM_WORKER_MODE", "")
	a, err := parseArgs([]string{"--pod-name", "w-0"})
	if err != nil || a.mode != "file" || a.config != "/app/config/config.yml" || a.pollSeconds != 2 {
		t.Fatalf("%+v, %v", a, err)
	}
	t.Setenv("POD_UID", "u-1")
	if a, err := parseArgs([]string{"--pod-name", "w-0"}); err != nil || a.mode != "acknowledge" {
		t.Fatalf("%+v, %v", a, err)
	}
	if _, err := parseArgs([]string{"--pod-name", "w-0", "--mode", "other"}); err == nil {
		t.Fatal("an unknown mode accepted")
	}
	t.Setenv("POD_NAME", "")
	if _, err := parseArgs(nil); err == nil {
		t.Fatal("no pod name accepted")
	}
}
