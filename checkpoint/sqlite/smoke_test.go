package sqlite

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func TestSmokePutGet(t *testing.T) {
	s := openTemp(t, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	ids := checkpoint.NewIDGenerator(nil, nil)
	c1 := ids.Next("")
	req := checkpoint.PutRequest{
		Thread: "t1",
		Checkpoint: checkpoint.Checkpoint{
			ID: c1, CreatedAt: time.Unix(1700000000, 5).UTC(),
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1, Parents: map[string]string{}},
			Versions: map[string]string{"Log": c1, "N": c1},
			Channels: map[string][]checkpoint.Blob{
				"Log": {{Version: c1, Append: true, Data: json.RawMessage(`["a"]`)}},
				"N":   {{Version: c1, Data: json.RawMessage(`1`)}},
			},
		},
		Writes: []checkpoint.TaskWrites{{TaskID: "task", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "N", Value: json.RawMessage(`2`)}}}},
		Lease:  checkpoint.Lease{Owner: "me", TTL: time.Minute},
	}
	if err := s.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	c2 := ids.Next(c1)
	req2 := req
	req2.Checkpoint = checkpoint.Checkpoint{
		ID: c2, ParentID: c1, CreatedAt: time.Unix(1700000001, 0).UTC(),
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: 0, Parents: map[string]string{}},
		Versions: map[string]string{"Log": c2, "N": c1},
		Channels: map[string][]checkpoint.Blob{"Log": {{Version: c2, Append: true, Base: c1, Data: json.RawMessage(`["b"]`)}}},
	}
	req2.ParentWrites = req.Writes
	req2.Writes = nil
	if err := s.Put(ctx, req2); err != nil {
		t.Fatal(err)
	}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t1"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]checkpoint.Blob{
		"Log": {{Version: c1, Append: true, Data: json.RawMessage(`["a"]`)}, {Version: c2, Append: true, Base: c1, Data: json.RawMessage(`["b"]`)}},
		"N":   {{Version: c1, Data: json.RawMessage(`1`)}},
	}
	if d := cmp.Diff(want, tp.Checkpoint.Channels); d != "" {
		t.Errorf("channels (-want +got):\n%s", d)
	}
	tp, err = s.Get(ctx, checkpoint.Ref{Thread: "t1"}, checkpoint.GetOptions{Have: map[string]string{"Log": c1, "N": c1}})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]checkpoint.Blob{"Log": {{Version: c2, Append: true, Base: c1, Data: json.RawMessage(`["b"]`)}}}
	if d := cmp.Diff(want, tp.Checkpoint.Channels); d != "" {
		t.Errorf("channels with Have (-want +got):\n%s", d)
	}
	list, err := s.List(ctx, "t1", checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || len(list[1].Pending) != 1 {
		t.Fatalf("list = %+v", list)
	}
	if err := s.Put(ctx, req2); !errorsIsConflict(err) {
		t.Fatalf("second Put: %v, want conflict", err)
	}
}

func errorsIsConflict(err error) bool {
	var ce *checkpoint.ConflictError
	return err != nil && asError(err, &ce)
}
