package checkpointtest

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func validationCases() []testCase {
	return []testCase{
		{name: "Put", run: testValidatePut},
		{name: "PutWrites", run: testValidateWrites},
		{name: "OtherMethods", run: testValidateOthers},
	}
}

// testValidatePut: malformed PutRequests fail with ErrInvalid and write
// nothing, on an existing thread and on a new one.
func testValidatePut(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("a", `1`), fresh("log", `["x"]`))
	low := "00000000-0000-7000-8000-000000000001"
	valid := func(id string) checkpoint.PutRequest {
		if id == "" {
			id = f.id()
		}
		req := l.requestID(t, id, c1, set("a", `2`), add("log", `["y"]`))
		req.ParentWrites = []checkpoint.TaskWrites{task("task-1", wr("a", `2`))}
		req.Writes = []checkpoint.TaskWrites{task(checkpoint.NullTaskID, wr(checkpoint.ChannelBreakpoint, `{"when":"after","nodes":["n"]}`))}
		return req
	}
	tests := []struct {
		name string
		req  func() checkpoint.PutRequest
	}{
		{"empty thread", func() checkpoint.PutRequest { r := valid(""); r.Thread = ""; return r }},
		{"empty checkpoint ID", func() checkpoint.PutRequest {
			r := l.requestID(t, "", c1, set("a", `2`))
			return r
		}},
		{"ID equal to the parent's", func() checkpoint.PutRequest { return valid(c1) }},
		{"ID before the parent's", func() checkpoint.PutRequest { return valid(low) }},
		{"invalid JSON blob", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"][0].Data = json.RawMessage(`{"a":`)
			return r
		}},
		{"empty blob", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Channels["a"][0].Data = nil; return r }},
		{"changed channel without blob", func() checkpoint.PutRequest { r := valid(""); delete(r.Checkpoint.Channels, "a"); return r }},
		{"blob for a channel that did not change", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Versions["a"] = c1; return r }},
		{"blob for a channel without version", func() checkpoint.PutRequest { r := valid(""); delete(r.Checkpoint.Versions, "a"); return r }},
		{"two blobs for one channel", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"] = append(r.Checkpoint.Channels["a"], r.Checkpoint.Channels["a"][0])
			return r
		}},
		{"blob version is not the checkpoint ID", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"][0].Version = c1
			return r
		}},
		{"invalid JSON in a parent write", func() checkpoint.PutRequest {
			r := valid("")
			r.ParentWrites[0].Writes[0].Value = json.RawMessage(`nope`)
			return r
		}},
		{"invalid JSON in a write", func() checkpoint.PutRequest {
			r := valid("")
			r.Writes[0].Writes[0].Value = json.RawMessage(`{`)
			return r
		}},
		{"empty write value", func() checkpoint.PutRequest { r := valid(""); r.ParentWrites[0].Writes[0].Value = nil; return r }},
		{"empty task ID", func() checkpoint.PutRequest { r := valid(""); r.ParentWrites[0].TaskID = ""; return r }},
		{"empty write channel", func() checkpoint.PutRequest { r := valid(""); r.Writes[0].Writes[0].Channel = ""; return r }},
		{"empty lease owner", func() checkpoint.PutRequest { r := valid(""); r.Lease.Owner = ""; return r }},
		// Text that would not come back as itself.
		{"checkpoint ID not UTF-8", func() checkpoint.PutRequest { return valid(f.id() + "\xff") }},
		{"task ID not UTF-8", func() checkpoint.PutRequest { r := valid(""); r.ParentWrites[0].TaskID = "task\xff"; return r }},
		{"write channel not UTF-8", func() checkpoint.PutRequest { r := valid(""); r.Writes[0].Writes[0].Channel = "c\xff"; return r }},
		{"creation time after year 9999", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			return r
		}},
		{"creation time before year 0", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.CreatedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
			return r
		}},
		// Metadata a saver could not keep: a caller key the fixed one of
		// the same name would hide, values that are not JSON.
		{"caller metadata key step", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Metadata.Extra = map[string]any{"step": 99}
			return r
		}},
		{"caller metadata value that is not JSON", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Metadata.Extra = map[string]any{"f": func() {}}
			return r
		}},
		{"caller metadata NaN", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Metadata.Extra = map[string]any{"f": math.NaN()}
			return r
		}},
		{"caller metadata malformed json.Number", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Metadata.Extra = map[string]any{"n": json.Number("1x")}
			return r
		}},
		// What a reader would have to report as corrupt (issue 16): a step
		// out of range or not after the parent's, a channel that names no
		// node, a version newer than the checkpoint, special writes that
		// do not decode strictly, one interrupt ID twice.
		{"step below -1", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Metadata.Step = -2; return r }},
		{"step beyond MaxStep", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Metadata.Step = math.MaxInt64
			return r
		}},
		{"step equal to the parent's", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Metadata.Step--; return r }},
		{"step before the parent's", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Metadata.Step -= 5; return r }},
		{"branch naming no node", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Versions[checkpoint.BranchPrefix] = r.Checkpoint.ID
			r.Checkpoint.Channels[checkpoint.BranchPrefix] = []checkpoint.Blob{{Version: r.Checkpoint.ID, Data: json.RawMessage(`null`)}}
			return r
		}},
		{"join naming no node", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Versions["join:a+b:"] = c1; return r }},
		{"version after the checkpoint", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Versions["z"] = r.Checkpoint.ID + "0"
			return r
		}},
		{"mark after the checkpoint", func() checkpoint.PutRequest { r := valid(""); r.Checkpoint.Mark = r.Checkpoint.ID + "0"; return r }},
		{"append extending a later version", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["log"][0].Base = r.Checkpoint.ID + "0"
			return r
		}},
		{"lone surrogate in a blob", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"][0].Data = json.RawMessage(`"\ud800"`)
			return r
		}},
		{"duplicate key in a blob", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"][0].Data = json.RawMessage(`{"k":1,"k":2}`)
			return r
		}},
		{"invalid UTF-8 in a blob", func() checkpoint.PutRequest {
			r := valid("")
			r.Checkpoint.Channels["a"][0].Data = json.RawMessage("\"\xff\"")
			return r
		}},
		{"breakpoint marker null", func() checkpoint.PutRequest {
			r := valid("")
			r.Writes[0].Writes[0].Value = json.RawMessage(`null`)
			return r
		}},
		{"breakpoint marker case-variant key", func() checkpoint.PutRequest {
			r := valid("")
			r.Writes[0].Writes[0].Value = json.RawMessage(`{"When":"after","nodes":["n"]}`)
			return r
		}},
		{"interrupt in a parent write null", func() checkpoint.PutRequest {
			r := valid("")
			r.ParentWrites[0].Writes = append(r.ParentWrites[0].Writes, wr(checkpoint.ChannelInterrupt, `null`))
			return r
		}},
	}
	before := f.dump(t, "thread-1")
	for _, tc := range tests {
		err := f.s.Put(t.Context(), tc.req())
		wantIs(t, "Put with "+tc.name, err, checkpoint.ErrInvalid)
	}
	f.unchanged(t, "malformed Puts", "thread-1", before)

	// The first checkpoint of a new thread is validated too.
	n := f.line("thread-2", "")
	req := n.request(t, "", set("a", `1`))
	req.Lease.Owner = ""
	wantIs(t, "first Put with an empty lease owner", f.s.Put(t.Context(), req), checkpoint.ErrInvalid)
	req = n.request(t, "", set("a", `1`))
	req.Checkpoint.Channels["a"][0].Data = json.RawMessage(`[`)
	wantIs(t, "first Put with an invalid blob", f.s.Put(t.Context(), req), checkpoint.ErrInvalid)
	if got := f.list(t, "thread-2", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("refused first Puts wrote %d checkpoints", len(got))
	}
	// Nothing was leased either: another owner may start the thread.
	n.lease = owned("runner-z")
	n.step(t, set("a", `1`))
}

