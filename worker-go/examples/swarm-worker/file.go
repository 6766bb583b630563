package main

import (
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	swarmworker "github.com/swarm-operator/swarm-operator/worker-go"
)

// assignment is what the worker found in the config, compared between polls so only changes
// are logged.
type assignment struct {
	kind    assignmentKind
	err     string   // unreadable: why
	version uint64   // noEntry, jobs: the config version
	since   uint64   // jobs: the version at which this worker's job set last changed
	jobs    []string // jobs: in spec order
}

type assignmentKind int

const (
	noFile     assignmentKind = iota // the ConfigMap is optional in the pod spec: no file yet
	unreadable                       // the file cannot be read as a worker config
	noEntry                          // the config has no entry for this pod
	hasJobs                          // this pod's jobs
)

func (a assignment) equal(b assignment) bool {
	return a.kind == b.kind && a.err == b.err && a.version == b.version && a.since == b.since && slices.Equal(a.jobs, b.jobs)
}

// readAssignment is pod's assignment in a config.yml text (nil: no file).
func readAssignment(text *string, pod string) assignment {
	if text == nil {
		return assignment{kind: noFile}
	}
	config, err := swarmworker.ParseConfig(*text)
	if err != nil {
		return assignment{kind: unreadable, err: err.Error()}
	}
	workload, ok := config.Entry(pod)
	if !ok {
		return assignment{kind: noEntry, version: config.Version}
	}
	return assignment{kind: hasJobs, version: config.Version, since: workload.Version, jobs: workload.Jobs}
}

func logAssignment(log *slog.Logger, a assignment, pod string) {
	switch a.kind {
	case noFile:
		log.Info("no assignment yet: no config file; waiting", "pod", pod)
	case unreadable:
		log.Warn("no assignment yet: config unreadable; waiting", "pod", pod, "error", a.err)
	case noEntry:
		log.Info("no assignment yet: no entry for this pod; waiting", "pod", pod, "version", a.version)
	case hasJobs:
		log.Info("running jobs", "pod", pod, "version", a.version, "since", a.since, "count", len(a.jobs), "jobs", a.jobs)
	}
}

// followFile polls the mounted file and logs this pod's entry when it changes, until SIGTERM.
func followFile(a args, log *slog.Logger) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	tick := time.NewTicker(a.pollEvery())
	defer tick.Stop()
	var last *assignment
	for {
		// A ConfigMap volume swaps the file atomically: a plain read sees old or new content.
		var text *string
		if content, err := os.ReadFile(a.config); err == nil {
			read := string(content)
			text = &read
		}
		now := readAssignment(text, a.podName)
		if last == nil || !last.equal(now) {
			if last != nil {
				log.Info("config changed; reloading", "pod", a.podName)
			}
			logAssignment(log, now, a.podName)
			writeReport(a, now, log)
			last = &now
		}
		select {
		case <-tick.C:
		case <-signals:
			// The jobs end with the process: say so before exiting, within the grace period.
			writeReport(a, assignment{kind: noFile}, log)
			log.Info("stopping", "pod", a.podName)
			return
		}
	}
}

// writeReport appends the report line of an assignment (what runs from now on), when there is
// a report.
func writeReport(a args, now assignment, log *slog.Logger) {
	if a.report == "" {
		return
	}
	line := swarmworker.ReportLine{Pod: a.podName, UID: a.podUID, Running: []string{}, At: swarmworker.Timestamp(time.Now())}
	switch now.kind {
	case hasJobs:
		line.Version, line.Running = &now.version, now.jobs
	case noEntry:
		line.Version = &now.version
	}
	if err := swarmworker.AppendReport(a.report, line); err != nil {
		log.Warn("cannot write the worker report", "path", a.report, "error", err)
	}
}
