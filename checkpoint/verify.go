package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// This file holds the rules stored data obeys: what every saver's Put and
// PutWrites refuse (with ErrInvalid) and what a reader that finds it
// broken reports as a *CorruptError, because only corruption (a disk, a
// bug, a hand edit whose checksum was fixed) can have written it. Special
// writes are decoded as strictly as state is: a value json.Marshal could
// not have written for the write's type (null, a duplicate or
// case-variant key, a lone surrogate escape, invalid UTF-8) is never
// decoded leniently into something else.

// MaxStep is the largest Metadata.Step a checkpoint may have: 2^53 - 1,
// the largest integer every JSON reader holds exactly. Steps start at -1
// (a thread's first input) and grow by one a checkpoint, so that the
// next step is never an overflow.
const MaxStep = 1<<53 - 1

// Compiled strict decoders of the special writes (immutable).
var (
	interruptsJSON = strictjson.For(reflect.TypeFor[[]Interrupt]())
	answersJSON    = strictjson.For(reflect.TypeFor[map[string]json.RawMessage]())
	taskErrorJSON  = strictjson.For(reflect.TypeFor[TaskError]())
	breakpointJSON = strictjson.For(reflect.TypeFor[Breakpoint]())
	stepResultJSON = strictjson.For(reflect.TypeFor[StepResult]())
	sendJSON       = strictjson.For(reflect.TypeFor[StoredSend]())
	sendsJSON      = strictjson.For(reflect.TypeFor[[]StoredSend]())
	joinJSON       = strictjson.For(reflect.TypeFor[[]string]())
	sourceJSON     = strictjson.For(reflect.TypeFor[string]())
)

// StoredSend is the stored form of a Send (a push task): in a
// ChannelSends write one object, in the channel's value a JSON array of
// them. Arg maps state fields to their JSON values.
type StoredSend struct {
	Node string                     `json:"node"`
	Arg  map[string]json.RawMessage `json:"arg"`
}

// errNull: a value json.Marshal never writes as null.
var errNull = errors.New("null, which the runtime never writes here")

// isNull reports whether b is the JSON null (with whitespace).
func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// DecodeInterrupts decodes the value of an __interrupt__ write: a JSON
// array of {"id", "value"} objects with distinct, non-empty IDs. It
// returns an error for anything json.Marshal could not have written for
// the list (null, unknown, duplicate or case-variant keys, a missing
// value, invalid UTF-8, a lone surrogate escape) and for an empty or
// repeated ID; callers report it as a *CorruptError.
func DecodeInterrupts(b []byte) ([]Interrupt, error) {
	if err := interruptsJSON.Check(b); err != nil {
		return nil, err
	}
	if isNull(b) {
		return nil, errNull
	}
	list, ok := readInterrupts(b)
	if !ok {
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, err
		}
	}
	for i, in := range list {
		switch {
		case in.ID == "":
			return nil, fmt.Errorf("interrupt %d has no ID", i)
		case in.Value == nil:
			return nil, fmt.Errorf("interrupt %s has no value", strconv.Quote(in.ID))
		}
		for _, prev := range list[:i] {
			if prev.ID == in.ID {
				return nil, fmt.Errorf("two interrupts with ID %s", strconv.Quote(in.ID))
			}
		}
	}
	return list, nil
}

// readInterrupts reads b, a list strictjson accepted, when it has the
// exact form json.Marshal writes ([{"id":"<id>","value":<value>},...] with
// no space between the parts and an ID without escapes), which is most of
// the cost of reading a waiting thread's state; ok is false otherwise
// (json.Unmarshal then reads it, with the same result).
func readInterrupts(b []byte) (list []Interrupt, ok bool) {
	const idKey, valueKey = `{"id":"`, `","value":`
	if len(b) < 2 || b[0] != '[' {
		return nil, false
	}
	if len(b) == 2 && b[1] == ']' {
		return []Interrupt{}, true
	}
	i := 1
	for {
		if !bytes.HasPrefix(b[i:], []byte(idKey)) {
			return nil, false
		}
		i += len(idKey)
		n := bytes.IndexByte(b[i:], '"')
		if n < 0 {
			return nil, false
		}
		id := b[i : i+n]
		for _, c := range id {
			if c == '\\' || c < 0x20 || c >= 0x80 {
				return nil, false // escapes, control bytes, non-ASCII: Unmarshal's rules
			}
		}
		i += n
		if !bytes.HasPrefix(b[i:], []byte(valueKey)) {
			return nil, false
		}
		i += len(valueKey)
		end := skipValue(b, i)
		if end <= i || end >= len(b) || b[end] != '}' {
			return nil, false
		}
		list = append(list, Interrupt{ID: string(id), Value: bytes.Clone(b[i:end])})
		i = end + 1
		switch {
		case i == len(b)-1 && b[i] == ']':
			return list, true
		case i < len(b) && b[i] == ',':
			i++
		default:
			return nil, false
		}
	}
}

