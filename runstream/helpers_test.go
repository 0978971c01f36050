package runstream_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/runstream"
)

// wait bounds every wait of these tests: generous, never an assertion
// about speed.
const wait = 60 * time.Second

// sseEvent is one event as a client reads it.
type sseEvent struct {
	ID, Name, Data string
}

func (e sseEvent) durable() bool { return e.ID != "" }

// client reads one stream.
type client struct {
	t      *testing.T
	cancel context.CancelFunc
	events chan sseEvent
	done   chan struct{}
	status int
	body   string // the body of a refused request
}

func allowAll(*http.Request, string) error { return nil }

// serve mounts hub as the tests' clients expect it.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /threads/{thread}/events", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// connect opens a stream of thread on srv, sending lastID when it is
// not "". A refused request gives a client with status and body set and
// no events.
func connect(t *testing.T, srv *httptest.Server, thread, lastID string) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/threads/"+thread+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", req.URL, err)
	}
	c := &client{t: t, cancel: cancel, events: make(chan sseEvent, 1024), done: make(chan struct{}), status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		resp.Body.Close()
		cancel()
		c.body = b.String()
		close(c.done)
		close(c.events)
		return c
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	go func() {
		defer close(c.done)
		defer close(c.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.Name != "" {
					c.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				e.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				e.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.Data = strings.TrimPrefix(line, "data: ")
			default:
				t.Errorf("unexpected SSE line %q", line)
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

// next returns the next event; it fails the test when the stream ends
// or nothing comes within wait.
func (c *client) next() sseEvent {
	c.t.Helper()
	select {
	case e, ok := <-c.events:
		if !ok {
			c.t.Fatal("the stream ended")
		}
		return e
	case <-time.After(wait):
		c.t.Fatal("no event within the test's wait")
	}
	return sseEvent{}
}

// until reads events up to and including the first that ok accepts.
func (c *client) until(ok func(sseEvent) bool) []sseEvent {
	c.t.Helper()
	var out []sseEvent
	for {
		e := c.next()
		out = append(out, e)
		if ok(e) {
			return out
		}
	}
}

// close disconnects and waits for the reader to stop.
func (c *client) close() {
	c.cancel()
	<-c.done
}

func named(name string) func(sseEvent) bool {
	return func(e sseEvent) bool { return e.Name == name }
}

func durable(es []sseEvent) []sseEvent {
	var out []sseEvent
	for _, e := range es {
		if e.durable() {
			out = append(out, e)
		}
	}
	return out
}

// newHub returns a Hub over r with short polls, closed at cleanup.
func newHub[S any](t *testing.T, r *graph.Runnable[S], opts runstream.Options) *runstream.Hub[S] {
	t.Helper()
	if opts.Authorize == nil {
		opts.Authorize = allowAll
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 10 * time.Millisecond
	}
	h, err := runstream.New(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// gate holds a node until the test opens it, once.
type gate struct {
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

// pass blocks the first caller until release; later callers pass.
func (g *gate) pass(ctx context.Context) error {
	first := false
	g.once.Do(func() { first = true; close(g.entered) })
	if !first {
		return nil
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(wait):
		t.Fatal("the node never reached its gate")
	}
}
