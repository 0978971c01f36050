package demotest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

// StopPoints are the points where a Ctrl-C can land in a run, as the
// graph runner's test hooks name them: after each task, and before and
// after each save.
var StopPoints = []string{testhook.GraphAfterTask, testhook.GraphBeforeSave, testhook.GraphAfterSave}

// Run runs a program on the database file db with ctx (which carries the
// test hook of AtEveryStop: the program's graph runs must be given ctx or
// a context derived from it), and returns its error.
type Run func(ctx context.Context, db string) error

// AtEveryStop runs run once uninterrupted to count how often it passes
// each of StopPoints, then, for each point and each time it is passed, in
// a subtest: runs it on a new file with its context cancelled right there,
// as a Ctrl-C would, and calls check with that file. It fails the test when
// the uninterrupted run fails or passes a point no time.
func AtEveryStop(t *testing.T, run Run, check func(t *testing.T, db string)) {
	t.Helper()
	counts := map[string]int{}
	count := testhook.With(context.Background(), func(p string) { counts[p]++ })
	if err := run(count, filepath.Join(t.TempDir(), "lockstep.db")); err != nil {
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
				if err := run(testhook.With(ctx, func(p string) {
					if p == point {
						if seen++; seen == k {
							cancel()
						}
					}
				}), db); err == nil {
					t.Logf("the stopped run returned no error")
				}
				check(t, db)
			})
		}
	}
}
