package swarmworker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// settingsFrom are the settings New makes of env and opts; the health address is a free port
// of the loopback unless opts say otherwise.
func settingsFrom(t *testing.T, env map[string]string, opts ...Option) (Settings, error) {
	t.Helper()
	opts = append([]Option{WithLookupEnv(lookupIn(env)), WithClient(fake.NewClientset()), WithHealthAddr("127.0.0.1:0")}, opts...)
	worker, err := New(opts...)
	if err != nil {
		return Settings{}, err
	}
	t.Cleanup(func() { worker.health.Close() })
	return worker.Settings(), nil
}

func with(env map[string]string, pairs ...string) map[string]string {
	for i := 0; i+1 < len(pairs); i += 2 {
		env[pairs[i]] = pairs[i+1]
	}
	return env
}

func TestTheDownwardAPIAndPoolVariablesMakeCompleteSettingsWithDefaults(t *testing.T) {
	s, err := fromEnv(lookupIn(podEnv())).complete()
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		PodName: "w-0", Namespace: "ns", PodUID: "u-1", Pool: "pool", ConfigMap: "pool-config",
		Permit: 30 * time.Second, HealthAddr: "0.0.0.0:8081", TerminationDeadline: 25 * time.Second,
	}
	if s != want {
		t.Fatalf("settings %+v, want %+v", s, want)
	}
	if s.OwnConfigMap() != "pool-config.w-0" || s.ReadEvery() != 15*time.Second || s.ReadyWithin() != 18*time.Second {
		t.Fatalf("derived %s %v %v", s.OwnConfigMap(), s.ReadEvery(), s.ReadyWithin())
	}
}

func TestATimingVariableThatIsNoNumberIsNamedWithWhatItMustHold(t *testing.T) {
	for _, c := range [][2]string{
		{"SWARM_PERMIT_SECONDS", "30s"},
		{"SWARM_PERMIT_SECONDS", "1"},
		{"SWARM_PERMIT_SECONDS", "2.5"},
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

func TestTheRenewingProtocolsSettingsAreRefusedEvenWithAPermitOption(t *testing.T) {
	for _, name := range []string{"SWARM_LEASE_DURATION_SECONDS", "SWARM_FENCE_MARGIN_SECONDS"} {
		_, err := settingsFrom(t, with(podEnv(), name, "10"), WithPermit(10*time.Second))
		var invalid *InvalidSettingError
		if !errors.As(err, &invalid) || invalid.Name != name || !strings.Contains(err.Error(), "SWARM_PERMIT_SECONDS") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestAnOptionOverridesTheEnvironmentAndABadVariable(t *testing.T) {
	env := with(podEnv(), "SWARM_PERMIT_SECONDS", "forty", "POD_NAME", "w-0")
	s, err := settingsFrom(t, env, WithPermit(20*time.Second), WithPodName("w-3"), WithConfigMap("jobs"),
		WithTerminationDeadline(time.Second), WithReport("/tmp/r"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Permit != 20*time.Second || s.PodName != "w-3" || s.OwnConfigMap() != "jobs.w-3" ||
		s.TerminationDeadline != time.Second || s.Report != "/tmp/r" || s.HealthAddr != "127.0.0.1:0" {
		t.Fatalf("settings %+v", s)
	}
	s, err = settingsFrom(t, map[string]string{}, WithPodName("p"), WithNamespace("n"), WithPodUID("u"), WithPool("q"))
	if err != nil || s.ConfigMap != "q-config" || s.Permit != DefaultPermit {
		t.Fatalf("options only: %+v, %v", s, err)
	}
}

func TestAnOptionIsHeldToWhatItsVariableMayHold(t *testing.T) {
	for _, opt := range []Option{WithPermit(time.Second), WithPermit(2500 * time.Millisecond), WithHealthAddr("localhost:0"), WithTerminationDeadline(0)} {
		var invalid *InvalidSettingError
		if _, err := settingsFrom(t, podEnv(), opt); !errors.As(err, &invalid) {
			t.Errorf("accepted: %v", err)
		}
	}
}

func TestABusyHealthAddressFailsTheStartNamingIt(t *testing.T) {
	first, err := New(WithLookupEnv(lookupIn(podEnv())), WithClient(fake.NewClientset()), WithHealthAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.health.Close()
	_, err = New(WithLookupEnv(lookupIn(podEnv())), WithClient(fake.NewClientset()), WithHealthAddr(first.HealthAddr().String()))
	if err == nil || !strings.Contains(err.Error(), "SWARM_WORKER_HEALTH_ADDR") {
		t.Fatalf("a second worker on %s: %v", first.HealthAddr(), err)
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
