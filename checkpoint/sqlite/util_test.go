package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func asError[T any](err error, target *T) bool { return errors.As(err, target) }

// line builds a linear chain of checkpoints on one thread: channel "Log"
// appended to at every step, "N" replaced, and the step's task writes as
// ParentWrites.
type line struct {
	thread, ns string
	ids        *checkpoint.IDGenerator
	owner      string
	head       string
	logVersion string
	step       int
}

func newLine(thread string) *line {
	return &line{thread: thread, ids: checkpoint.NewIDGenerator(nil, nil), owner: "owner-" + thread}
}

// next returns the Put of the next step.
func (l *line) next() checkpoint.PutRequest {
	id := l.ids.Next(l.head)
	item := json.RawMessage(fmt.Sprintf(`["item %d"]`, l.step))
	cp := checkpoint.Checkpoint{
		ID: id, ParentID: l.head, CreatedAt: time.Unix(1750000000+int64(l.step), 0).UTC(),
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: l.step, Parents: map[string]string{}},
		Versions: map[string]string{"Log": id, "N": id},
		Channels: map[string][]checkpoint.Blob{
			"Log": {{Version: id, Append: true, Base: l.logVersion, Data: item}},
			"N":   {{Version: id, Data: json.RawMessage(fmt.Sprint(l.step))}},
		},
	}
	req := checkpoint.PutRequest{Thread: l.thread, NS: l.ns, Checkpoint: cp, Lease: checkpoint.Lease{Owner: l.owner, TTL: time.Minute}}
	if l.head != "" {
		req.ParentWrites = []checkpoint.TaskWrites{{TaskID: fmt.Sprintf("task-%d", l.step), Node: "n", Path: "pull",
			Writes: []checkpoint.Write{{Channel: "Log", Value: item}, {Channel: "N", Value: json.RawMessage(fmt.Sprint(l.step))}}}}
	}
	return req
}

// chain returns the Puts of the next n steps as one chain (recorded as
// committed), the last releasing the lease.
func (l *line) chain(n int) []checkpoint.PutRequest {
	reqs := make([]checkpoint.PutRequest, n)
	for i := range reqs {
		reqs[i] = l.next()
		l.committed(reqs[i])
	}
	reqs[n-1].Release = true
	return reqs
}

// committed records that req was saved.
func (l *line) committed(req checkpoint.PutRequest) {
	l.head, l.logVersion = req.Checkpoint.ID, req.Checkpoint.ID
	l.step++
}

// putLine saves n steps of a new line on thread and returns it.
func putLine(t testing.TB, s checkpoint.Saver, thread string, n int) *line {
	t.Helper()
	l := newLine(thread)
	for i := 0; i < n; i++ {
		req := l.next()
		if err := s.Put(t.Context(), req); err != nil {
			t.Fatalf("put step %d of %s: %v", i, thread, err)
		}
		l.committed(req)
	}
	return l
}

func listIDs(t testing.TB, s checkpoint.Saver, thread string) []string {
	t.Helper()
	tps, err := s.List(t.Context(), thread, checkpoint.ListOptions{AllNamespaces: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tp := range tps {
		ids = append(ids, tp.Checkpoint.ID)
	}
	return ids
}

// TestStoreErrorQuotesIDs: a StoreError quotes the checkpoint ID as it
// quotes thread and namespace.
func TestStoreErrorQuotesIDs(t *testing.T) {
	err := &StoreError{Op: "put", Thread: "t", NS: "n", Checkpoint: `cp 1"x`, Commit: true, Err: errors.New("disk I/O error")}
	want := `checkpoint/sqlite: put thread "t" ns "n" checkpoint "cp 1\"x": commit failed, the write may or may not be durable (re-read the head): disk I/O error`
	if got := err.Error(); got != want {
		t.Errorf("Error():\n got %s\nwant %s", got, want)
	}
}
