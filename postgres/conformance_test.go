package postgres

import (
	"context"
	"sync"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
)

// TestConformance runs the conformance suite every saver passes, with its
// reopen cases (close the pool, open the schema again).
func TestConformance(t *testing.T) {
	url := testURL(t)
	var mu sync.Mutex
	cfgs := map[*Saver]Config{}
	checkpointtest.Run(t, checkpointtest.Options{
		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			db := openTest(t, Config{Now: now, MaxConns: 2})
			mu.Lock()
			cfgs[db.Saver()] = db.cfg
			mu.Unlock()
			return db.Saver()
		},
		Reopen: func(t *testing.T, old checkpoint.Saver) checkpoint.Saver {
			s := old.(*Saver)
			mu.Lock()
			cfg := cfgs[s]
			mu.Unlock()
			s.db.Close()
			db, err := Open(context.Background(), url, cfg)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			t.Cleanup(func() { db.Close() })
			mu.Lock()
			cfgs[db.Saver()] = cfg
			mu.Unlock()
			return db.Saver()
		},
	})
}