// skipValue returns the end of the JSON value that starts at b[i], as far
// as its brackets and strings go, or i when none ends in b.
func skipValue(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return i
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // a scalar ended by its container
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',':
			if depth == 0 {
				return j
			}
		}
	}
	return i
}

// DecodeAnswers decodes the value of a __resume__ write: a JSON object
// from interrupt ID (non-empty) to answer. It returns an error for null,
// duplicate keys, invalid UTF-8, a lone surrogate escape or an empty ID.
func DecodeAnswers(b []byte) (map[string]json.RawMessage, error) {
	if err := answersJSON.Check(b); err != nil {
		return nil, err
	}
	if isNull(b) {
		return nil, errNull
	}
	var answers map[string]json.RawMessage
	if err := json.Unmarshal(b, &answers); err != nil {
		return nil, err
	}
	if _, ok := answers[""]; ok {
		return nil, errors.New("an answer to an interrupt with an empty ID")
	}
	return answers, nil
}

// DecodeTaskError decodes the value of an __error__ write. It returns an
// error for anything json.Marshal could not have written for a TaskError.
func DecodeTaskError(b []byte) (TaskError, error) {
	var te TaskError
	if err := taskErrorJSON.Check(b); err != nil {
		return te, err
	}
	err := json.Unmarshal(b, &te)
	return te, err
}

// DecodeBreakpoint decodes the value of a __breakpoint__ write. It returns
// an error for anything json.Marshal could not have written for a
// Breakpoint, for a When other than "before" or "after", and for an empty
// node name.
func DecodeBreakpoint(b []byte) (Breakpoint, error) {
	var bp Breakpoint
	if err := breakpointJSON.Check(b); err != nil {
		return bp, err
	}
	if err := json.Unmarshal(b, &bp); err != nil {
		return bp, err
	}
	if bp.When != "before" && bp.When != "after" {
		return bp, fmt.Errorf("breakpoint when %s (want before or after)", strconv.Quote(bp.When))
	}
	for _, n := range bp.Nodes {
		if n == "" {
			return bp, errors.New("breakpoint names an empty node")
		}
	}
	return bp, nil
}

// DecodeStepResult decodes the value of a durable step's "__step__:<n>"
// write. It returns an error for anything json.Marshal could not have
// written for a StepResult, and for a missing result.
func DecodeStepResult(b []byte) (StepResult, error) {
	var sr StepResult
	if err := stepResultJSON.Check(b); err != nil {
		return sr, err
	}
	if err := json.Unmarshal(b, &sr); err != nil {
		return sr, err
	}
	if sr.Result == nil {
		return sr, fmt.Errorf("durable step %s has no result", strconv.Quote(sr.Name))
	}
	return sr, nil
}

// DecodeSend decodes a ChannelSends write: one StoredSend naming a node.
func DecodeSend(b []byte) (StoredSend, error) {
	var s StoredSend
	if err := sendJSON.Check(b); err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.Node == "" {
		return s, errors.New("a Send names an empty node")
	}
	return s, nil
}

// DecodeSends decodes the value of the ChannelSends channel: a JSON array
// of StoredSend, each naming a node.
func DecodeSends(b []byte) ([]StoredSend, error) {
	if err := sendsJSON.Check(b); err != nil {
		return nil, err
	}
	var list []StoredSend
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	for i, s := range list {
		if s.Node == "" {
			return nil, fmt.Errorf("send %d names an empty node", i)
		}
	}
	return list, nil
}

// DecodeJoin decodes the value of a join channel: the JSON array of the
// sources seen so far, each a node name.
func DecodeJoin(b []byte) ([]string, error) {
	if err := joinJSON.Check(b); err != nil {
		return nil, err
	}
	var seen []string
	if err := json.Unmarshal(b, &seen); err != nil {
		return nil, err
	}
	for _, s := range seen {
		if s == "" {
			return nil, errors.New("a join names an empty source")
		}
	}
	return seen, nil
}

// DecodeJoinSource decodes a write to a join channel: the JSON string of
// the source node that wrote it.
func DecodeJoinSource(b []byte) (string, error) {
	if err := sourceJSON.Check(b); err != nil {
		return "", err
	}
	var src string
	if err := json.Unmarshal(b, &src); err != nil {
		return "", err
	}
	if src == "" {
		return "", errors.New("a join write names an empty source")
	}
	return src, nil
}

