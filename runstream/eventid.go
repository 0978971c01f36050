package runstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The ordinals of an event ID: what an event is within its checkpoint.
const (
	ordValues = 0 // the state at the checkpoint
	ordStop   = 1 // where the thread stopped there: interrupt, failed or done
	ordUpdate = 2 // the update of the step's task i is ordUpdate+i
)

// Bounds of an event ID.
const (
	// MaxEventIDBytes bounds a Last-Event-ID the handler reads.
	MaxEventIDBytes = 320
	maxCheckpointID = 256
	maxOrdinal      = 999999 // six digits: a step has fewer tasks than this
	digestLen       = 16     // hex digits of a stop event's digest
)

// EventID names a durable event of a thread's stream. It is derived from
// what the database holds: the checkpoint whose record holds the event,
// and the event's ordinal in it (0: the state at the checkpoint; 1: where
// the thread stopped at it; 2+i: the update of the i-th task, in plan
// order, of the step that followed it). A stop event also carries a
// digest of what it says, so that a thread that stops at one checkpoint
// again, differently (a resume asked a second question), gets a new ID.
//
// Its text is "<checkpoint>.<ordinal>" or "<checkpoint>.1.<digest>", the
// digest 16 lowercase hex digits. Event IDs of one thread sort as its
// events happened: by checkpoint (checkpoint IDs sort in the order they
// were written), then by ordinal.
type EventID struct {
	Checkpoint string
	Ordinal    int
	Digest     string // set exactly when Ordinal is 1
}

// String returns the ID's text, as the handler sends it and ParseEventID
// reads it.
func (id EventID) String() string {
	s := id.Checkpoint + "." + strconv.Itoa(id.Ordinal)
	if id.Ordinal == ordStop {
		s += "." + id.Digest
	}
	return s
}

// ErrBadEventID matches every *EventIDError for a Last-Event-ID that is
// not one the handler could have sent (the handler answers 400).
var ErrBadEventID = errors.New("runstream: malformed event ID")

// ErrUnknownEventID matches every *EventIDError for a well-formed event
// ID that names no event of the thread: an ID of another thread, of a
// checkpoint that was pruned or deleted, or of a task the step does not
// have (the handler answers 400). The client starts again without
// Last-Event-ID, from the thread's current state; nothing is replayed
// in its place.
var ErrUnknownEventID = errors.New("runstream: event ID names no event of this thread")

// EventIDError is a Last-Event-ID the handler refused. It matches
// ErrBadEventID or ErrUnknownEventID.
type EventIDError struct {
	ID     string // the ID as received, cut to MaxEventIDBytes
	Thread string // the thread it was sent for; "" from ParseEventID
	Reason string
	Err    error // ErrBadEventID or ErrUnknownEventID
}

// Error names the ID, the thread and why it was refused, and says what
// to do.
func (e *EventIDError) Error() string {
	where := ""
	if e.Thread != "" {
		where = fmt.Sprintf(" for thread %q", e.Thread)
	}
	return fmt.Sprintf("runstream: Last-Event-ID %q%s: %s; reconnect without Last-Event-ID to start from the thread's current state",
		e.ID, where, e.Reason)
}

// Unwrap returns ErrBadEventID or ErrUnknownEventID.
func (e *EventIDError) Unwrap() error { return e.Err }

// ParseEventID reads an event ID the handler sent. It returns an
// *EventIDError matching ErrBadEventID for any other text: longer than
// MaxEventIDBytes, without an ordinal, an ordinal that is not canonical
// decimal (no sign, no leading zero) or above 999999, a stop event
// without its digest or another event with one, or a checkpoint ID that
// is empty, longer than 256 bytes, or holds a byte outside printable
// ASCII.
func ParseEventID(s string) (EventID, error) {
	bad := func(reason string) (EventID, error) {
		if len(s) > MaxEventIDBytes {
			s = s[:MaxEventIDBytes]
		}
		return EventID{}, &EventIDError{ID: s, Reason: reason, Err: ErrBadEventID}
	}
	if len(s) > MaxEventIDBytes {
		return bad("longer than " + strconv.Itoa(MaxEventIDBytes) + " bytes")
	}
	rest, last, ok := cutLast(s)
	if !ok {
		return bad("no ordinal")
	}
	var id EventID
	if n, ok := ordinal(last); ok {
		if n == ordStop {
			return bad("a stop event's ID ends with its digest")
		}
		id = EventID{Checkpoint: rest, Ordinal: n}
	} else {
		if !isDigest(last) {
			return bad("the ordinal is not a decimal number up to 999999")
		}
		cp, ord, ok := cutLast(rest)
		if !ok || ord != "1" {
			return bad("a digest follows only the ordinal 1")
		}
		id = EventID{Checkpoint: cp, Ordinal: ordStop, Digest: last}
	}
	if reason := checkCheckpointID(id.Checkpoint); reason != "" {
		return bad(reason)
	}
	return id, nil
}

// checkCheckpointID says what keeps cp out of an event ID ("" when
// nothing does).
func checkCheckpointID(cp string) string {
	if cp == "" {
		return "empty checkpoint ID"
	}
	if len(cp) > maxCheckpointID {
		return "checkpoint ID longer than " + strconv.Itoa(maxCheckpointID) + " bytes"
	}
	for i := 0; i < len(cp); i++ {
		if c := cp[i]; c <= ' ' || c > '~' {
			return "checkpoint ID holds a byte outside printable ASCII"
		}
	}
	return ""
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// ordinal reads canonical decimal up to maxOrdinal.
func ordinal(s string) (int, bool) {
	if s == "" || len(s) > 6 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= maxOrdinal
}

func isDigest(s string) bool {
	if len(s) != digestLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