// testValidateWrites: malformed WritesRequests fail with ErrInvalid and
// write nothing.
func testValidateWrites(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("a", `1`))
	f.putWrites(t, l.ref(c1), l.lease, task("task-0", wr("a", `0`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-9", wr(checkpoint.ChannelInterrupt, `[{"id":"saved","value":0}]`)))
	valid := func() checkpoint.WritesRequest {
		return checkpoint.WritesRequest{Ref: l.ref(c1), Lease: l.lease, Tasks: []checkpoint.TaskWrites{
			task("task-1", wr("a", `1`)),
			task("task-2", wr("b", `2`), wr(checkpoint.ChannelError, `{"message":"x"}`)),
		}}
	}
	tests := []struct {
		name   string
		mutate func(*checkpoint.WritesRequest)
	}{
		{"empty thread", func(r *checkpoint.WritesRequest) { r.Ref.Thread = "" }},
		{"empty checkpoint ID", func(r *checkpoint.WritesRequest) { r.Ref.ID = "" }},
		{"empty lease owner", func(r *checkpoint.WritesRequest) { r.Lease.Owner = "" }},
		{"task ID not UTF-8", func(r *checkpoint.WritesRequest) { r.Tasks[0].TaskID = "task\xff" }},
		{"channel not UTF-8", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0].Channel = "a\xff" }},
		{"invalid JSON", func(r *checkpoint.WritesRequest) { r.Tasks[1].Writes[1].Value = json.RawMessage(`{"message"`) }},
		{"empty value", func(r *checkpoint.WritesRequest) { r.Tasks[1].Writes[0].Value = nil }},
		{"empty task ID", func(r *checkpoint.WritesRequest) { r.Tasks[1].TaskID = "" }},
		{"empty channel", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0].Channel = "" }},
		// Special writes decode as strictly as state (issue 16).
		{"interrupt null", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `null`) }},
		{"interrupt duplicate id key", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"a","id":"b","value":1}]`)
		}},
		{"interrupt case-variant id key", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"ID":"a","value":1}]`)
		}},
		{"interrupt invalid UTF-8", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, "[{\"id\":\"a\",\"value\":\"\xff\"}]")
		}},
		{"interrupt lone surrogate", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"a","value":"\ud800"}]`)
		}},
		{"two interrupts with one ID", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"a","value":1},{"id":"a","value":2}]`)
		}},
		{"one interrupt ID in two tasks", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"a","value":1}]`)
			r.Tasks[1].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"a","value":2}]`)
		}},
		{"interrupt ID another task saved", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelInterrupt, `[{"id":"saved","value":1}]`)
		}},
		{"resume null", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0] = wr(checkpoint.ChannelResume, `null`) }},
		{"resume duplicate key", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelResume, `{"i":"no","i":"yes"}`)
		}},
		{"error null", func(r *checkpoint.WritesRequest) { r.Tasks[1].Writes[1].Value = json.RawMessage(`null`) }},
		{"error unknown key", func(r *checkpoint.WritesRequest) { r.Tasks[1].Writes[1].Value = json.RawMessage(`{"Message":"x"}`) }},
		{"durable step null", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0] = wr(checkpoint.ChannelStepPrefix+"0", `null`) }},
		{"durable step slot misspelled", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelStepPrefix+"01", `{"name":"s","result":1}`)
		}},
		{"send naming no node", func(r *checkpoint.WritesRequest) {
			r.Tasks[0].Writes[0] = wr(checkpoint.ChannelSends, `{"node":"","arg":{}}`)
		}},
		{"branch naming no node", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0] = wr(checkpoint.BranchPrefix, `null`) }},
		{"lone surrogate in a value", func(r *checkpoint.WritesRequest) { r.Tasks[0].Writes[0].Value = json.RawMessage(`["\udfff"]`) }},
	}
	before := f.dump(t, "thread-1")
	for _, tc := range tests {
		req := valid()
		tc.mutate(&req)
		wantIs(t, "PutWrites with "+tc.name, f.s.PutWrites(t.Context(), req), checkpoint.ErrInvalid)
	}
	f.unchanged(t, "malformed PutWrites", "thread-1", before)
}

