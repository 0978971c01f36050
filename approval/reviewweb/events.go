package reviewweb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// event is what the live pages are told: an approval appeared, or one
// left the pending list (decided here or elsewhere, expired, or its thread
// moved on).
type event struct {
	Seq      uint64           `json:"seq"`
	Kind     string           `json:"kind"` // "new", "decided", "expired" or "gone"
	ID       string           `json:"id"`
	Outcome  approval.Outcome `json:"outcome,omitempty"`
	Reviewer string           `json:"reviewer,omitempty"`
	At       time.Time        `json:"at,omitzero"`
}

// hub polls the inbox while any event stream is open and fans changes
// out to the streams. Its poller runs only while a stream is open, so an
// idle handler holds no goroutine.
type hub struct {
	h *Handler

	mu      sync.Mutex
	subs    map[chan event]struct{}
	seq     uint64
	pending map[string]approval.Item // as of the last poll; nil before the first
	closed  bool
	stop    context.CancelFunc // the poller's, while it runs
	done    chan struct{}      // closed when the poller returns
	// ready is closed once the running poller has read its baseline
	// (pending is set): from then on, every change is published.
	ready chan struct{}
}

func newHub(h *Handler) *hub { return &hub{h: h, subs: map[chan event]struct{}{}} }

// subBuffer is how many events a slow stream may fall behind before it is
// ended (the browser reconnects and reloads what it shows).
const subBuffer = 64

// subscribe opens a stream's channel and starts the poller if it is the
// first. It returns the channel and one that is closed once the poller
// has read the pending list it compares with: every change after that is
// published on the stream. It fails after close.
func (b *hub) subscribe() (chan event, <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, errors.New("reviewweb: the handler is closed")
	}
	ch := make(chan event, subBuffer)
	b.subs[ch] = struct{}{}
	if b.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		b.stop, b.done, b.ready = cancel, make(chan struct{}), make(chan struct{})
		go b.poll(ctx, b.done, b.ready)
	}
	return ch, b.ready, nil
}

// unsubscribe closes a stream's channel and stops the poller after the
// last one, waiting for it to return.
func (b *hub) unsubscribe(ch chan event) {
	b.mu.Lock()
	if _, ok := b.subs[ch]; !ok {
		b.mu.Unlock()
		return
	}
	delete(b.subs, ch)
	close(ch)
	var done chan struct{}
	if len(b.subs) == 0 && b.stop != nil {
		b.stop()
		done, b.stop, b.pending = b.done, nil, nil
	}
	b.mu.Unlock()
	if done != nil {
		<-done
	}
}

// close ends every stream and the poller, and refuses new streams.
func (b *hub) close() {
	b.mu.Lock()
	b.closed = true
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
	var done chan struct{}
	if b.stop != nil {
		b.stop()
		done, b.stop = b.done, nil
	}
	b.mu.Unlock()
	if done != nil {
		<-done
	}
}

// publish sends ev to every stream; a stream whose buffer is full is
// ended. b.mu must be held.
func (b *hub) publish(ev event) {
	b.seq++
	ev.Seq = b.seq
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			delete(b.subs, ch)
			close(ch)
		}
	}
}

// decided tells the streams at once about a decision made here.
func (b *hub) decided(id string, d approval.Decision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending != nil {
		delete(b.pending, id)
	}
	if len(b.subs) > 0 {
		b.publish(event{Kind: "decided", ID: id, Outcome: d.Outcome, Reviewer: d.Reviewer, At: d.DecidedAt})
	}
}

// poll reads the pending list every PollInterval until ctx ends, and
// publishes what changed since the last read.
func (b *hub) poll(ctx context.Context, done, ready chan struct{}) {
	defer close(done)
	t := time.NewTicker(b.h.o.PollInterval)
	defer t.Stop()
	for {
		b.once(ctx, ready)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// once reads the pending approvals and publishes the differences from the
// last read: new ones, and for each one gone, its decision, its expiry,
// or that its thread no longer waits on it. The first read that succeeds
// closes ready.
func (b *hub) once(ctx context.Context, ready chan struct{}) {
	now := map[string]approval.Item{}
	f := approval.Filter{Limit: approval.MaxPageSize}
	for {
		p, err := b.h.inbox.List(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				b.h.o.Logger.LogAttrs(ctx, slog.LevelWarn, "reviewweb: live updates could not read the inbox", slog.String("error", err.Error()))
			}
			return
		}
		for _, it := range p.Items {
			now[it.ID] = it
		}
		if p.Next == "" {
			break
		}
		f.Cursor = p.Next
	}
	b.mu.Lock()
	prev := b.pending
	b.mu.Unlock()
	var evs []event
	if prev != nil {
		for id := range now {
			if _, ok := prev[id]; !ok {
				evs = append(evs, event{Kind: "new", ID: id})
			}
		}
		for id, it := range prev {
			if _, ok := now[id]; ok {
				continue
			}
			ev := event{Kind: "gone", ID: id}
			rec, err := b.h.o.Store.Get(ctx, id)
			switch {
			case err == nil && rec.Decision.Outcome == approval.Expired:
				ev = event{Kind: "expired", ID: id, Outcome: rec.Decision.Outcome, Reviewer: rec.Decision.Reviewer, At: rec.Decision.DecidedAt}
			case err == nil:
				ev = event{Kind: "decided", ID: id, Outcome: rec.Decision.Outcome, Reviewer: rec.Decision.Reviewer, At: rec.Decision.DecidedAt}
			case it.Request.Expired(b.h.o.Now()):
				ev = event{Kind: "expired", ID: id, At: it.Request.ExpiresAt}
			}
			evs = append(evs, ev)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	// A decision made here while the list was read was published already:
	// do not report it again as gone.
	for _, ev := range evs {
		if ev.Kind != "new" {
			if _, still := b.pending[ev.ID]; !still {
				continue
			}
		}
		b.publish(ev)
	}
	b.pending = now
	select {
	case <-ready:
	default:
		close(ready)
	}
}

// keepAlive is how often an idle stream sends a comment, so that proxies
// keep it open.
const keepAlive = 20 * time.Second

// events answers GET /api/v1/events: a text/event-stream of "approval"
// events (JSON: seq, kind new/decided/expired/gone, id, and for a decision
// its outcome, reviewer and time) until the client goes or the handler
// closes.
//
// The stream opens (its headers are sent) only once the poller has read
// the pending list it compares with, so that a client that reads the list
// after the stream opened (the pages' script does) misses no change: each
// one is either in what it read or an event after.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	ch, ready, err := h.hub.subscribe()
	if err != nil {
		h.fail(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the inbox is shutting down"})
		return
	}
	defer h.hub.unsubscribe(ch)
	var early []event // decisions made here before the first read
	for waiting := true; waiting; {
		select {
		case <-ready:
			waiting = false
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok { // the handler closed before the first read
				h.fail(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the inbox is shutting down"})
				return
			}
			early = append(early, ev)
		}
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second)) // unsupported by some writers: best effort
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 2000\n: lockstep approvals\n\n") {
		return
	}
	send := func(ev event) bool {
		b, _ := json.Marshal(ev) // an event always encodes
		return write(fmt.Sprintf("id: %d\nevent: approval\ndata: %s\n\n", ev.Seq, b))
	}
	for _, ev := range early {
		if !send(ev) {
			return
		}
	}
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if !send(ev) {
				return
			}
		case <-t.C:
			if !write(": keep-alive\n\n") {
				return
			}
		}
	}
}