// checkChannel checks a channel name as stored: non-empty UTF-8, a
// branch or overwrite naming something, a join naming its node and
// sources, a durable step slot spelled as StepChannel spells it.
func checkChannel(ch string) error {
	switch {
	case ch == "":
		return errors.New("empty channel name")
	case !utf8.ValidString(ch):
		return fmt.Errorf("channel %q is not valid UTF-8", ch)
	case strings.HasPrefix(ch, BranchPrefix):
		if ch == BranchPrefix {
			return fmt.Errorf("channel %q names no node", ch)
		}
	case strings.HasPrefix(ch, JoinPrefix):
		// parseJoin's rule, without splitting: sources, ':', a node.
		rest := ch[len(JoinPrefix):]
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 || i == len(rest)-1 {
			return fmt.Errorf("channel %q is not join:<sources>:<node>", ch)
		}
		if srcs := rest[:i]; srcs[0] == '+' || srcs[len(srcs)-1] == '+' || strings.Contains(srcs, "++") {
			return fmt.Errorf("channel %q names an empty source", ch)
		}
	case strings.HasPrefix(ch, ChannelStepPrefix):
		if stepSlot(ch) < 0 {
			return fmt.Errorf("channel %q is not a durable step slot %s<n>", ch, ChannelStepPrefix)
		}
	case strings.HasPrefix(ch, overwritePrefix):
		if ch == overwritePrefix {
			return fmt.Errorf("channel %q names no field", ch)
		}
	}
	return nil
}

// overwritePrefix marks a write that replaces a field's value (package
// graph's stored form).
const overwritePrefix = "__overwrite__:"

// checkWrite checks one write's channel and value: a special write must
// decode strictly as its type, a Send or join write as its form, and any
// other value must be JSON as json.Marshal writes it (valid UTF-8, no lone
// surrogate escape, no duplicate key).
func checkWrite(channel string, value []byte) error {
	if err := checkChannel(channel); err != nil {
		return err
	}
	var err error
	switch {
	case channel == ChannelInterrupt:
		_, err = DecodeInterrupts(value)
	case channel == ChannelResume:
		_, err = DecodeAnswers(value)
	case channel == ChannelError:
		_, err = DecodeTaskError(value)
	case channel == ChannelBreakpoint:
		_, err = DecodeBreakpoint(value)
	case strings.HasPrefix(channel, ChannelStepPrefix):
		_, err = DecodeStepResult(value)
	case channel == ChannelSends:
		_, err = DecodeSend(value)
	case strings.HasPrefix(channel, JoinPrefix):
		// DecodeJoinSource without the copy: a string, not "".
		if err = sourceJSON.Check(value); err == nil && string(bytes.TrimSpace(value)) == `""` {
			err = errors.New("a join write names an empty source")
		}
	default:
		err = strictjson.CheckJSON(value)
	}
	return err
}

// interruptIDs adds the interrupt IDs of an __interrupt__ write of task to
// seen (ID → task) and returns an error naming an ID another task raised
// too. The write must have passed checkWrite.
func interruptIDs(seen map[string]string, task string, value []byte) error {
	list, err := DecodeInterrupts(value)
	if err != nil {
		return err
	}
	for _, in := range list {
		if other, dup := seen[in.ID]; dup && other != task {
			return fmt.Errorf("tasks %q and %q both raised interrupt %s", other, task, strconv.Quote(in.ID))
		}
		seen[in.ID] = task
	}
	return nil
}

// checkPending checks a checkpoint's pending writes: each as checkWrite
// does, with a task ID, and no interrupt ID raised by two tasks.
func checkPending(writes []PendingWrite) (*PendingWrite, error) {
	var seen map[string]string
	for i := range writes {
		w := &writes[i]
		if w.TaskID == "" {
			return w, errors.New("a write without a task ID")
		}
		if w.Channel != ChannelInterrupt {
			if err := checkWrite(w.Channel, w.Value); err != nil {
				return w, err
			}
			continue
		}
		if seen == nil {
			seen = map[string]string{}
		}
		if err := interruptIDs(seen, w.TaskID, w.Value); err != nil { // decodes it strictly
			return w, err
		}
	}
	return nil, nil
}

