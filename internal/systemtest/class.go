package systemtest

import (
	"errors"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// EndClass names how a run ended, by errors.Is, for a child to print and
// its parent to compare: "none" (no error), "busy"
// (checkpoint.ErrThreadBusy), "conflict" (checkpoint.ErrConflict) or
// "other".
func EndClass(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, checkpoint.ErrThreadBusy):
		return "busy"
	case errors.Is(err, checkpoint.ErrConflict):
		return "conflict"
	}
	return "other"
}
