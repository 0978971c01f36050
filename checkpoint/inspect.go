package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lockstepgo/lockstep/interrupt"
)

// TaskID derives the ID of a task from its thread, the checkpoint its step
// starts from, the namespace, the step, the node, the task's path ("pull" or
// "push:<n>") and its sorted trigger channels. The same pending task always
// gets the same ID, which is how saved writes find their task again; tasks
// of different threads never share one, even when checkpoint IDs repeat.
func TaskID(thread, checkpointID, ns string, step int, node, path string, triggers []string) string {
	// The hash input is built in a buffer that stays on the stack for
	// usual sizes (a sha256.New digest escapes to the heap); the bytes
	// hashed are the same: each part followed by a zero byte.
	var buf [256]byte
	in := buf[:0]
	for _, s := range []string{thread, checkpointID, ns} {
		in = append(append(in, s...), 0)
	}
	in = append(strconv.AppendInt(in, int64(step), 10), 0)
	in = append(append(in, node...), 0)
	in = append(append(in, path...), 0)
	for _, s := range triggers {
		in = append(append(in, s...), 0)
	}
	sum := sha256.Sum256(in)
	b := sum[:]
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:16])
	return string(out[:])
}

// Materialize returns the JSON value of a channel from its blobs, oldest
// first (a full value, or append blobs whose JSON arrays are concatenated).
// It returns an error when a blob is not the JSON the chain needs.
func Materialize(blobs []Blob) (json.RawMessage, error) {
	if len(blobs) == 0 {
		return nil, fmt.Errorf("no blobs")
	}
	if len(blobs) == 1 && !blobs[0].Append {
		return blobs[0].Data, nil
	}
	var items []json.RawMessage
	for i, b := range blobs {
		var part []json.RawMessage
		if err := json.Unmarshal(b.Data, &part); err != nil {
			if i == 0 && !b.Append {
				return nil, fmt.Errorf("base of an append chain is not an array: %w", err)
			}
			return nil, fmt.Errorf("blob %q: %w", b.Version, err)
		}
		if !b.Append {
			items = items[:0]
		}
		items = append(items, part...)
	}
	if items == nil {
		return json.RawMessage("[]"), nil
	}
	return json.Marshal(items)
}

// Interrupt is an interrupt as stored: its ID and JSON value (the
// interrupt package's type; an __interrupt__ write holds a JSON array of
// them, see DecodeInterrupts).
type Interrupt = interrupt.Interrupt

// InspectedTask is a task of the step that follows a checkpoint.
type InspectedTask struct {
	ID         string
	Name       string
	Path       string // "pull" or "push:<n>"
	Error      *TaskError
	Interrupts []Interrupt
	Answered   map[string]json.RawMessage
	// Result holds the task's field writes once it finished (nil until
	// then), by field name.
	Result map[string]json.RawMessage
}

// Done reports whether the task finished (has writes).
func (t *InspectedTask) Done() bool { return t.Result != nil }

// Status returns where the task stands: "done" (it has writes), "waiting"
// (an interrupt without an answer), "failed" (an error and nothing
// waiting) or "pending" (not run yet, or stopped before it finished).
func (t *InspectedTask) Status() string {
	switch {
	case t.Done():
		return "done"
	case len(t.Pending()) > 0:
		return "waiting"
	case t.Error != nil:
		return "failed"
	}
	return "pending"
}

// Pending returns the task's interrupts that have no answer, unless the task
// finished.
func (t *InspectedTask) Pending() []Interrupt {
	if t.Done() {
		return nil
	}
	var out []Interrupt
	for _, in := range t.Interrupts {
		if _, ok := t.Answered[in.ID]; !ok {
			out = append(out, in)
		}
	}
	return out
}

// Inspection is what a checkpoint says about its thread, read from stored
// data alone (no graph code): the state channels as JSON, the tasks of the
// next step with their saved writes, and the status.
type Inspection struct {
	Values     map[string]json.RawMessage // state channels (runtime channels left out)
	Tasks      []InspectedTask
	Next       []string // unfinished tasks (all tasks when not latest), Sends first as package graph lists them
	Status     string   // "done", "waiting", "failed" or "pending"
	Breakpoint *Breakpoint
	Interrupts []Interrupt // pending ones
}

