// Command swarm-worker is the example worker, in one of two modes (--mode, SWARM_WORKER_MODE);
// the Go counterpart of examples/swarm-worker.rs.
//
// acknowledge (the default when POD_UID, the downward API's metadata.uid, is set): a complete
// worker of the acknowledged handoff (rollout.policy: Acknowledge), built on the swarmworker
// package: it runs each job of its entry as a goroutine that logs, for as long as a fence read
// of its own ConfigMap (a quorum GET, every half of the permit) was sent less than the permit
// ago, stops and starts them as the reads show, acknowledges each new version on its Lease,
// and serves /readyz and /healthz for the kubelet. Its settings are the library's (POD_NAME,
// POD_NAMESPACE, POD_UID, SWARM_POOL, SWARM_CONFIG_MAP, SWARM_WORKER_REPORT,
// SWARM_PERMIT_SECONDS, SWARM_WORKER_HEALTH_ADDR, SWARM_TERMINATION_SECONDS); the renewing
// protocol's SWARM_LEASE_DURATION_SECONDS and SWARM_FENCE_MARGIN_SECONDS are refused.
//
// file (the default without POD_UID), for the rollout policies that deliver changes through
// the mounted file: it reads its own entry of the mounted config.yml, logs its jobs and the
// config version, reloads when the kubelet refreshes the file, and stops on SIGTERM. With
// SWARM_WORKER_REPORT set it appends the protocol's report line at start, at each change and
// on SIGTERM, as the library does.
//
//	POD_NAME=swarm-worker-0 go run ./examples/swarm-worker --config ./config.yml
//
// It exits with 2 when it cannot start (a missing or invalid setting, or a health address in
// use), with 1 when the API server refuses its requests for good (a 401 or 403: its RBAC, or
// the Lease admission policy).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// args are the command line, each flag defaulting to its environment variable.
type args struct {
	mode        string
	config      string
	podName     string
	pollSeconds uint64
	podUID      string
	report      string
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	a, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "swarm-worker:", err)
		os.Exit(2)
	}
	switch a.mode {
	case "acknowledge":
		acknowledging(a, log)
	case "file":
		followFile(a, log)
	}
}

func parseArgs(argv []string) (args, error) {
	var a args
	flags := flag.NewFlagSet("swarm-worker", flag.ExitOnError)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "Runs the jobs the operator assigned to this pod.\n\nUsage: swarm-worker [flags]\n\n")
		flags.PrintDefaults()
	}
	flags.StringVar(&a.mode, "mode", os.Getenv("SWARM_WORKER_MODE"),
		"how the worker learns its jobs: through the API with acknowledgements (acknowledge), or from the\nmounted file (file); by default acknowledge when POD_UID is set [env SWARM_WORKER_MODE]")
	flags.StringVar(&a.config, "config", envOr("CONFIG_PATH", "/app/config/config.yml"),
		"the mounted config file (file mode only) [env CONFIG_PATH]")
	flags.StringVar(&a.podName, "pod-name", os.Getenv("POD_NAME"),
		"this worker's pod name, <statefulset>-<ordinal> (required) [env POD_NAME]")
	poll, err := strconv.ParseUint(envOr("POLL_SECONDS", "2"), 10, 64)
	if err != nil {
		return a, fmt.Errorf("POLL_SECONDS is %q: expected a whole number of seconds", os.Getenv("POLL_SECONDS"))
	}
	flags.Uint64Var(&a.pollSeconds, "poll-seconds", poll, "how often to check the file for changes (file mode only) [env POLL_SECONDS]")
	flags.StringVar(&a.podUID, "pod-uid", os.Getenv("POD_UID"),
		"this pod's uid, for the report's lines (without it the mode is file) [env POD_UID]")
	flags.StringVar(&a.report, "report", os.Getenv("SWARM_WORKER_REPORT"),
		"where to append the report lines (file mode; the library reads it in acknowledge mode) [env SWARM_WORKER_REPORT]")
	if err := flags.Parse(argv); err != nil {
		return a, err
	}
	if flags.NArg() > 0 {
		return a, fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	if a.podName == "" {
		return a, fmt.Errorf("--pod-name (POD_NAME) is required")
	}
	switch a.mode {
	case "":
		a.mode = "file"
		if a.podUID != "" {
			a.mode = "acknowledge"
		}
	case "acknowledge", "file":
	default:
		return a, fmt.Errorf("--mode (SWARM_WORKER_MODE) is %q: expected acknowledge or file", a.mode)
	}
	return a, nil
}

func envOr(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok && value != "" {
		return value
	}
	return fallback
}

// pollEvery is the file mode's poll interval, at least a second.
func (a args) pollEvery() time.Duration {
	return time.Duration(max(a.pollSeconds, 1)) * time.Second
}
