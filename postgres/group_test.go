package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// groupPut is a first checkpoint of thread (parent "" ) or a child of
// parent, with one channel holding value.
func groupPut(thread, id, parent string, step int, value string, l checkpoint.Lease) checkpoint.PutRequest {
	src := checkpoint.SourceLoop
	if parent == "" {
		src = checkpoint.SourceInput
	}
	return checkpoint.PutRequest{Thread: thread, Lease: l, Checkpoint: checkpoint.Checkpoint{ID: id, ParentID: parent,
		Metadata: checkpoint.Metadata{Source: src, Step: step},
		Versions: map[string]string{"x": id},
		Channels: map[string][]checkpoint.Blob{"x": {{Version: id, Data: json.RawMessage(value)}}}}}
}

// holdSlots takes every group-commit slot of s, so that the writes that
// come next queue up; the returned function lets one leader in.
func holdSlots(s *Saver) (release func()) {
	for range cap(s.group.slots) {
		s.group.slots <- struct{}{}
	}
	var once sync.Once
	return func() { once.Do(func() { <-s.group.slots }) }
}

// waitQueued waits until n writes are queued on s (a bounded wait: the
// writes are goroutines that have been started).
func waitQueued(t *testing.T, s *Saver, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.group.mu.Lock()
		got := len(s.group.queue)
		s.group.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after 60 s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// headOf returns the thread's head checkpoint ID and its value of x, ""
// for a thread that has none.
func headOf(t *testing.T, s *Saver, thread string) (string, string) {
	t.Helper()
	tup, err := s.Get(context.Background(), checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
	if errors.Is(err, checkpoint.ErrNotFound) || (err == nil && tup == nil) {
		return "", ""
	}
	if err != nil {
		t.Fatalf("get %s: %v", thread, err)
	}
	var v string
	if bs := tup.Checkpoint.Channels["x"]; len(bs) > 0 {
		v = string(bs[len(bs)-1].Data)
	}
	return tup.Checkpoint.ID, v
}

// TestGroupCommit: writes of concurrent runs that queue while the
// saver's slots are busy go in one batch, and each keeps its own result:
// a refused one (a parent that is not the head, another owner's live
// lease) fails alone and writes nothing while the others commit in one
// transaction; a write PostgreSQL itself refuses (a number JSONB cannot
// hold) makes every member run again alone, so that it alone fails; a
// write whose context ends while it waits fails with that error and
// writes nothing.
func TestGroupCommit(t *testing.T) {
	const (
		c1 = "01J00000000000000000000001"
		c2 = "01J00000000000000000000002"
		c3 = "01J00000000000000000000003"
	)
	mine := checkpoint.Lease{Owner: "run-mine", TTL: time.Hour}
	other := checkpoint.Lease{Owner: "run-other", TTL: time.Hour}
	type write struct {
		name    string
		put     checkpoint.PutRequest
		cancel  bool  // its context ends while it waits
		wantErr error // nil: it commits
	}
	tests := []struct {
		name       string
		writes     []write
		wantGroups int64 // batches of two or more that committed
	}{
		{
			name: "refusals fail alone",
			writes: []write{
				{name: "new thread a", put: groupPut("a", c1, "", -1, `1`, mine)},
				{name: "stale parent", put: groupPut("seeded", c3, c1, 1, `"stale"`, mine), wantErr: checkpoint.ErrConflict},
				{name: "new thread b", put: groupPut("b", c1, "", -1, `2`, mine)},
				{name: "another owner's lease", put: groupPut("seeded", c3, c2, 1, `"intruder"`, other), wantErr: checkpoint.ErrThreadBusy},
				{name: "child on seeded-2", put: groupPut("seeded-2", c3, c2, 1, `3`, mine)},
			},
			wantGroups: 1,
		},
		{
			name: "a statement PostgreSQL refuses",
			writes: []write{
				{name: "new thread a", put: groupPut("a", c1, "", -1, `1`, mine)},
				{name: "number out of range", put: groupPut("z", c1, "", -1, `1e200000`, mine), wantErr: checkpoint.ErrInvalid},
				{name: "child on seeded", put: groupPut("seeded", c3, c2, 1, `4`, mine)},
			},
			wantGroups: 0,
		},
		{
			name: "a context that ends while waiting",
			writes: []write{
				{name: "new thread a", put: groupPut("a", c1, "", -1, `1`, mine)},
				{name: "cancelled", put: groupPut("y", c1, "", -1, `9`, mine), cancel: true, wantErr: context.Canceled},
				{name: "child on seeded", put: groupPut("seeded", c3, c2, 1, `5`, mine)},
			},
			wantGroups: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openTest(t, Config{MaxConns: 2})
			s := db.Saver()
			ctx := context.Background()
			for _, thread := range []string{"seeded", "seeded-2"} {
				if err := s.Put(ctx, groupPut(thread, c1, "", -1, `0`, mine)); err != nil {
					t.Fatal(err)
				}
				if err := s.Put(ctx, groupPut(thread, c2, c1, 0, `0`, mine)); err != nil {
					t.Fatal(err)
				}
			}
			release := holdSlots(s)
			defer release()
			errs := make([]error, len(tt.writes))
			var wg sync.WaitGroup
			queued := 0
			for i, w := range tt.writes {
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				done := make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(done)
					errs[i] = s.Put(wctx, w.put)
				}()
				queued++
				waitQueued(t, s, queued) // in this order
				if w.cancel {
					cancel()
					<-done // it left the queue
					queued--
					waitQueued(t, s, queued)
				}
			}
			release()
			wg.Wait()
			for i, w := range tt.writes {
				if w.wantErr == nil && errs[i] != nil || w.wantErr != nil && !errors.Is(errs[i], w.wantErr) {
					t.Errorf("%s: %v, want %v", w.name, errs[i], w.wantErr)
				}
			}
			got := map[string]string{}
			want := map[string]string{}
			for i, w := range tt.writes {
				id, v := headOf(t, s, w.put.Thread)
				got[w.put.Thread] = id + " " + v
				if errs[i] == nil {
					want[w.put.Thread] = w.put.Checkpoint.ID + " " + string(w.put.Checkpoint.Channels["x"][0].Data)
				} else if _, ok := want[w.put.Thread]; !ok {
					want[w.put.Thread] = map[bool]string{true: c2 + " 0", false: " "}[w.put.Thread == "seeded" || w.put.Thread == "seeded-2"]
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("heads (-want +got):\n%s", d)
			}
			if groups, _ := s.GroupStats(); groups != tt.wantGroups {
				t.Errorf("GroupStats: %d groups, want %d", groups, tt.wantGroups)
			}
		})
	}
}

// TestGroupCommitOff: GroupCommitMax 1 sends every write alone, even
// when writes queue up; the bounds are checked.
func TestGroupCommitOff(t *testing.T) {
	db := openTest(t, Config{MaxConns: 2, GroupCommitMax: 1})
	s := db.Saver()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			put := groupPut(fmt.Sprintf("t%d", i), "01J00000000000000000000001", "", -1, `1`, checkpoint.Lease{Owner: "o", TTL: time.Hour})
			if err := s.Put(context.Background(), put); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if groups, _ := s.GroupStats(); groups != 0 {
		t.Errorf("GroupStats: %d groups with GroupCommitMax 1, want 0", groups)
	}
	for _, cfg := range []Config{{GroupCommitMax: -1}, {GroupCommitMax: 4097}, {GroupCommitBytes: -1}, {GroupCommitBytes: 1<<30 + 1}} {
		_, err := cfg.resolved()
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want a *ConfigError matching ErrInvalidConfig", cfg, err)
		}
	}
}
