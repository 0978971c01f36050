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
	req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+"/api/v1/events", nil)
	req.Header.Set(userHeader, user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
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
	ch, stop := s.stream(t, "bob@example.com")
	defer stop()
	time.Sleep(100 * time.Millisecond) // let the first poll take its baseline (an earlier approval would only be missed)

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