// checkCheckpoint checks what a checkpoint's fields say of each other and
// of its place in the thread: an ID that sorts after its parent's, a step
// from -1 to MaxStep, versions that name this checkpoint or an earlier
// one, channel names as checkChannel wants them, a mark no newer than the
// checkpoint, and, for the channels it holds, chains of blobs that link
// up to the channel's version.
func checkCheckpoint(cp *Checkpoint) error {
	switch {
	case cp.ID == "":
		return errors.New("empty checkpoint ID")
	case cp.ParentID != "" && cp.ParentID >= cp.ID:
		return fmt.Errorf("its ID does not sort after its parent %q", cp.ParentID)
	case cp.Metadata.Step < -1 || cp.Metadata.Step > MaxStep:
		return fmt.Errorf("step %d is outside -1 to %d", cp.Metadata.Step, MaxStep)
	case cp.Mark > cp.ID:
		return fmt.Errorf("its mark %q sorts after it", cp.Mark)
	}
	for ch, v := range cp.Versions {
		if err := checkChannel(ch); err != nil {
			return err
		}
		if v == "" || v > cp.ID {
			return fmt.Errorf("channel %q has version %q, which is not this checkpoint or an earlier one", ch, v)
		}
	}
	for ch, blobs := range cp.Channels {
		v, ok := cp.Versions[ch]
		if !ok {
			return fmt.Errorf("channel %q has data but no version", ch)
		}
		for i, b := range blobs {
			switch {
			case b.Version == "" || b.Version > cp.ID:
				return fmt.Errorf("channel %q: a blob of version %q", ch, b.Version)
			case b.Append && b.Base != "" && b.Base >= b.Version:
				return fmt.Errorf("channel %q: blob %q extends %q, which does not sort before it", ch, b.Version, b.Base)
			case i > 0 && (!b.Append || b.Base != blobs[i-1].Version):
				return fmt.Errorf("channel %q: blob %q does not extend the blob before it, %q", ch, b.Version, blobs[i-1].Version)
			}
		}
		if len(blobs) > 0 && blobs[len(blobs)-1].Version != v {
			return fmt.Errorf("channel %q: its blobs end at version %q, not at its version %q", ch, blobs[len(blobs)-1].Version, v)
		}
	}
	return nil
}

// VerifyCheckpoint reports a checkpoint that breaks a rule every saver's
// Put enforces (see ValidatePut), as only corruption can have stored it:
// an ID that does not sort after its parent's, a step outside -1 to
// MaxStep, a version newer than the checkpoint, a channel name that names
// no node (a branch "branch:to:" with nothing after it would hide its
// task), a chain of blobs that does not link up. Savers call it on what
// they read; it returns nil or a *CorruptError naming thread and
// checkpoint.
func VerifyCheckpoint(thread string, cp *Checkpoint) error {
	if err := checkCheckpoint(cp); err != nil {
		return &CorruptError{Thread: thread, Checkpoint: cp.ID, What: "checkpoint", Err: err}
	}
	return nil
}

// VerifyStep reports a checkpoint whose step does not follow its
// parent's: each checkpoint's step is its parent's plus one, and Put
// refuses a step that is not greater. It returns nil or a *CorruptError
// naming thread and checkpoint.
func VerifyStep(thread string, cp *Checkpoint, parentStep int) error {
	if cp.Metadata.Step <= parentStep {
		return &CorruptError{Thread: thread, Checkpoint: cp.ID, What: "checkpoint",
			Err: fmt.Errorf("step %d does not follow its parent %q's step %d", cp.Metadata.Step, cp.ParentID, parentStep)}
	}
	return nil
}

// VerifyPending reports pending writes of checkpoint id of thread that
// PutWrites would refuse: a special write (error, interrupt, resume
// answers, breakpoint marker, durable step) that does not decode strictly
// as its type, a Send or join write that names nothing, a value that is
// not JSON as json.Marshal writes it, a write without a task, an
// interrupt ID raised by two tasks. It returns nil or a *CorruptError
// naming thread, checkpoint, task and channel.
func VerifyPending(thread, id string, writes []PendingWrite) error {
	if w, err := checkPending(writes); err != nil {
		return &CorruptError{Thread: thread, Checkpoint: id,
			What: fmt.Sprintf("pending write of task %q channel %q", w.TaskID, w.Channel), Err: err}
	}
	return nil
}

// VerifyTuple is VerifyCheckpoint and VerifyPending of a tuple.
func VerifyTuple(tp *Tuple) error {
	if err := VerifyCheckpoint(tp.Thread, &tp.Checkpoint); err != nil {
		return err
	}
	return VerifyPending(tp.Thread, tp.Checkpoint.ID, tp.Pending)
}
