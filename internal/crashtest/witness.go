package crashtest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Effect is one line of a witness: a side effect that really happened (or,
// by the scenario's choice of Kind, another event worth counting, such as a
// node run).
type Effect struct {
	Kind string // what happened: "charge", "run", ...
	// Key identifies the effect: an idempotency key, or thread/task for a
	// run. An effect must happen at most once per (Kind, Key).
	Key string
	// Subject is the logical operation the effect belongs to (an order),
	// when several keys could name it; "" when Key is enough.
	Subject string
	Gen     int // the generation (child process) it happened in
	PID     int
}

// Witness is a sink of real side effects: an O_APPEND file with one line
// per effect, synced before Record returns. A SIGKILL cannot lose a line
// whose write returned (the kernel has it), and the sync keeps it across a
// power loss as well. Lines are written whole with one write each, so
// several processes and goroutines can share the file. A Witness is safe
// for concurrent use.
type Witness struct {
	mu  sync.Mutex
	f   *os.File
	gen int
	pid int
}

// OpenWitness opens (creating) the witness file at path for a process of
// generation gen. It returns the file system's error, wrapped, when the
// file cannot be opened for appending.
func OpenWitness(path string, gen int) (*Witness, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("crashtest: open witness: %w", err)
	}
	return &Witness{f: f, gen: gen, pid: os.Getpid()}, nil
}

// Record appends an effect of kind on key (and subject) and syncs it.
// Kind, key and subject must not contain spaces or newlines: it returns an
// error, writing nothing, when one does or kind or key is empty, and the
// file system's error, wrapped, when the write or sync fails.
func (w *Witness) Record(kind, key, subject string) error {
	for _, s := range []string{kind, key, subject} {
		if strings.ContainsAny(s, " \t\r\n") {
			return fmt.Errorf("crashtest: witness field %q contains white space", s)
		}
	}
	if kind == "" || key == "" {
		return fmt.Errorf("crashtest: witness effect needs a kind and a key")
	}
	if subject == "" {
		subject = "-"
	}
	line := fmt.Sprintf("%s %s %s %d %d\n", kind, key, subject, w.gen, w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.WriteString(line); err != nil {
		return fmt.Errorf("crashtest: witness: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("crashtest: witness sync: %w", err)
	}
	return nil
}

// Close closes the file and returns the file system's error.
func (w *Witness) Close() error { return w.f.Close() }

// ReadWitness reads every effect of the witness file at path, in the order
// they were written. A missing file holds none. A last line without a
// newline was torn by a power loss and is ignored. It returns an error for
// a file that cannot be opened or a complete line that is not five fields
// with numeric generation and PID.
func ReadWitness(path string) ([]Effect, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("crashtest: read witness: %w", err)
	}
	defer f.Close()
	var out []Effect
	rd := bufio.NewReader(f)
	for {
		line, err := rd.ReadString('\n')
		if err != nil { // io.EOF: a line without a newline is torn
			break
		}
		parts := strings.Fields(line)
		if len(parts) != 5 {
			return nil, fmt.Errorf("crashtest: malformed witness line %q", line)
		}
		gen, err1 := strconv.Atoi(parts[3])
		pid, err2 := strconv.Atoi(parts[4])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("crashtest: malformed witness line %q", line)
		}
		e := Effect{Kind: parts[0], Key: parts[1], Subject: parts[2], Gen: gen, PID: pid}
		if e.Subject == "-" {
			e.Subject = ""
		}
		out = append(out, e)
	}
	return out, nil
}
