package sqlite

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestEncodeRowAllocatesOnce (R22): a big value a task wrote and the
// checkpoint stores (the usual update: the write is the new value) is
// held once by the row, and encoding the row allocates about the row,
// not the value twice over.
func TestEncodeRowAllocatesOnce(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("0123456789abcdef", 8<<20/16) + `"`)
	id := "01a23559-d9df-7edc-bd61-e3c6d1499ae7"
	req := checkpoint.PutRequest{Thread: "big", Checkpoint: checkpoint.Checkpoint{
		ID: id, ParentID: "01a23559-d9df-7edc-bd61-e3c6d1499ae6", CreatedAt: time.Unix(1, 0).UTC(),
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceUpdate, Step: 1},
		Versions: map[string]string{"Blob": id},
		Channels: map[string][]checkpoint.Blob{"Blob": {{Version: id, Data: big}}},
	}, ParentWrites: []checkpoint.TaskWrites{{TaskID: "t", Node: "a", Writes: []checkpoint.Write{{Channel: "Blob", Value: big}}}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	row, err := encodeRow(&req, time.Unix(1, 0))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(row.channels) < len(big) {
		t.Fatalf("the row's channels hold %d bytes, less than the value", len(row.channels))
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(len(big)) * 5 / 4; alloc > limit {
		t.Errorf("encoding the row of an %d-byte value allocated %d bytes, more than %d (1.25x)", len(big), alloc, limit)
	}
}
