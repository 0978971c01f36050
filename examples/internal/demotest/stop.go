package demotest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lockstepgo/lockstep/graph"
)

// StopPoints are the points where a Ctrl-C can land in a run, as graph
// hooks: after each task, and before and after each save.
var StopPoints = []string{graph.HookAfterTask, graph.HookBeforeSave, graph.HookAfterSave}

// Run runs a program on the database file db, calling hook at every
// graph hook point, and returns its error.
type Run func(ctx context.Context, db string, hook func(point string)) error

// AtEveryStop runs run once uninterrupted to count how often it passes
// each of StopPoints, then, for each point and each time it is passed, in
// a subtest: runs it on a new file with its context cancelled right there,
// as a Ctrl-C would, and calls check with that file. It fails the test when
// the uninterrupted run fails or passes a point no time.
func AtEveryStop(t *testing.T, run Run, check func(t *testing.T, db string)) {
	t.Helper()
	counts := map[string]int{}
	if err := run(context.Background(), filepath.Join(t.TempDir(), "lockstep.db"), func(p string) { counts[p]++ }); err != nil {
		t.Fatal(err)
	}
	for _, point := range StopPoints {
		if counts[point] == 0 {
			t.Fatalf("an uninterrupted run passes %s no time", point)
		}
		for k := 1; k <= counts[point]; k++ {
			t.Run(fmt.Sprintf("%s#%d", point, k), func(t *testing.T) {
				db := filepath.Join(t.TempDir(), "lockstep.db")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				seen := 0
				if err := run(ctx, db, func(p string) {
					if p == point {
						if seen++; seen == k {
							cancel()
						}
					}
				}); err == nil {
					t.Logf("the stopped run returned no error")
				}
				check(t, db)
			})
		}
	}
}
