package swarmworker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testConfig = "version: 3\nworkloads:\n  w-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  w-1:\n    version: 1\n    jobs: []\nfuture: field\n"

func TestAPodReadsItsOwnEntryAndTheConfigVersion(t *testing.T) {
	observed, err := ParseEntry(testConfig, "w-0")
	if err != nil || observed.Version != 3 || strings.Join(observed.Jobs, ",") != "a,b" {
		t.Fatalf("%+v, %v", observed, err)
	}
	missing, err := ParseEntry(testConfig, "w-7")
	if err != nil || missing.Version != 3 || len(missing.Jobs) != 0 {
		t.Fatalf("%+v, %v", missing, err)
	}
	for _, text := range []string{"{{{ not yaml", "", " \n", "null", "3", "- a"} {
		if _, err := ParseEntry(text, "w-0"); err == nil {
			t.Errorf("%q read as a config", text)
		}
	}
}

// yaml.v3 reads a text that starts with a UTF-16 byte order mark as UTF-16; the Rust and Python
// workers can only be given UTF-8.
func TestATextThatIsNotUTF8IsRefused(t *testing.T) {
	utf16 := "\xff\xfe"
	for _, b := range []byte("version: 1\n") {
		utf16 += string([]byte{b, 0})
	}
	if config, err := ParseConfig(utf16); err == nil || !strings.Contains(err.Error(), "config.yml is not YAML: the text is not UTF-8") {
		t.Errorf("config.yml in UTF-16: %+v, %v", config, err)
	}
	if index, err := ParseIndex(utf16); err == nil || !strings.Contains(err.Error(), "index.yml is not YAML: the text is not UTF-8") {
		t.Errorf("index.yml in UTF-16: %+v, %v", index, err)
	}
}

// The tag `!` is found where yaml.v3 places a node, over each line break libyaml knows
// (protocol/vectors/config.json holds \r\n and U+2028 for every worker).
func TestTheTagBangIsFoundAfterEachLineBreak(t *testing.T) {
	for _, text := range []string{"x: a\rversion: ! ~\n", "x: a\u0085version: ! ~\n", "x: a\u2029version: ! ~\n"} {
		if config, err := ParseConfig(text); err == nil || !strings.Contains(err.Error(), "version: expected an unquoted whole number") {
			t.Errorf("%q: %+v, %v", text, config, err)
		}
	}
}

func TestJobsThatLookLikeNumbersAreJobNames(t *testing.T) {
	observed, err := ParseEntry("version: 2\nworkloads:\n  w-0:\n    jobs: [1, x]\n", "w-0")
	if err != nil || strings.Join(observed.Jobs, ",") != "1,x" {
		t.Fatalf("%+v, %v", observed, err)
	}
}

func TestAPermitHoldsUntilItsDeadlineAndNotOnceRevoked(t *testing.T) {
	var zero Permit
	if zero.Holds() {
		t.Fatal("the zero permit holds")
	}
	p := newPermit()
	if p.Holds() {
		t.Fatal("held before the first read")
	}
	now := time.Now()
	p.extend(now.Add(time.Minute))
	copied := p
	if !copied.Holds() {
		t.Fatal("copies do not share the deadline")
	}
	if until, ok := p.Until(); !ok || until.Sub(now) != time.Minute {
		t.Fatalf("until %v", until.Sub(now))
	}
	p.extend(now)
	if p.Holds() {
		t.Fatal("lapsed permit holds")
	}
	p.extend(now.Add(time.Minute))
	p.revoke()
	if _, ok := p.Until(); ok || p.Holds() {
		t.Fatal("revoked permit has a deadline")
	}
}

func TestReportLinesAreAppendedWithTheirPermit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.jsonl")
	r := &reporter{path: path, pod: "w-0", uid: "u-1"}
	r.write(nil, nil, time.Time{})
	version := uint64(1)
	r.write(&version, []string{"a"}, time.Now().Add(8*time.Second))
	r.write(&version, nil, time.Now().Add(8*time.Second))
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `{"pod":"w-0","uid":"u-1","version":null,"running":[],"at":"`) ||
		strings.Contains(lines[0], "until") || strings.Contains(lines[2], "until") {
		t.Fatalf("%q", lines)
	}
	var second struct {
		Version uint64
		Running []string
		At      time.Time
		Until   time.Time
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if left := second.Until.Sub(second.At); second.Version != 1 || left < 7*time.Second || left > 8*time.Second {
		t.Fatalf("%+v", second)
	}
}

func TestAReportLineKeepsCharactersSerdeKeeps(t *testing.T) {
	line := ReportLine{Pod: "w-0", UID: "u", Running: []string{"a<b>&c", "é"}, At: "x"}
	if got := line.Render(); got != `{"pod":"w-0","uid":"u","version":null,"running":["a<b>&c","é"],"at":"x"}` {
		t.Fatal(got)
	}
}

func TestReadyzAnswersWhatTheReadinessDeadlineSaysAndHealthzAlways(t *testing.T) {
	s := &shell{ready: newPermit()}
	server := httptest.NewServer(s.healthHandler())
	defer server.Close()
	status := func(path string) int {
		t.Helper()
		response, err := http.Get(server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		response.Body.Close()
		return response.StatusCode
	}
	if status("/readyz") != http.StatusServiceUnavailable || status("/healthz") != http.StatusOK {
		t.Fatal("ready before a read, or not healthy")
	}
	s.ready.extend(time.Now().Add(time.Minute))
	if status("/readyz") != http.StatusOK {
		t.Fatal("not ready after a read")
	}
	s.ready.revoke()
	if status("/readyz") != http.StatusServiceUnavailable || status("/healthz") != http.StatusOK {
		t.Fatal("ready once revoked, or not healthy")
	}
}
