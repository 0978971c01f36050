package graph

import "fmt"

// DurabilityMode says when a run's checkpoints are written (LangGraph's
// durability). The package doc states what each mode promises and what a
// crash costs in it.
type DurabilityMode string

const (
	// DurabilitySync commits each superstep's checkpoint before the next
	// superstep starts. It is the default.
	DurabilitySync DurabilityMode = "sync"
	// DurabilityAsync writes a superstep's checkpoint while the next
	// supersteps run, one save in flight at a time and in order (the
	// checkpoints of the steps that finish meanwhile are queued, up to a
	// bound, and saved together next). A run never returns, and never
	// reports an interrupt, before every checkpoint up to it is durable.
	DurabilityAsync DurabilityMode = "async"
	// DurabilityExit writes only the checkpoint a run ends, pauses or
	// fails on (with the run's input checkpoint, in the same
	// transaction), and the pending writes its last step needs.
	DurabilityExit DurabilityMode = "exit"
)

// checkDurability returns an error wrapping ErrInvalidInput for a mode
// that is not one of the three.
func checkDurability(d DurabilityMode) error {
	switch d {
	case DurabilitySync, DurabilityAsync, DurabilityExit:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidInput, durabilityProblem(d))
}

func durabilityProblem(d DurabilityMode) string {
	return fmt.Sprintf("durability mode %s is not %q, %q or %q", quoteShort(string(d)), DurabilitySync, DurabilityAsync, DurabilityExit)
}

// WithDurability sets the durability mode of every run of the graph
// (default DurabilitySync); a run's Durability option overrides it.
// Compile reports another mode as a *CompileError.
func WithDurability(d DurabilityMode) Option {
	return func(c *config) {
		if err := checkDurability(d); err != nil {
			c.errs = append(c.errs, &CompileError{Problem: durabilityProblem(d)})
		}
		c.durability = d
	}
}

// Durability sets the durability mode of one run, overriding the
// compiled one (WithDurability). Another mode makes the run fail with an
// error wrapping ErrInvalidInput before it reads or writes anything.
// Subgraphs save every step whatever the mode (see the package doc).
func Durability(d DurabilityMode) RunOption {
	return func(o *runOptions) { o.durability, o.durabilitySet = d, true }
}

// SaveError reports a checkpoint the run could not save. It wraps the
// saver's error (match it with errors.Is: checkpoint.ErrConflict,
// checkpoint.ErrThreadBusy, an I/O error). The thread is left as the
// saver has it: its head is the last checkpoint saved before this one, and
// Continue runs the steps after it again. In DurabilityAsync the error
// may come from the save of an earlier step than the one the run was in
// when it stopped (Step says which).
type SaveError struct {
	Thread     string
	NS         string // "" for the root graph
	Checkpoint string // the ID of the checkpoint that was not saved
	Step       int
	Durability DurabilityMode
	Err        error
}

// Error names the thread, the step and the checkpoint.
func (e *SaveError) Error() string {
	ns := ""
	if e.NS != "" {
		ns = fmt.Sprintf(" ns %q", e.NS)
	}
	mode := ""
	if e.Durability == DurabilityAsync {
		mode = " (written in the background: durability async)"
	}
	return fmt.Sprintf("graph: thread %q%s step %d: save checkpoint %s%s: %v", e.Thread, ns, e.Step, e.Checkpoint, mode, e.Err)
}

// Unwrap returns the saver's error.
func (e *SaveError) Unwrap() error { return e.Err }
