package swarmworker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func settingsFrom(t *testing.T, env map[string]string, opts ...Option) (Settings, error) {
	t.Helper()
	opts = append([]Option{WithLookupEnv(lookupIn(env)), WithClient(fake.NewClientset())}, opts...)
	worker, err := New(opts...)
	if err != nil {
		return Settings{}, err
	}
	return worker.Settings(), nil
}

func with(env map[string]string, pairs ...string) map[string]string {
	for i := 0; i+1 < len(pairs); i += 2 {
		env[pairs[i]] = pairs[i+1]
	}
	return env
}

func TestTheDownwardAPIAndPoolVariablesMakeCompleteSettingsWithDefaults(t *testing.T) {
	s, err := settingsFrom(t, podEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		PodName: "w-0", Namespace: "ns", PodUID: "u-1", Pool: "pool", ConfigMap: "pool-config",
		LeaseDuration: 40 * time.Second, FenceMargin: 8 * time.Second, TerminationDeadline: 25 * time.Second,
	}
	if s != want {
		t.Fatalf("settings %+v, want %+v", s, want)
	}
	if s.OwnConfigMap() != "pool-config.w-0" || s.FenceAfter() != 32*time.Second || s.RenewEvery() != 10*time.Second {
		t.Fatalf("derived %s %v %v", s.OwnConfigMap(), s.FenceAfter(), s.RenewEvery())
	}
}

func TestTheLeaseTimingComesFromThePodEnvironment(t *testing.T) {
	env := with(podEnv(), "SWARM_LEASE_DURATION_SECONDS", "10", "SWARM_TERMINATION_SECONDS", "12.5")
	s, err := settingsFrom(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.LeaseDuration != 10*time.Second || s.FenceMargin != 2*time.Second || s.RenewEvery() != 2500*time.Millisecond || s.TerminationDeadline != 12500*time.Millisecond {
		t.Fatalf("settings %+v", s)
	}
	s, err = settingsFrom(t, with(env, "SWARM_FENCE_MARGIN_SECONDS", "3"))
	if err != nil || s.FenceAfter() != 7*time.Second {
		t.Fatalf("fence after %v, %v", s.FenceAfter(), err)
	}
}

func TestATimingVariableThatIsNoNumberIsNamedWithWhatItMustHold(t *testing.T) {
	for _, c := range [][2]string{
		{"SWARM_LEASE_DURATION_SECONDS", "40s"},
		{"SWARM_LEASE_DURATION_SECONDS", "0"},
		{"SWARM_LEASE_DURATION_SECONDS", "2.5"},
		{"SWARM_FENCE_MARGIN_SECONDS", "-1"},
		{"SWARM_FENCE_MARGIN_SECONDS", "inf"},
		{"SWARM_TERMINATION_SECONDS", "soon"},
		{"SWARM_TERMINATION_SECONDS", "nan"},
	} {
		_, err := settingsFrom(t, with(podEnv(), c[0], c[1]))
		var invalid *InvalidSettingError
		if !errors.As(err, &invalid) || invalid.Name != c[0] || invalid.Value != c[1] {
			t.Errorf("%s=%s: %v", c[0], c[1], err)
			continue
		}
		if !strings.Contains(err.Error(), "expected") || !strings.HasPrefix(err.Error(), c[0]+" is \""+c[1]+"\": ") {
			t.Errorf("%s=%s: %q", c[0], c[1], err)
		}
	}
}

func TestAnOptionOverridesTheEnvironmentAndABadVariable(t *testing.T) {
	env := with(podEnv(), "SWARM_LEASE_DURATION_SECONDS", "forty", "POD_NAME", "w-0")
	s, err := settingsFrom(t, env, WithLeaseDuration(20*time.Second), WithPodName("w-3"), WithConfigMap("jobs"),
		WithFenceMargin(3*time.Second), WithTerminationDeadline(time.Second), WithReport("/tmp/r"))
	if err != nil {
		t.Fatal(err)
	}
	if s.LeaseDuration != 20*time.Second || s.PodName != "w-3" || s.OwnConfigMap() != "jobs.w-3" ||
		s.FenceMargin != 3*time.Second || s.TerminationDeadline != time.Second || s.Report != "/tmp/r" {
		t.Fatalf("settings %+v", s)
	}
	s, err = settingsFrom(t, map[string]string{}, WithPodName("p"), WithNamespace("n"), WithPodUID("u"), WithPool("q"))
	if err != nil || s.ConfigMap != "q-config" || s.FenceMargin != 8*time.Second {
		t.Fatalf("options only: %+v, %v", s, err)
	}
}

func TestExplicitConfigMapAndReportAreKept(t *testing.T) {
	s, err := settingsFrom(t, with(podEnv(), "SWARM_CONFIG_MAP", "jobs", "SWARM_WORKER_REPORT", "/tmp/report"))
	if err != nil || s.ConfigMap != "jobs" || s.Report != "/tmp/report" {
		t.Fatalf("settings %+v, %v", s, err)
	}
}

func TestAMissingOrEmptyVariableIsNamed(t *testing.T) {
	for _, name := range []string{"POD_NAME", "POD_NAMESPACE", "POD_UID", "SWARM_POOL"} {
		for _, value := range []string{"", "  ", "unset"} {
			env := podEnv()
			if value == "unset" {
				delete(env, name)
			} else {
				env[name] = value
			}
			_, err := settingsFrom(t, env)
			var missing *MissingSettingError
			if !errors.As(err, &missing) || missing.Name != name {
				t.Errorf("%s=%q: %v", name, value, err)
			} else if err.Error() != name+" is not set: pass it through the pod's environment or a worker option" {
				t.Errorf("%s: %q", name, err)
			}
		}
	}
}
