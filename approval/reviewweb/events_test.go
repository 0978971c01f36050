package reviewweb_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint"
)

type sseEvent struct {
	Kind     string
	ID       string
	Outcome  approval.Outcome
	Reviewer string
}

// stream opens the event stream as user and returns its events; the
// channel closes when the stream ends.
func (s *server) stream(t *testing.T, user string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := s.openStream(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	return readStream(t, resp, cancel)
}

// openStream sends the request of the event stream as user and returns
// the response once its headers arrived.
func (s *server) openStream(ctx context.Context, user string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+"/api/v1/events", nil)
	req.Header.Set(userHeader, user)
	return http.DefaultClient.Do(req)
}

// readStream returns the events of an open stream; the channel closes
// when the stream ends, and stop (which calls cancel) ends it.
func readStream(t *testing.T, resp *http.Response, cancel func()) (<-chan sseEvent, func()) {
	t.Helper()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev sseEvent
				json.Unmarshal([]byte(d), &ev)
				out <- ev
			}
		}
	}()
	return out, func() { cancel(); <-done }
}

func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// TestEvents: the stream tells of a new pending approval, of one decided
// elsewhere (another process's inbox) and here, and of one that expired;
// Close ends it.
func TestEvents(t *testing.T) {
	f := newFixture(t)
	s := newServer(t, f, nil)
	ch, stop := s.stream(t, "bob@example.com") // open: every change from now on is an event
	defer stop()

	id := f.start(t, "t1", defaultCall())
	if ev := next(t, ch); ev.Kind != "new" || ev.ID != id {
		t.Fatalf("event %+v, want new %s", ev, id)
	}
	// Decided elsewhere: straight through the store, as the CLI would.
	if _, err := approval.NewInbox(f.saver, f.store).Approve(context.Background(), id, "carol@example.com", ""); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Kind != "decided" || ev.ID != id || ev.Reviewer != "carol@example.com" || ev.Outcome != approval.Approved {
		t.Fatalf("event %+v, want carol's approval of %s", ev, id)
	}
	// Decided here: told at once.
	id2 := f.start(t, "t2", defaultCall())
	if ev := next(t, ch); ev.Kind != "new" || ev.ID != id2 {
		t.Fatalf("event %+v, want new %s", ev, id2)
	}
	bob := s.client(t, "bob@example.com")
	if resp, body := bob.decide(id2, `{"outcome":"rejected","note":"no"}`); resp.StatusCode != 200 {
		t.Fatalf("reject: %d %s", resp.StatusCode, body)
	}
	if ev := next(t, ch); ev.Kind != "decided" || ev.ID != id2 || ev.Outcome != approval.Rejected {
		t.Fatalf("event %+v, want the rejection of %s", ev, id2)
	}
	// Expired.
	id3 := f.start(t, "t3", defaultCall())
	if ev := next(t, ch); ev.Kind != "new" || ev.ID != id3 {
		t.Fatalf("event %+v, want new %s", ev, id3)
	}
	f.clock.Add(2 * time.Hour)
	if ev := next(t, ch); ev.Kind != "expired" || ev.ID != id3 {
		t.Fatalf("event %+v, want %s expired", ev, id3)
	}
	// Close ends the stream, and refuses new ones.
	s.h.Close()
	for range ch {
	}
	resp, body := bob.do("GET", "/api/v1/events", "", nil)
	wantStatus(t, "events after Close", resp, body, 503, "unavailable")
}

// gatedSaver holds every read of the pending interrupts until gate is
// closed.
type gatedSaver struct {
	*checkpoint.MemorySaver
	gate chan struct{}
}

func (g gatedSaver) PendingInterrupts(ctx context.Context, q checkpoint.InterruptQuery) ([]checkpoint.PendingInterrupt, string, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	return g.MemorySaver.PendingInterrupts(ctx, q)
}

// TestEventsOpenAfterTheFirstRead: the stream opens (its headers arrive)
// only once the handler has read the pending list it compares with, so a
// client that reads the list after the stream opened misses nothing: an
// approval that appeared before is in what it reads, one after is an
// event. Before, the stream opened at once and an approval that appeared
// before the handler's first read was announced nowhere.
func TestEventsOpenAfterTheFirstRead(t *testing.T) {
	f := newFixture(t)
	gate := make(chan struct{})
	s := newServer(t, f, func(o *reviewweb.Options) { o.Saver = gatedSaver{f.saver, gate} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type opened struct {
		resp *http.Response
		err  error
	}
	got := make(chan opened, 1)
	go func() {
		resp, err := s.openStream(ctx, "bob@example.com")
		got <- opened{resp, err}
	}()
	before := f.start(t, "before", defaultCall())
	select {
	case o := <-got:
		if o.err == nil {
			o.resp.Body.Close()
		}
		t.Fatalf("the stream opened (%v) before the handler read the pending list", o.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	var o opened
	select {
	case o = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not open within 10s of the first read")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	ch, stop := readStream(t, o.resp, cancel)
	defer stop()
	// The client reads the list now: before is in it.
	resp, body := s.client(t, "bob@example.com").do("GET", "/api/v1/approvals", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, before) {
		t.Fatalf("the list after the stream opened lacks %s: %d %s", before, resp.StatusCode, body)
	}
	after := f.start(t, "after", defaultCall())
	if ev := next(t, ch); ev.Kind != "new" || ev.ID != after {
		t.Fatalf("event %+v, want new %s (and none for %s, which was there when the stream opened)", ev, after, before)
	}
}
