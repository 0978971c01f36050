package runstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
)

// ErrTooManyClients: MaxClients streams are open (503).
var ErrTooManyClients = errors.New("runstream: too many open streams; retry later")

// ErrClosed: the Hub was closed (503).
var ErrClosed = errors.New("runstream: the hub is closed")

// ErrTooFarBehind: more than MaxReplay checkpoints were saved after the
// client's Last-Event-ID (410). The client starts again without
// Last-Event-ID, from the thread's current state.
var ErrTooFarBehind = errors.New("runstream: the client is too far behind to replay; reconnect without Last-Event-ID to start from the thread's current state")

// The SSE event names.
const (
	EventValues    = "values"    // durable: the state at a checkpoint
	EventUpdates   = "updates"   // durable: one task's writes in a saved step
	EventInterrupt = "interrupt" // durable: the thread waits (interrupts, or a static breakpoint)
	EventFailed    = "failed"    // durable: a task of the next step failed
	EventDone      = "done"      // durable: the run ended with no task left
	EventMessages  = "messages"  // best effort: a chunk of a model's output
	EventCustom    = "custom"    // best effort: a value a node emitted
	EventError     = "error"     // the stream failed and ends; reconnect with Last-Event-ID
)

// The data of the events (JSON).
type (
	valuesData struct {
		Checkpoint string          `json:"checkpoint"`
		Step       int             `json:"step"`
		Values     json.RawMessage `json:"values"`
	}
	updateData struct {
		Checkpoint string                     `json:"checkpoint"` // the step's starting checkpoint, whose record holds the writes
		Step       int                        `json:"step"`
		Node       string                     `json:"node"`
		Task       string                     `json:"task"`
		Update     map[string]json.RawMessage `json:"update"`
	}
	interruptData struct {
		Checkpoint string                 `json:"checkpoint"`
		Step       int                    `json:"step"`
		Interrupts []interrupt.Interrupt  `json:"interrupts"`
		Next       []string               `json:"next"`
		Breakpoint *checkpoint.Breakpoint `json:"breakpoint,omitempty"`
	}
	failedData struct {
		Checkpoint string      `json:"checkpoint"`
		Step       int         `json:"step"`
		Errors     []taskError `json:"errors"`
		Next       []string    `json:"next"`
	}
	taskError struct {
		Task    string `json:"task"`
		Node    string `json:"node"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	doneData struct {
		Checkpoint string `json:"checkpoint"`
		Step       int    `json:"step"`
	}
	liveData struct {
		NS   string          `json:"ns,omitempty"`
		Step int             `json:"step"`
		Node string          `json:"node"`
		Task string          `json:"task"`
		Data json.RawMessage `json:"data"`
	}
	truncatedData struct {
		Checkpoint string `json:"checkpoint"`
		Step       int    `json:"step"`
		Node       string `json:"node,omitempty"`
		Task       string `json:"task,omitempty"`
		Truncated  bool   `json:"truncated"`
		Bytes      int    `json:"bytes"`
	}
	errorData struct {
		Message string `json:"message"`
	}
)

// ServeHTTP streams the thread's events as server-sent events (see the
// package doc). Before the stream starts it answers 400 for a bad thread
// ID or Last-Event-ID (ErrBadEventID, ErrUnknownEventID), 403 when
// Authorize refuses, 410 (ErrTooFarBehind), 503 when MaxClients streams
// are open or the Hub is closed, 500 when the saver fails. Once started,
// the stream runs until the client goes away, the request's context ends
// or Close is called; a failure then sends an error event and ends it.
func (h *Hub[S]) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	thread, ok := h.thread(w, req)
	if !ok {
		return
	}
	raw := req.Header.Get("Last-Event-ID")
	if raw == "" {
		raw = req.URL.Query().Get("last_event_id")
	}
	if err := validThread(thread); err != nil {
		h.refuse(w, thread, err)
		return
	}
	f, err := h.join(thread)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.leave(thread, f)
	st := &stream[S]{h: h, thread: thread}
	if err := st.start(ctx, raw); err != nil {
		h.refuse(w, thread, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	hd.Set("X-Content-Type-Options", "nosniff")
	st.w = &sse{w: w, rc: http.NewResponseController(w), timeout: h.opts.WriteTimeout}
	w.WriteHeader(http.StatusOK)
	if err := st.w.flush(); err != nil {
		return
	}
	if err := st.follow(ctx, f); err != nil && ctx.Err() == nil {
		h.log.Info("runstream: stream ended", "thread", thread, "error", err.Error())
		if !errors.Is(err, errWrite) {
			_ = st.w.event("", EventError, mustJSON(errorData{Message: publicMessage(err)}))
		}
	}
}

// thread reads and authorizes the request's thread, answering the
// request itself when it refuses.
func (h *Hub[S]) thread(w http.ResponseWriter, req *http.Request) (string, bool) {
	var thread string
	var aerr error
	p := safe.Call(func() {
		if h.opts.Thread != nil {
			thread = h.opts.Thread(req)
		} else {
			thread = req.PathValue("thread")
		}
	})
	if p == nil && thread != "" {
		p = safe.Call(func() { aerr = h.opts.Authorize(req, thread) })
	}
	switch {
	case p != nil:
		h.log.Warn("runstream: Options.Thread or Authorize panicked; the request is refused", "panic", p.String())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return "", false
	case thread == "":
		http.Error(w, "runstream: the request names no thread", http.StatusBadRequest)
		return "", false
	case aerr != nil:
		h.log.Info("runstream: Authorize refused a stream", "thread", thread, "error", aerr.Error())
		http.Error(w, "forbidden", http.StatusForbidden)
		return "", false
	}
	return thread, true
}

// refuse answers a stream that could not start.
func (h *Hub[S]) refuse(w http.ResponseWriter, thread string, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadEventID), errors.Is(err, ErrUnknownEventID), errors.Is(err, graph.ErrInvalidInput):
		code = http.StatusBadRequest
	case errors.Is(err, ErrTooFarBehind):
		code = http.StatusGone
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return // the client went away
	}
	if code == http.StatusInternalServerError {
		h.log.Warn("runstream: a stream could not start", "thread", thread, "error", err.Error())
		http.Error(w, "runstream: the thread could not be read; retry later", code)
		return
	}
	http.Error(w, err.Error(), code)
}

// publicMessage is what an error event says of err.
func publicMessage(err error) string {
	if errors.Is(err, ErrTooFarBehind) {
		return ErrTooFarBehind.Error()
	}
	return "runstream: the stream failed; reconnect with Last-Event-ID"
}

// stream is one client's position in its thread's events.
type stream[S any] struct {
	h      *Hub[S]
	thread string
	w      *sse

	// at is the last event sent (or, before any, what the client said it
	// had): every event of a checkpoint before at.Checkpoint, and of
	// at.Checkpoint those up to at.Ordinal. at.Ordinal -1: none of
	// at.Checkpoint; at.Checkpoint "": nothing at all.
	at EventID
	// snap is the snapshot of at.Checkpoint when it was read last.
	snap *graph.Snapshot[S]
	// seen is the fingerprint of the thread's head when it was read last.
	seen string
}

// start places the stream: after raw (a Last-Event-ID), or at the
// thread's head when raw is "", so that a new client gets the current
// state and where the thread stands, never the whole history.
func (st *stream[S]) start(ctx context.Context, raw string) error {
	if raw == "" {
		tps, err := st.h.r.Saver().List(ctx, st.thread, checkpoint.ListOptions{Limit: 1, MetadataOnly: true})
		if err != nil {
			return err
		}
		if len(tps) > 0 {
			st.at = EventID{Checkpoint: tps[0].Checkpoint.ID, Ordinal: -1}
		}
		return st.check(ctx)
	}
	id, err := ParseEventID(raw)
	if err != nil {
		var ie *EventIDError
		if errors.As(err, &ie) {
			ie.Thread = st.thread
		}
		return err
	}
	unknown := func(reason string) error {
		return &EventIDError{ID: raw, Thread: st.thread, Reason: reason, Err: ErrUnknownEventID}
	}
	s, err := st.h.r.GetStateAt(ctx, st.thread, id.Checkpoint)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return unknown("the thread has no such checkpoint")
	}
	if err != nil {
		return err
	}
	if id.Ordinal >= ordUpdate && id.Ordinal-ordUpdate >= len(s.Tasks) {
		return unknown("the checkpoint's step has no such task")
	}
	st.at, st.snap = id, &s
	return st.check(ctx)
}

// check lists what the first catch-up will read, so that a client too
// far behind is refused before the stream starts.
func (st *stream[S]) check(ctx context.Context) error {
	_, err := st.after(ctx)
	return err
}

// after lists the checkpoints of the thread's root graph after
// at.Checkpoint, oldest first, without their state; ErrTooFarBehind
// when there are more than MaxReplay.
func (st *stream[S]) after(ctx context.Context) ([]*checkpoint.Tuple, error) {
	const page = 128
	var out []*checkpoint.Tuple
	before := ""
	for {
		tps, err := st.h.r.Saver().List(ctx, st.thread, checkpoint.ListOptions{Before: before, Limit: page, MetadataOnly: true})
		if err != nil {
			return nil, err
		}
		for _, tp := range tps {
			if tp.Checkpoint.ID <= st.at.Checkpoint {
				slices.Reverse(out)
				return out, nil
			}
			if len(out) == st.h.opts.MaxReplay {
				return nil, ErrTooFarBehind
			}
			out = append(out, tp)
		}
		if len(tps) < page {
			slices.Reverse(out)
			return out, nil
		}
		before = tps[len(tps)-1].Checkpoint.ID
	}
}

// follow sends the catch-up, then what the thread does, until ctx ends,
// the Hub closes or a write fails.
func (st *stream[S]) follow(ctx context.Context, f *follower) error {
	if err := st.catchUp(ctx, true, ""); err != nil {
		return err
	}
	poll := time.NewTimer(st.h.opts.PollInterval)
	defer poll.Stop()
	for {
		wake := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.h.done:
			return nil
		case <-f.signal:
		case <-poll.C:
			wake = true
			poll.Reset(st.h.opts.PollInterval)
		}
		items, missed, n := f.take()
		if missed {
			wake = true // a wake-up found the inbox full
		}
		if n > 0 {
			st.h.log.Info("runstream: a slow client lost best-effort events", "thread", st.thread, "dropped", n)
		}
		for _, it := range items {
			if it.wake {
				if err := st.catchUp(ctx, false, it.upto); err != nil {
					return err
				}
				continue
			}
			if err := st.w.event("", it.name, it.data); err != nil {
				return err
			}
		}
		if wake {
			if err := st.catchUp(ctx, false, ""); err != nil {
				return err
			}
		}
		if time.Since(st.w.last) >= st.h.opts.KeepAlive {
			if err := st.w.comment(); err != nil {
				return err
			}
		}
	}
}

// catchUp sends the durable events saved after at, unless the thread's
// head is as it was when it last looked (force: look anyway). With upto
// set it sends those of the checkpoints up to upto only, none of them
// as the head's: a live run announced upto, and the best-effort events
// it queued behind that announcement belong before what it saved next.
func (st *stream[S]) catchUp(ctx context.Context, force bool, upto string) error {
	fp, err := st.fingerprint(ctx)
	if err != nil {
		return err
	}
	if !force && fp == st.seen {
		return nil
	}
	tps, err := st.after(ctx)
	if err != nil {
		return err
	}
	all := true
	if upto != "" {
		for i, tp := range tps {
			if tp.Checkpoint.ID > upto {
				tps, all = tps[:i], false
				break
			}
		}
		if upto < st.at.Checkpoint {
			return nil
		}
	}
	if st.at.Checkpoint != "" {
		var next *checkpoint.Tuple
		if len(tps) > 0 {
			next = tps[0]
		}
		// Read it again unless start just did, or nothing can change it:
		// a checkpoint with no task gets no write.
		if st.snap == nil || st.snap.Config.CheckpointID != st.at.Checkpoint || (!force && len(st.snap.Tasks) > 0) {
			s, err := st.h.r.GetStateAt(ctx, st.thread, st.at.Checkpoint)
			if err != nil {
				return err
			}
			st.snap = &s
		}
		if err := st.send(ctx, st.snap, next, all && len(tps) == 0); err != nil {
			return err
		}
	}
	for i, tp := range tps {
		var next *checkpoint.Tuple
		if i+1 < len(tps) {
			next = tps[i+1]
		}
		s, err := st.h.r.GetStateAt(ctx, st.thread, tp.Checkpoint.ID)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue // pruned while we read
		}
		if err != nil {
			return err
		}
		st.at, st.snap = EventID{Checkpoint: tp.Checkpoint.ID, Ordinal: -1}, &s
		if err := st.send(ctx, &s, next, all && i == len(tps)-1); err != nil {
			return err
		}
	}
	if all {
		st.seen = fp
	}
	return nil
}

// send sends the events of s's checkpoint after at: its values, where
// the thread stopped there (head: whether it is the thread's head as
// listed), and, when next is the checkpoint its step saved, the updates
// of that step's tasks.
func (st *stream[S]) send(ctx context.Context, s *graph.Snapshot[S], next *checkpoint.Tuple, head bool) error {
	cp, step := s.Config.CheckpointID, s.Metadata.Step
	if reason := checkCheckpointID(cp); reason != "" {
		return fmt.Errorf("runstream: thread %q checkpoint %q cannot be named in an event ID: %s", st.thread, cp, reason)
	}
	if st.at.Ordinal < ordValues {
		values, ok := st.h.encodeState(ctx, s.Values)
		if !ok {
			return fmt.Errorf("runstream: thread %q checkpoint %s: the state does not encode as JSON", st.thread, cp)
		}
		d := valuesData{Checkpoint: cp, Step: step, Values: values}
		if err := st.durable(EventID{Checkpoint: cp, Ordinal: ordValues}, EventValues, d, truncatedData{Checkpoint: cp, Step: step}); err != nil {
			return err
		}
	}
	if st.at.Ordinal <= ordStop {
		if name, d := stopOf(s, head); name != "" {
			b := mustJSON(d)
			id := EventID{Checkpoint: cp, Ordinal: ordStop, Digest: digest(name, b)}
			if st.at.Ordinal < ordStop || st.at.Digest != id.Digest {
				if err := st.durableBytes(id, name, b, truncatedData{Checkpoint: cp, Step: step}); err != nil {
					return err
				}
			}
		}
	}
	if next == nil || next.Checkpoint.ParentID != cp || next.Checkpoint.Metadata.Source != checkpoint.SourceLoop {
		return nil
	}
	for i, t := range s.Tasks {
		id := EventID{Checkpoint: cp, Ordinal: ordUpdate + i}
		if id.Ordinal <= st.at.Ordinal || t.Name == graph.START {
			continue
		}
		u := t.Result
		if u == nil {
			u = map[string]json.RawMessage{}
		}
		d := updateData{Checkpoint: cp, Step: step + 1, Node: t.Name, Task: t.ID, Update: u}
		if err := st.durable(id, EventUpdates, d, truncatedData{Checkpoint: cp, Step: step + 1, Node: t.Name, Task: t.ID}); err != nil {
			return err
		}
	}
	return nil
}

// stopOf says where the thread stopped at s: waiting or failed (only at
// the head: once the thread moved on, the stop was resolved), or done
// (no task left, wherever it is).
func stopOf[S any](s *graph.Snapshot[S], head bool) (string, any) {
	cp, step := s.Config.CheckpointID, s.Metadata.Step
	next := s.Next
	if next == nil {
		next = []string{}
	}
	switch {
	case len(s.Tasks) == 0:
		return EventDone, doneData{Checkpoint: cp, Step: step}
	case head && s.Status == graph.StatusWaiting:
		in := s.Interrupts
		if in == nil {
			in = []interrupt.Interrupt{}
		}
		return EventInterrupt, interruptData{Checkpoint: cp, Step: step, Interrupts: in, Next: next, Breakpoint: s.Breakpoint}
	case head && s.Status == graph.StatusFailed:
		var errs []taskError
		for _, t := range s.Tasks {
			if t.Error != nil {
				errs = append(errs, taskError{Task: t.ID, Node: t.Name, Type: t.Error.Type, Message: t.Error.Message})
			}
		}
		return EventFailed, failedData{Checkpoint: cp, Step: step, Errors: errs, Next: next}
	}
	return "", nil
}

func digest(name string, data []byte) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)[:digestLen/2])
}

// durable sends a durable event and moves at to it.
func (st *stream[S]) durable(id EventID, name string, d any, stub truncatedData) error {
	return st.durableBytes(id, name, mustJSON(d), stub)
}

func (st *stream[S]) durableBytes(id EventID, name string, b []byte, stub truncatedData) error {
	if len(b) > st.h.opts.MaxEventBytes {
		stub.Truncated, stub.Bytes = true, len(b)
		b = mustJSON(stub)
	}
	if err := st.w.event(id.String(), name, b); err != nil {
		return err
	}
	st.at = id
	return nil
}

// encodeState marshals a snapshot's state, contained as encode is.
func (h *Hub[S]) encodeState(ctx context.Context, v S) (json.RawMessage, bool) {
	return h.encode(ctx, v)
}

// fingerprint sums the thread's head: its ID and the writes saved
// against it, which is all a step, a pause, a failure or an answer
// changes.
func (st *stream[S]) fingerprint(ctx context.Context) (string, error) {
	tps, err := st.h.r.Saver().List(ctx, st.thread, checkpoint.ListOptions{Limit: 1})
	if err != nil || len(tps) == 0 {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(tps[0].Checkpoint.ID))
	for _, w := range tps[0].Pending {
		for _, s := range []string{w.TaskID, w.Channel, strconv.Itoa(len(w.Value))} {
			h.Write([]byte{0})
			h.Write([]byte(s))
		}
		h.Write(w.Value)
	}
	return string(h.Sum(nil)), nil
}

// mustJSON marshals lockstep's own event data, which holds only strings,
// numbers and JSON already checked.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorData{Message: "runstream: event data did not encode"})
	}
	return b
}

// errWrite marks a failed write to the client.
var errWrite = errors.New("runstream: write to the client failed")

// sse writes server-sent events.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	last    time.Time
	buf     bytes.Buffer
}

func (s *sse) event(id, name string, data []byte) error {
	s.buf.Reset()
	if id != "" {
		s.buf.WriteString("id: ")
		s.buf.WriteString(id)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	// JSON from encoding/json holds no raw line break; one would end the
	// data line, so it is escaped whatever wrote it.
	for _, c := range data {
		switch c {
		case '\n':
			s.buf.WriteString(`\n`)
		case '\r':
			s.buf.WriteString(`\r`)
		default:
			s.buf.WriteByte(c)
		}
	}
	s.buf.WriteString("\n\n")
	return s.write()
}

func (s *sse) comment() error {
	s.buf.Reset()
	s.buf.WriteString(": keep-alive\n\n")
	return s.write()
}

func (s *sse) write() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout)) // not every ResponseWriter has deadlines
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return s.flush()
}

func (s *sse) flush() error {
	s.last = time.Now()
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// validThread is graph's rule for thread IDs, checked before anything is
// read: at most graph.MaxNameBytes of UTF-8 without control characters.
func validThread(thread string) error {
	bad := func(reason string) error {
		return fmt.Errorf("%w: runstream: thread ID %s", graph.ErrInvalidInput, reason)
	}
	switch {
	case len(thread) > graph.MaxNameBytes:
		return bad(fmt.Sprintf("of %d bytes (max %d)", len(thread), graph.MaxNameBytes))
	case !utf8.ValidString(thread):
		return bad("is not valid UTF-8")
	}
	for _, r := range thread {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	return nil
}
