package lockstep_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// BenchmarkW7Concurrent: threads runs of the W1 chain at once on one
// SQLite saver, each on its own thread, no model latency (the nodes return
// at once), as an agent server's many conversations do; the runs' Puts
// commit together (group commit) when they meet at the writer. It reports
// steps/s (node steps, as W1 counts them, of all runs together) and
// steps/floor: steps/s times the floor's us/txn at the same synchronous
// setting (BenchmarkSQLiteFloor's transaction, measured in the same run)
// over 1e6, how many steps one floor transaction's time carries. A saver
// that commits every checkpoint alone can never pass 1 (LangGraph JS);
// puts/group is how many Puts a group transaction carried on average,
// cpu-us/step the process's CPU time (every core's) per step.
// saver=postgres runs the same on the Postgres saver (skipped without
// LOCKSTEP_POSTGRES_URL), its floor BenchmarkPostgresFloor's transaction.
func BenchmarkW7Concurrent(b *testing.B) {
	size := avgW1CheckpointBytes(b)
	floors := map[sqlite.Synchronous]float64{}
	for _, sv := range []struct {
		name string
		sync sqlite.Synchronous
	}{{"sqlite-full", sqlite.SyncFull}, {"sqlite-normal", sqlite.SyncNormal}} {
		b.Run("saver="+sv.name, func(b *testing.B) {
			for _, threads := range []int{1, 8, 64} {
				b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
					floor, ok := floors[sv.sync]
					if !ok {
						n := 2000
						if sv.sync == sqlite.SyncFull {
							n = 300
						}
						floor = sqliteFloorUs(b, sv.sync, size, n)
						floors[sv.sync] = floor
					}
					s, _ := openBenchDB(b, sv.sync)
					w7Concurrent(b, s, strings.ToLower(string(sv.sync)), threads, floor)
				})
			}
		})
	}
	pgFloor := 0.0
	b.Run("saver=postgres", func(b *testing.B) {
		for _, threads := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
				db := openBenchPostgres(b, nil)
				if pgFloor == 0 {
					pgFloor = postgresFloorUs(b, db, size, 200)
				}
				w7Concurrent(b, db.Saver(), "pg", threads, pgFloor)
			})
		}
	})
}

// groupStatser is a saver that counts its group commits.
type groupStatser interface {
	GroupStats() (groups, members int64)
}

// w7Concurrent runs b.N W1 runs, threads at a time, on s.
func w7Concurrent(b *testing.B, s groupStatser, prefix string, threads int, floorUs float64) {
	r, err := w1Graph().Compile(graph.WithSaver(s.(checkpoint.Saver)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := graph.Set(w1State{Count: 0}, "Count")
	var next atomic.Int64
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				res, err := r.Invoke(ctx, fmt.Sprintf("w7-%s-%d", prefix, i), input)
				if err == nil && res.Values.Count != w1Nodes {
					err = fmt.Errorf("count %d, want %d", res.Values.Count, w1Nodes)
				}
				if err != nil {
					err = fmt.Errorf("run %d: %w", i, err)
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	steps := float64(b.N * w1Nodes)
	perSec := steps / elapsed.Seconds()
	b.ReportMetric(perSec, "steps/s")
	b.ReportMetric(perSec*floorUs/1e6, "steps/floor")
	b.ReportMetric(floorUs, "floor-us/txn")
	if cpuOK {
		// Both cores' time: steps/s is bounded by cores*1e6/cpu-us/step.
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/steps, "cpu-us/step")
	}
	if groups, members := s.GroupStats(); groups > 0 {
		b.ReportMetric(float64(members)/float64(groups), "puts/group")
	}
	b.ReportMetric(0, "ns/op")
}
