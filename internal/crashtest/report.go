package crashtest

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// The words that start the lines a child writes to its standard output.
// Every other line is kept as a note.
const (
	// LineAck: "ACK <thread> <checkpoint>": a checkpoint's save returned
	// nil.
	LineAck = "ACK"
	// LineTaskAck: "TASK-ACK <thread> <task>": a save that returned nil
	// held the finished writes of a task (it must never run again).
	LineTaskAck = "TASK-ACK"
	// LineEffectAck: "EFFECT-ACK <key>": an effect's outcome was recorded
	// (it must have happened exactly once).
	LineEffectAck = "EFFECT-ACK"
	// LineDecided: "DECIDED <approval> <outcome>": a reviewer's decision
	// was recorded (first wins: at most one per approval, ever).
	LineDecided = "DECIDED"
	// LineKill: "KILL <point> <occurrence>": the child kills itself now.
	LineKill = "KILL"
	// LineHits: "HITS <point>=<n> ...": how often each point was hit, at a
	// clean exit.
	LineHits = "HITS"
	// LineDone: "DONE": the child finished its scenario.
	LineDone = "DONE"
)

// Reporter writes a child's protocol lines, one write per line, so that
// lines from several goroutines never interleave and a line written before
// a SIGKILL reaches the parent (the kernel keeps what was written to the
// pipe). Fields are written bare when they are printable and have no
// spaces, quoted (strconv.Quote) otherwise. A Reporter is safe for
// concurrent use; its zero value discards everything.
type Reporter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewReporter returns a reporter writing to w (the child's os.Stdout).
func NewReporter(w io.Writer) *Reporter { return &Reporter{w: w} }

// Err returns the first write error, if any.
func (r *Reporter) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Reporter) line(word string, fields ...string) {
	var b strings.Builder
	b.WriteString(word)
	for _, f := range fields {
		b.WriteByte(' ')
		b.WriteString(field(f))
	}
	b.WriteByte('\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil || r.err != nil {
		return
	}
	if _, err := io.WriteString(r.w, b.String()); err != nil {
		r.err = err
	}
}

// Ack reports that the save of checkpoint id of thread returned nil.
func (r *Reporter) Ack(thread, id string) { r.line(LineAck, thread, id) }

// TaskAck reports that the finished writes of task of thread are saved.
func (r *Reporter) TaskAck(thread, task string) { r.line(LineTaskAck, thread, task) }

// EffectAck reports that the outcome of the effect key is recorded.
func (r *Reporter) EffectAck(key string) { r.line(LineEffectAck, key) }

// Decided reports that a decision on approval id was recorded.
func (r *Reporter) Decided(id, outcome string) { r.line(LineDecided, id, outcome) }

// Kill reports that the child dies now at the n-th hit of p.
func (r *Reporter) Kill(p Point, n int) { r.line(LineKill, string(p), strconv.Itoa(n)) }

// Hits reports the hit counts of a child that exits cleanly.
func (r *Reporter) Hits(hits map[Point]int) {
	keys := make([]string, 0, len(hits))
	for p, n := range hits {
		keys = append(keys, string(p)+"="+strconv.Itoa(n))
	}
	sort.Strings(keys)
	r.line(LineHits, keys...)
}

// Done reports that the child finished its scenario.
func (r *Reporter) Done() { r.line(LineDone) }

func field(s string) string {
	if s == "" || strings.HasPrefix(s, `"`) || strings.ContainsFunc(s, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) {
		return strconv.Quote(s)
	}
	return s
}

// splitLine splits a protocol line into its fields, unquoting quoted ones.
func splitLine(line string) ([]string, error) {
	var out []string
	for line = strings.TrimLeft(line, " "); line != ""; line = strings.TrimLeft(line, " ") {
		if line[0] == '"' {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, fmt.Errorf("malformed quoted field in %q", line)
			}
			s, _ := strconv.Unquote(q)
			out = append(out, s)
			line = line[len(q):]
			continue
		}
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			i = len(line)
		}
		out = append(out, line[:i])
		line = line[i:]
	}
	return out, nil
}

// CheckpointAck is an acknowledged checkpoint. Gen is the generation of
// the child that acknowledged it (set by History.Add).
type CheckpointAck struct {
	Thread, ID string
	Gen        int
}

// TaskAck is a task whose finished writes were acknowledged.
type TaskAck struct {
	Thread, Task string
	Gen          int
}

// DecisionAck is a recorded decision.
type DecisionAck struct {
	ID, Outcome string
	Gen         int
}

// KillAck is where a child said it killed itself.
type KillAck struct {
	Point      Point
	Occurrence int
}

// Output is what a child reported, parsed.
type Output struct {
	Checkpoints []CheckpointAck
	Tasks       []TaskAck
	Effects     []string
	Decisions   []DecisionAck
	Kill        *KillAck
	Hits        map[Point]int
	Done        bool
	// Notes are the lines that are not protocol lines.
	Notes []string
}

// ParseOutput parses a child's standard output. A last line without a
// newline is ignored: it was cut off (the protocol writes whole lines).
// It returns an error for a malformed protocol line.
func ParseOutput(out []byte) (Output, error) {
	var o Output
	if i := bytes.LastIndexByte(out, '\n'); i+1 < len(out) {
		out = out[:i+1]
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		f, err := splitLine(line)
		if err != nil {
			return o, err
		}
		bad := func() error { return fmt.Errorf("crashtest: malformed %s line %q", f[0], line) }
		switch f[0] {
		case LineAck:
			if len(f) != 3 {
				return o, bad()
			}
			o.Checkpoints = append(o.Checkpoints, CheckpointAck{Thread: f[1], ID: f[2]})
		case LineTaskAck:
			if len(f) != 3 {
				return o, bad()
			}
			o.Tasks = append(o.Tasks, TaskAck{Thread: f[1], Task: f[2]})
		case LineEffectAck:
			if len(f) != 2 {
				return o, bad()
			}
			o.Effects = append(o.Effects, f[1])
		case LineDecided:
			if len(f) != 3 {
				return o, bad()
			}
			o.Decisions = append(o.Decisions, DecisionAck{ID: f[1], Outcome: f[2]})
		case LineKill:
			n, err := strconv.Atoi(f[len(f)-1])
			if len(f) != 3 || err != nil {
				return o, bad()
			}
			o.Kill = &KillAck{Point(f[1]), n}
		case LineHits:
			o.Hits = map[Point]int{}
			for _, kv := range f[1:] {
				k, v, ok := strings.Cut(kv, "=")
				n, err := strconv.Atoi(v)
				if !ok || err != nil {
					return o, bad()
				}
				o.Hits[Point(k)] = n
			}
		case LineDone:
			o.Done = true
		default:
			o.Notes = append(o.Notes, line)
		}
	}
	return o, nil
}
