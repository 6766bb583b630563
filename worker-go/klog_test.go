package swarmworker

import (
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// klogLine is the line of logs that holds message, or "".
func klogLine(logs, message string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `msg="`+message+`"`) {
			return line
		}
	}
	return ""
}

func TestKlogLinesGoToTheLoggerOfTheRunStartedLast(t *testing.T) {
	api := newFakeAPI(t)
	started := func(w *runningWorker) func() bool {
		return func() bool { return strings.Contains(w.logs.String(), "serving readiness on") }
	}
	first := runWorker(t, WithClient(api.client(t)))
	eventually(t, 5*time.Second, "the first Run to start", started(first))
	klog.Info("a klog line for the first worker")
	line := klogLine(first.logs.String(), "a klog line for the first worker")
	if !strings.Contains(line, "level=INFO") || !strings.Contains(line, "logger=klog") {
		t.Fatalf("the worker's logger did not get klog's line as it should: %q", line)
	}

	second := runWorker(t, WithClient(api.client(t)))
	eventually(t, 5*time.Second, "the second Run to start", started(second))
	klog.ErrorS(nil, "a klog error for the second worker", "job", "a")
	line = klogLine(second.logs.String(), "a klog error for the second worker")
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "job=a") {
		t.Fatalf("the second worker's logger did not get klog's line as it should: %q", line)
	}
	if klogLine(first.logs.String(), "a klog error for the second worker") != "" {
		t.Fatal("the first worker's logger got a line logged after the second Run started")
	}
}