// Inspect reads a tuple as package graph would: it plans the next step's
// tasks from the stored scheduling channels (and command writes), attaches
// the pending writes and computes the status. latest says the tuple is the
// thread's head. The tuple must hold whole blob chains (no GetOptions.Have).
// It returns a *CorruptError for data it cannot read.
func Inspect(tp *Tuple, latest bool) (*Inspection, error) {
	cp := &tp.Checkpoint
	corrupt := func(what string, err error) error {
		return &CorruptError{Thread: tp.Thread, Checkpoint: cp.ID, What: what, Err: err}
	}
	if err := VerifyTuple(tp); err != nil {
		return nil, err
	}
	in := &Inspection{Values: map[string]json.RawMessage{}}
	triggers := map[string][]string{} // node → trigger channels
	joins := map[string][]string{}    // join channel → sources seen
	var sends []StoredSend
	start := false
	for ch := range cp.Versions {
		blobs := cp.Channels[ch]
		switch {
		case strings.HasPrefix(ch, BranchPrefix):
			node := strings.TrimPrefix(ch, BranchPrefix)
			triggers[node] = append(triggers[node], ch)
		case strings.HasPrefix(ch, JoinPrefix):
			v, err := Materialize(blobs)
			if err != nil {
				return nil, corrupt("channel "+ch, err)
			}
			seen, err := DecodeJoin(v)
			if err != nil {
				return nil, corrupt("channel "+ch, err)
			}
			joins[ch] = seen
		case ch == ChannelSends:
			v, err := Materialize(blobs)
			if err != nil {
				return nil, corrupt("channel "+ch, err)
			}
			if sends, err = DecodeSends(v); err != nil {
				return nil, corrupt("channel "+ch, err)
			}
		case ch == ChannelStart:
			start = true
		case strings.HasPrefix(ch, "__"):
		default:
			v, err := Materialize(blobs)
			if err != nil {
				return nil, corrupt("channel "+ch, err)
			}
			in.Values[ch] = v
		}
	}
	// Command writes add triggers and Sends before the step is planned.
	for _, w := range tp.Pending {
		if !IsCommandTask(w.TaskID) || IsSpecial(w.Channel) {
			continue
		}
		switch {
		case strings.HasPrefix(w.Channel, BranchPrefix):
			node := strings.TrimPrefix(w.Channel, BranchPrefix)
			if !slices.Contains(triggers[node], w.Channel) {
				triggers[node] = append(triggers[node], w.Channel)
			}
		case w.Channel == ChannelSends:
			s, err := DecodeSend(w.Value)
			if err != nil {
				return nil, corrupt("command write", err)
			}
			sends = append(sends, s)
		}
	}
	for ch, seen := range joins {
		node, srcs, ok := parseJoin(ch)
		if !ok {
			return nil, corrupt("channel "+ch, fmt.Errorf("malformed join channel name"))
		}
		complete := true
		for _, s := range srcs {
			if !slices.Contains(seen, s) {
				complete = false
			}
		}
		if complete {
			triggers[node] = append(triggers[node], ch)
		}
	}
	// The order package graph plans them in: Sends by index, the start
	// task, then pull tasks by node name.
	step := cp.Metadata.Step + 1
	for i, s := range sends {
		path := "push:" + strconv.Itoa(i)
		in.Tasks = append(in.Tasks, InspectedTask{Name: s.Node, Path: path, ID: TaskID(tp.Thread, cp.ID, tp.NS, step, s.Node, path, []string{ChannelSends})})
	}
	if start {
		in.Tasks = append(in.Tasks, InspectedTask{Name: "__start__", Path: "pull", ID: TaskID(tp.Thread, cp.ID, tp.NS, step, "__start__", "pull", []string{ChannelStart})})
	}
	nodes := make([]string, 0, len(triggers))
	for n := range triggers {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		trig := triggers[n]
		slices.Sort(trig)
		in.Tasks = append(in.Tasks, InspectedTask{Name: n, Path: "pull", ID: TaskID(tp.Thread, cp.ID, tp.NS, step, n, "pull", trig)})
	}
	byID := map[string]*InspectedTask{}
	for i := range in.Tasks {
		byID[in.Tasks[i].ID] = &in.Tasks[i]
	}
	for _, w := range tp.Pending {
		if w.TaskID == NullTaskID && w.Channel == ChannelBreakpoint {
			bp, err := DecodeBreakpoint(w.Value)
			if err != nil {
				return nil, corrupt("breakpoint marker", err)
			}
			in.Breakpoint = &bp
			continue
		}
		t := byID[w.TaskID]
		if t == nil {
			continue
		}
		var err error
		switch {
		case w.Channel == ChannelError:
			var te TaskError
			te, err = DecodeTaskError(w.Value)
			t.Error = &te
		case w.Channel == ChannelInterrupt:
			t.Interrupts, err = DecodeInterrupts(w.Value)
		case w.Channel == ChannelResume:
			t.Answered, err = DecodeAnswers(w.Value)
		case IsSpecial(w.Channel):
		default:
			if t.Result == nil {
				t.Result = map[string]json.RawMessage{}
			}
			if field, ok := resultField(w.Channel); ok {
				t.Result[field] = w.Value
			}
		}
		if err != nil {
			return nil, corrupt(w.Channel+" write of task "+t.ID, err)
		}
	}
	failed, waiting, open := false, in.Breakpoint != nil, false
	for i := range in.Tasks {
		t := &in.Tasks[i]
		if !t.Done() || !latest {
			in.Next = append(in.Next, t.Name)
		}
		if t.Done() {
			continue
		}
		open = true
		p := t.Pending()
		in.Interrupts = append(in.Interrupts, p...)
		switch {
		case len(p) > 0:
			waiting = true
		case t.Error != nil:
			failed = true
		}
	}
	switch {
	case len(in.Tasks) == 0:
		in.Status = "done"
	case failed:
		in.Status = "failed"
	case waiting:
		in.Status = "waiting"
	case open || latest:
		in.Status = "pending"
	default:
		in.Status = "done"
	}
	return in, nil
}

// resultField maps a stored write channel to the state field it writes, if
// it writes one.
func resultField(ch string) (string, bool) {
	ch = strings.TrimPrefix(ch, "__overwrite__:")
	if strings.HasPrefix(ch, "__") || strings.HasPrefix(ch, BranchPrefix) || strings.HasPrefix(ch, JoinPrefix) {
		return "", false
	}
	return ch, true
}

// parseJoin splits "join:a+b:x" into x and [a b].
func parseJoin(ch string) (node string, sources []string, ok bool) {
	rest := strings.TrimPrefix(ch, JoinPrefix)
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return "", nil, false
	}
	return rest[i+1:], strings.Split(rest[:i], "+"), true
}

// CompactJSON returns v without insignificant whitespace, for display.
func CompactJSON(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}
