package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
)

// TestMemorySaver runs the conformance suite against MemorySaver. Its
// Reopen is the identity: memory does not survive a restart, but the
// reopen cases still run their code paths against it.
func TestMemorySaver(t *testing.T) {
	checkpointtest.Run(t, checkpointtest.Options{
		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			return vacuumingMemory{checkpoint.NewMemorySaver(now)}
		},
		Reopen: func(t *testing.T, s checkpoint.Saver) checkpoint.Saver { return s },
	})
}

// vacuumingMemory adds a no-op Vacuum to MemorySaver, which has no space
// to give back, so that the suite's Vacuumer cases run here too.
type vacuumingMemory struct{ *checkpoint.MemorySaver }

func (vacuumingMemory) Vacuum(ctx context.Context, pages int) error { return ctx.Err() }

// TestBaseSaverOnly runs the suite against a saver that has only the
// Saver methods and cannot reopen: the optional groups and the reopen
// cases skip, and every other case still passes.
func TestBaseSaverOnly(t *testing.T) {
	checkpointtest.Run(t, checkpointtest.Options{
		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			return struct{ checkpoint.Saver }{checkpoint.NewMemorySaver(now)}
		},
	})
}

// Pruning a thread that was claimed but has no checkpoint yet deletes
// nothing (it used to dereference the missing head).
func TestMemoryPruneClaimedThread(t *testing.T) {
	s := checkpoint.NewMemorySaver(nil)
	if err := s.Claim(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.Lease{Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(context.Background(), "t", "", 1); n != 0 || err != nil {
		t.Errorf("Prune = %d, %v; want 0, nil", n, err)
	}
}
