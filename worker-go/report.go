package swarmworker

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"time"
)

// ReportLine is one line of the report file (SWARM_WORKER_REPORT), field for field what every
// worker writes (protocol/vectors/report.json): at start, each time the set of jobs it runs
// changes, and each time a fence read extends its jobs' permit.
type ReportLine struct {
	// Pod is POD_NAME.
	Pod string `json:"pod"`
	// UID is POD_UID: it tells pod instances of one name apart.
	UID string `json:"uid"`
	// Version is the config version the jobs belong to; nil before the first one.
	Version *uint64 `json:"version"`
	// Running are the jobs that run (or are about to start) once the line is written.
	Running []string `json:"running"`
	// At is when the line was written, as [Timestamp] formats it.
	At string `json:"at"`
	// Until is when the jobs' permit lapses (same format), while it holds; empty otherwise,
	// and then left out of the line.
	Until string `json:"until,omitempty"`
}

// Render is the line as JSON, without the newline, byte for byte as serde_json writes it: no
// HTML escaping, a null version before the first one, an empty list when nothing runs.
func (l ReportLine) Render() string {
	if l.Running == nil {
		l.Running = []string{}
	}
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(l); err != nil {
		// Strings and integers always encode.
		panic(err)
	}
	return unescapeLineSeparators(string(bytes.TrimSuffix(out.Bytes(), []byte("\n"))))
}

// unescapeLineSeparators writes U+2028 and U+2029 as UTF-8, as serde_json does, where
// encoding/json escapes them for JavaScript; an escaped backslash before a `u` is kept.
func unescapeLineSeparators(line string) string {
	if !strings.Contains(line, `\u202`) {
		return line
	}
	var out strings.Builder
	for i := 0; i < len(line); i++ {
		if line[i] != '\\' {
			out.WriteByte(line[i])
			continue
		}
		switch rest := line[i:]; {
		case strings.HasPrefix(rest, `\u2028`):
			out.WriteString("\u2028")
			i += 5
		case strings.HasPrefix(rest, `\u2029`):
			out.WriteString("\u2029")
			i += 5
		default:
			// An escape pair, copied whole so that its second byte is never read as one.
			out.WriteString(rest[:2])
			i++
		}
	}
	return out.String()
}

// Timestamp is t in RFC 3339, UTC, with nine fraction digits, so lines of one run sort by time
// as text.
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
}

// AppendReport appends line and a newline to the file at path in one write with O_APPEND, so
// lines of pods sharing a file do not interleave.
func AppendReport(path string, line ReportLine) error {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = file.WriteString(line.Render() + "\n")
	if closeErr := file.Close(); err == nil {
		err = closeErr
	}
	return err
}

// reporter appends the worker's lines to its report file, when it has one.
type reporter struct {
	path string
	pod  string
	uid  string
	log  *slog.Logger
}

// write appends one line: running, the permit's deadline until (the zero time when nothing
// runs). A report that cannot be written is logged, not fatal: it is for tests and must not
// stop a worker's jobs.
func (r *reporter) write(version *uint64, running []string, until time.Time) {
	if r.path == "" {
		return
	}
	now := time.Now()
	line := ReportLine{Pod: r.pod, UID: r.uid, Version: version, Running: running, At: Timestamp(now)}
	if len(running) > 0 && !until.IsZero() {
		// The monotonic deadline on the wall clock, as the jobs see it now.
		line.Until = Timestamp(now.Add(until.Sub(now)))
	}
	if err := AppendReport(r.path, line); err != nil {
		r.log.Warn("cannot write the worker report", "path", r.path, "error", err)
	}
}