// testValidateOthers: Get, List, Claim and DeleteThread refuse an empty
// thread, and Claim an empty lease owner, with ErrInvalid.
func testValidateOthers(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("a", `1`))
	before := f.dump(t, "thread-1")
	_, err := f.s.Get(t.Context(), checkpoint.Ref{}, checkpoint.GetOptions{})
	wantIs(t, "Get with an empty thread", err, checkpoint.ErrInvalid)
	_, err = f.s.List(t.Context(), "", checkpoint.ListOptions{})
	wantIs(t, "List with an empty thread", err, checkpoint.ErrInvalid)
	wantIs(t, "Claim with an empty thread", f.s.Claim(t.Context(), checkpoint.Ref{}, l.lease), checkpoint.ErrInvalid)
	wantIs(t, "Claim with an empty owner", f.s.Claim(t.Context(), l.ref(c1), checkpoint.Lease{TTL: ttl}), checkpoint.ErrInvalid)
	wantIs(t, "Claim of a new thread with an empty owner", f.s.Claim(t.Context(), checkpoint.Ref{Thread: "thread-2"}, checkpoint.Lease{TTL: ttl}), checkpoint.ErrInvalid)
	wantIs(t, "DeleteThread with an empty thread", f.s.DeleteThread(t.Context(), ""), checkpoint.ErrInvalid)
	f.unchanged(t, "malformed requests", "thread-1", before)
	n := f.line("thread-2", "")
	n.lease = owned("runner-z")
	n.step(t, set("a", `1`))
}
