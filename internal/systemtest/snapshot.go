package systemtest

import (
	"context"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
)

// Snapshots returns the reader of a thread's snapshot that
// crashtest.CheckpointOptions.Snapshot takes, from r (compiled on the
// saver being checked): the status, the next nodes and the IDs of the
// pending interrupts. It returns GetState's error.
func Snapshots[S any](r *graph.Runnable[S]) func(ctx context.Context, thread string) (crashtest.SnapshotView, error) {
	return func(ctx context.Context, thread string) (crashtest.SnapshotView, error) {
		snap, err := r.GetState(ctx, thread)
		if err != nil {
			return crashtest.SnapshotView{}, err
		}
		sv := crashtest.SnapshotView{Status: string(snap.Status), Next: snap.Next}
		for _, in := range snap.Interrupts {
			sv.Interrupts = append(sv.Interrupts, in.ID)
		}
		return sv, nil
	}
}
