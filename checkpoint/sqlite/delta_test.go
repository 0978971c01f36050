package sqlite

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestStorageProportionalToWrites (D4): a thread that appends one 1 KiB
// item per step for 1000 steps, each step also saving the item as its
// task's pending write (as the runtime does), takes less than 5x the
// payload on disk (database plus WAL after a TRUNCATE checkpoint). Reading
// the latest state returns the whole list from one blob per step, and a
// reader that holds the previous version (GetOptions.Have) reads one blob
// however long the history is: the cost of Get follows the state, not the
// number of steps.
func TestStorageProportionalToWrites(t *testing.T) {
	steps := 1000
	if raceEnabled {
		steps = 200
	}
	path := filepath.Join(t.TempDir(), "delta.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	ids := checkpoint.NewIDGenerator(nil, nil)
	item := strings.Repeat("x", 1024-len(`[""]`)-4)
	head, logV := "", ""
	lease := checkpoint.Lease{Owner: "w2", TTL: time.Minute}
	var prev []string // versions of Log, oldest first
	for i := 0; i < steps; i++ {
		id := ids.Next(head)
		data := json.RawMessage(fmt.Sprintf(`["%04d%s"]`, i, item))
		req := checkpoint.PutRequest{Thread: "w2", Lease: lease, Checkpoint: checkpoint.Checkpoint{
			ID: id, ParentID: head,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: i, Parents: map[string]string{}},
			Versions: map[string]string{"Log": id, "N": id, "branch:to:b": id},
			Channels: map[string][]checkpoint.Blob{
				"Log":         {{Version: id, Append: true, Base: logV, Data: data}},
				"N":           {{Version: id, Data: json.RawMessage(fmt.Sprint(i))}},
				"branch:to:b": {{Version: id, Data: json.RawMessage(`null`)}},
			},
		}}
		if head != "" {
			req.ParentWrites = []checkpoint.TaskWrites{{TaskID: fmt.Sprintf("%036d", i), Node: "a", Path: "pull",
				Writes: []checkpoint.Write{{Channel: "Log", Value: data}, {Channel: "N", Value: json.RawMessage(fmt.Sprint(i))}}}}
		}
		if err := s.Put(ctx, req); err != nil {
			t.Fatal(err)
		}
		prev = append(prev, id)
		head, logV = id, id
	}
	if _, err := s.DB().ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	size := func(p string) int64 {
		st, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	disk := size(path) + size(path+"-wal")
	payload := int64(steps) * 1024
	ratio := float64(disk) / float64(payload)
	t.Logf("%d steps: %d bytes on disk for %d bytes of payload: %.2fx", steps, disk, payload, ratio)
	if ratio >= 5 {
		t.Errorf("disk/payload = %.2f, want < 5", ratio)
	}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: "w2"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tp.Checkpoint.Channels["Log"]); n != steps {
		t.Fatalf("latest Log: %d blobs, want %d", n, steps)
	}
	// With Have: the reader holds the previous state; one blob comes back.
	have := map[string]string{"Log": prev[len(prev)-2], "N": prev[len(prev)-2]}
	tp, err = s.Get(ctx, checkpoint.Ref{Thread: "w2"}, checkpoint.GetOptions{Have: have})
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.Checkpoint.Channels["Log"]; len(got) != 1 || got[0].Base != prev[len(prev)-2] {
		t.Fatalf("latest Log with Have: %d blobs, want 1 extending %s", len(got), prev[len(prev)-2])
	}
	// Reading with Have costs the same early and late in the history.
	timeGet := func(k int) time.Duration {
		have := map[string]string{"Log": prev[k-1], "N": prev[k-1], "branch:to:b": prev[k-1]}
		start := time.Now()
		for i := 0; i < 50; i++ {
			if _, err := s.Get(ctx, checkpoint.Ref{Thread: "w2", ID: prev[k]}, checkpoint.GetOptions{Have: have}); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start) / 50
	}
	early, late := timeGet(10), timeGet(steps-1)
	t.Logf("Get with Have: %v at step 10, %v at step %d", early, late, steps-1)
	if late > 5*early+200*time.Microsecond {
		t.Errorf("Get with Have at step %d takes %v, at step 10 %v: not O(state)", steps-1, late, early)
	}
	// History shares blob bytes between tuples.
	list, err := s.List(ctx, "w2", checkpoint.ListOptions{})
	if err != nil || len(list) != steps {
		t.Fatalf("list: %d, %v", len(list), err)
	}
	a, b := list[0].Checkpoint.Channels["Log"], list[1].Checkpoint.Channels["Log"]
	if &a[0].Data[0] != &b[0].Data[0] {
		t.Error("history does not share the bytes of a blob between tuples")
	}
}
