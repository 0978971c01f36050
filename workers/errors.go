package workers

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors of the package. Match them with errors.Is.
var (
	// ErrRefused: Submit refused input because the thread is busy or
	// waiting (see RefusedError). Nothing was applied or queued.
	ErrRefused = errors.New("workers: input refused")
	// ErrUnsupported: the pool's store cannot keep due work or queued
	// input (it does not implement checkpoint.DueWork and
	// checkpoint.InputQueue).
	ErrUnsupported = errors.New("workers: the saver does not keep due work")
	// ErrInvalidConfig: New was given options that mean nothing.
	ErrInvalidConfig = errors.New("workers: invalid pool configuration")
	// ErrInvalidInput: input that cannot be submitted (a Goto or Send, a
	// field that does not encode, a bad run key or thread).
	ErrInvalidInput = errors.New("workers: invalid input")
	// ErrRunning: Run was called while the pool already runs.
	ErrRunning = errors.New("workers: the pool is already running")
	// ErrDropped: a queued input left the queue without being applied:
	// its thread was deleted.
	ErrDropped = errors.New("workers: queued input dropped without being applied")
)

// Reason says why Submit refused input.
type Reason string

// The reasons a thread refuses input.
const (
	// Busy: a run holds the thread's lease (in this process or another).
	Busy Reason = "busy"
	// Waiting: the thread waits on an interrupt or a breakpoint; new input
	// would discard it. Answer it first (Resume), or queue the input.
	Waiting Reason = "waiting"
	// Queued: input queued earlier waits for its turn.
	Queued Reason = "queued"
	// Pending: the thread has unfinished work a worker will take up: a
	// run that stopped before its end (a crash, a shutdown, a failed
	// save), or a retry that is scheduled.
	Pending Reason = "pending"
)

// RefusedError is Submit's refusal of input to a busy or waiting thread
// under the refuse policy (the default). It matches ErrRefused, and wraps
// what made the thread busy when there is such an error (a
// *checkpoint.BusyError naming the run that holds the thread). Nothing was
// applied or queued.
type RefusedError struct {
	Thread string
	Reason Reason
	Err    error
}

// Error names the thread and why it refused, and says what to do.
func (e *RefusedError) Error() string {
	var why string
	switch e.Reason {
	case Busy:
		why = "a run holds it"
	case Waiting:
		why = "it waits on an interrupt or a breakpoint, which new input would discard: resume it first"
	case Queued:
		why = "input queued before this one waits for its turn"
	case Pending:
		why = "it has unfinished work a worker will finish first"
	default:
		why = string(e.Reason)
	}
	s := fmt.Sprintf("workers: input refused: thread %s is %s: %s; submit again later, or with QueueIfBusy to queue the input behind it", strconv.Quote(e.Thread), e.Reason, why)
	if e.Err != nil {
		s += " (" + e.Err.Error() + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Unwrap returns the cause, if any.
func (e *RefusedError) Unwrap() error { return e.Err }

// ConfigError reports an option New refuses. It matches ErrInvalidConfig
// and wraps Err (a *retry.PolicyError for a bad Options.Retry).
type ConfigError struct {
	Field  string
	Reason string
	Err    error
}

// Unwrap returns the cause, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// Error names the option and what it accepts.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("workers: invalid pool configuration: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }
