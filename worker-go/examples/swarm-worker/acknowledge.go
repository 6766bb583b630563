package main

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	swarmworker "github.com/swarm-operator/swarm-operator/worker-go"
)

// acknowledging runs the acknowledged handoff: the library drives the jobs, the fence reads,
// the Lease and readiness.
func acknowledging(a args, log *slog.Logger) {
	worker, err := swarmworker.New(swarmworker.WithPodName(a.podName), swarmworker.WithLogger(log))
	if err != nil {
		log.Error("cannot start the worker", "error", err)
		os.Exit(2)
	}
	exit, err := worker.Run(context.Background(), &loggingJobs{log: log})
	if err != nil {
		// Refused for good (RBAC or the Lease admission policy): every job has stopped, and
		// the message says what to fix.
		log.Error("stopping: refused", "pod", a.podName, "error", err)
		os.Exit(1)
	}
	log.Info("stopping", "pod", a.podName, "exit", exit.Reason.String(), "version", exit.Version)
}

// loggingJobs runs each job as a goroutine that logs now and then until it is told to stop.
type loggingJobs struct {
	log     *slog.Logger
	mu      sync.Mutex
	running map[string]*loggingJob
}

type loggingJob struct {
	stop chan struct{}
	done chan struct{}
}

// Start launches job; each unit of work first checks the permit: after a pause, this goroutine
// may run before the worker's timer stops it.
func (j *loggingJobs) Start(_ context.Context, job string, permit swarmworker.Permit) {
	running := &loggingJob{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(running.done)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-running.stop:
				return
			case <-tick.C:
				if permit.Holds() {
					j.log.Info("working", "job", job)
				} else {
					j.log.Warn("not working: the permit has lapsed", "job", job)
				}
			}
		}
	}()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.running == nil {
		j.running = map[string]*loggingJob{}
	}
	j.running[job] = running
	j.log.Info("started", "job", job)
}

// Stop returns once job's goroutine has ended: that is what makes the acknowledgement that
// follows true.
func (j *loggingJobs) Stop(_ context.Context, job string) {
	j.mu.Lock()
	running, ok := j.running[job]
	delete(j.running, job)
	j.mu.Unlock()
	if !ok {
		return
	}
	close(running.stop)
	<-running.done
	j.log.Info("stopped", "job", job)
}
