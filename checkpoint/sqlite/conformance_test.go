package sqlite

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
)

// TestConformance runs the conformance suite every saver passes, with its
// reopen cases (close the file, open it again).
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	clocks := map[*Saver]checkpoint.Clock{}
	for _, sync := range []Synchronous{SyncNormal} {
		t.Run(string(sync), func(t *testing.T) {
			checkpointtest.Run(t, checkpointtest.Options{
				New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
					s := openAt(t, filepath.Join(t.TempDir(), "conformance.db"), Config{Synchronous: sync, Now: now})
					mu.Lock()
					clocks[s] = now
					mu.Unlock()
					return s
				},
				Reopen: func(t *testing.T, old checkpoint.Saver) checkpoint.Saver {
					s := old.(*Saver)
					mu.Lock()
					now := clocks[s]
					mu.Unlock()
					closeChecked(t, s)
					ns := openAt(t, s.Path(), Config{Synchronous: sync, Now: now})
					mu.Lock()
					clocks[ns] = now
					mu.Unlock()
					return ns
				},
			})
		})
	}
}
