package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Environment variables through which the parent passes a child its plan
// and generation. The variable that selects the child's role (and makes a
// test binary's TestMain run it instead of the tests) is the test's own.
const (
	EnvPlan = "LOCKSTEP_CRASH_PLAN"
	EnvGen  = "LOCKSTEP_CRASH_GEN"
)

// DefaultTimeout bounds a child that was not told to die.
const DefaultTimeout = 60 * time.Second

// Errors of Run, matched with errors.Is.
var (
	// ErrChildFailed: the child exited with a status other than 0, or died
	// of a signal other than SIGKILL (a panic, a failed check in the
	// child). Matches *ChildError.
	ErrChildFailed = errors.New("crashtest: child failed")
	// ErrHung: the child outlived its timeout and was killed.
	ErrHung = errors.New("crashtest: child hung")
)

// ChildError reports a child that neither exited cleanly nor died by
// SIGKILL. It matches ErrChildFailed (and ErrHung when it timed out).
type ChildError struct {
	Plan   Plan
	Status string // "exit status 3", "signal: aborted", ...
	Hung   bool
	Stderr string // the end of the child's standard error
}

// Error names the plan and the status, with the end of standard error.
func (e *ChildError) Error() string {
	what := "failed"
	if e.Hung {
		what = "hung"
	}
	return fmt.Sprintf("crashtest: child (plan %s) %s: %s\n%s", e.Plan, what, e.Status, e.Stderr)
}

// Is makes errors.Is(err, ErrChildFailed) true, and ErrHung for a hung
// child.
func (e *ChildError) Is(target error) bool {
	return target == ErrChildFailed || (e.Hung && target == ErrHung)
}

// Spawn says how to start a child: the test binary re-executed, as
// os/exec's own tests do.
type Spawn struct {
	// Path is the binary (default os.Args[0], the test binary).
	Path string
	// Args are its arguments (default "-test.run=^$", so that only
	// TestMain's child dispatch runs).
	Args []string
	// Env is added to the parent's environment, with EnvPlan and EnvGen.
	Env []string
	// Plan is the child's plan: the point and occurrence go to the child,
	// the delay is applied here (the parent sends SIGKILL after it).
	Plan Plan
	// Gen is the child's generation (EnvGen).
	Gen int
	// Timeout bounds the child (default DefaultTimeout).
	Timeout time.Duration
}

// Result is what became of a child.
type Result struct {
	Output
	Plan Plan
	Gen  int
	// Killed says the child died by SIGKILL: its own (Output.Kill is set)
	// or the parent's delay (ByParent).
	Killed   bool
	ByParent bool
	Stderr   string
	Elapsed  time.Duration
}

// KilledAt names where the child died: "point@n", "delay=d", or "" when
// it was not killed.
func (r *Result) KilledAt() string {
	switch {
	case !r.Killed:
		return ""
	case r.Kill != nil:
		return Plan{Point: r.Kill.Point, Occurrence: r.Kill.Occurrence}.String()
	case r.ByParent:
		return Plan{Delay: r.Plan.Delay}.String()
	}
	return "SIGKILL"
}

// Run starts a child, kills it after the plan's delay if it has one, and
// returns what it acknowledged and how it ended. A child that exits 0 or
// dies by SIGKILL is a Result; any other end is a *ChildError (with the
// Result so far).
func Run(ctx context.Context, s Spawn) (*Result, error) {
	if err := s.Plan.Validate(); err != nil {
		return nil, err
	}
	path, args := s.Path, s.Args
	if path == "" {
		path = os.Args[0]
	}
	if args == nil {
		args = []string{"-test.run=^$"}
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cmd := exec.Command(path, args...)
	child := Plan{Point: s.Plan.Point, Occurrence: s.Plan.Occurrence}
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Env = append(cmd.Env, EnvPlan+"="+child.String(), EnvGen+"="+strconv.Itoa(s.Gen))
	var stdout bytes.Buffer
	stderr := &tail{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("crashtest: start child: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var delay <-chan time.Time
	if s.Plan.Delay > 0 {
		t := time.NewTimer(s.Plan.Delay)
		defer t.Stop()
		delay = t.C
	}
	hang := time.NewTimer(timeout)
	defer hang.Stop()
	var (
		err      error
		byParent bool
		hung     bool
	)
	for done := false; !done; {
		select {
		case err = <-waited:
			done = true
		case <-delay:
			byParent = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
			delay = nil
		case <-hang.C:
			hung = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-waited
			return nil, ctx.Err()
		}
	}
	res := &Result{Plan: s.Plan, Gen: s.Gen, Stderr: stderr.String(), Elapsed: time.Since(start)}
	out, perr := ParseOutput(stdout.Bytes())
	res.Output = out
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	var ee *exec.ExitError
	switch {
	case hung:
		return res, &ChildError{Plan: s.Plan, Status: status, Hung: true, Stderr: res.Stderr}
	case err == nil:
	case errors.As(err, &ee):
		ws, ok := ee.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			return res, &ChildError{Plan: s.Plan, Status: status, Stderr: res.Stderr}
		}
		res.Killed = true
		res.ByParent = byParent && out.Kill == nil
	default:
		return res, fmt.Errorf("crashtest: wait for child: %w", err)
	}
	if perr != nil {
		return res, perr
	}
	return res, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

var _ io.Writer = (*tail)(nil)

// Child is the child side: its plan and generation, read from the
// environment the parent set.
type Child struct {
	Plan Plan
	Gen  int
}

// ChildFromEnv reads the plan and generation that Run passed. It returns an
// error matching ErrInvalidPlan for a malformed plan.
func ChildFromEnv() (Child, error) {
	p, err := ParsePlan(os.Getenv(EnvPlan))
	if err != nil {
		return Child{}, err
	}
	gen := 0
	if s := os.Getenv(EnvGen); s != "" {
		if gen, err = strconv.Atoi(s); err != nil {
			return Child{}, fmt.Errorf("crashtest: %s=%q: %w", EnvGen, s, err)
		}
	}
	return Child{Plan: p, Gen: gen}, nil
}
