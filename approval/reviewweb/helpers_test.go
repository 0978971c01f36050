package reviewweb_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/interrupt"
)

// fakeClock is the injected clock of the store, the inbox, the handler
// and the gated node.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

var epoch = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func newClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// bookArgs are the arguments of the gated tool of the fixture.
type bookArgs struct {
	Hotel  string `json:"hotel" jsonschema:"minLength=1"`
	Nights int    `json:"nights" jsonschema:"minimum=1,maximum=30"`
	Total  int    `json:"total_eur" jsonschema:"minimum=1"`
}

// call is what a thread of the fixture asks a reviewer about.
type call struct {
	Tool      string
	Args      json.RawMessage
	Rationale string
	Context   json.RawMessage
	Risk      approval.Risk
	Kind      approval.Kind
	Owner     string
	TTL       time.Duration
}

// tstate is the state of the fixture's graph.
type tstate struct {
	Call     call
	Prepared bool
	Outcome  approval.Outcome
	Reviewer string
	RanArgs  json.RawMessage
}

// fixture is a graph START → prepare → gate → END whose gate node asks
// for an approval as the tool node does (interrupt.Ask with an
// approval.Request), on a memory saver and store with a fake clock.
type fixture struct {
	clock  *fakeClock
	saver  *checkpoint.MemorySaver
	store  *approval.MemoryStore
	run    *graph.Runnable[tstate]
	schema json.RawMessage

	mu  sync.Mutex
	ran map[string]int // thread → calls that ran
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clock := newClock()
	s, err := jsonschema.For[bookArgs]()
	if err != nil {
		t.Fatal(err)
	}
	schema, _ := json.Marshal(s)
	f := &fixture{clock: clock, saver: checkpoint.NewMemorySaver(nil), store: approval.NewMemoryStore(clock.Now), schema: schema, ran: map[string]int{}}
	r, err := graph.New[tstate]().
		AddNode("prepare", func(ctx context.Context, s tstate) (graph.Update[tstate], error) {
			return graph.Set(tstate{Prepared: true}, "Prepared"), nil
		}).
		AddNode("gate", f.gate).
		AddEdge(graph.START, "prepare").
		AddEdge("prepare", "gate").
		AddEdge("gate", graph.END).
		Compile(graph.WithSaver(f.saver))
	if err != nil {
		t.Fatal(err)
	}
	f.run = r
	return f
}

func (f *fixture) gate(ctx context.Context, s tstate) (graph.Update[tstate], error) {
	c := s.Call
	h, err := approval.ArgsHash(c.Tool, c.Args)
	if err != nil {
		return graph.Update[tstate]{}, err
	}
	now := f.clock.Now()
	ttl := c.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	req := approval.Request{Type: approval.RequestType, Tool: c.Tool, Args: c.Args, ArgsHash: h, CallID: "call-1",
		Rationale: c.Rationale, Context: c.Context, Risk: c.Risk, Rule: "price_over_1000_eur", Owner: c.Owner,
		Schema: f.schema, CreatedAt: now, ExpiresAt: now.Add(ttl), Kind: c.Kind}
	d, err := interrupt.Ask[approval.Decision](ctx, req)
	if err != nil {
		return graph.Update[tstate]{}, err
	}
	out := tstate{Outcome: d.Outcome, Reviewer: d.Reviewer}
	if d.Allows() {
		info, _ := graph.TaskFrom(ctx)
		args := c.Args
		if d.Outcome == approval.Edited {
			args = d.Args
		}
		f.mu.Lock()
		f.ran[info.Thread]++
		f.mu.Unlock()
		out.RanArgs = args
	}
	return graph.Set(out, "Outcome", "Reviewer", "RanArgs"), nil
}

// defaultCall is a booking above the limit, as the hotel example asks.
func defaultCall() call {
	return call{Tool: "book_hotel", Args: json.RawMessage(`{"hotel":"Palácio Suites","nights":4,"total_eur":1520}`),
		Rationale: "Palácio Suites quotes 1520 EUR for 4 nights, above the 1000 EUR limit.",
		Context:   json.RawMessage(`{"guest":"Ana Lima","requested_by":"ana@example.com"}`), Risk: approval.RiskMedium, Owner: "travel-desk"}
}

// start runs a thread to its approval and returns the approval ID.
func (f *fixture) start(t testing.TB, thread string, c call) string {
	t.Helper()
	res, err := f.run.Invoke(context.Background(), thread, graph.Set(tstate{Call: c}, "Call"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("thread %s: status %s with %d interrupts, want waiting on 1", thread, res.Status, len(res.Interrupts))
	}
	return res.Interrupts[0].ID
}

func (f *fixture) ranCount(thread string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ran[thread]
}

// userHeader names the reviewer in the tests, through the shipped
// TrustedProxy authenticator (the test client is the "proxy").
const userHeader = "X-Test-User"

func loopbackProxy() *reviewweb.TrustedProxy {
	return &reviewweb.TrustedProxy{Header: userHeader, GroupsHeader: "X-Test-Groups",
		Proxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
}

// server is a handler over a fixture behind a test server.
type server struct {
	f   *fixture
	h   *reviewweb.Handler
	srv *httptest.Server
}

func newServer(t testing.TB, f *fixture, mod func(o *reviewweb.Options)) *server {
	t.Helper()
	o := reviewweb.Options{Saver: f.saver, Store: f.store, Auth: loopbackProxy(), Policy: reviewweb.AnyReviewer(),
		Now: f.clock.Now, PollInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	h, err := reviewweb.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return &server{f: f, h: h, srv: srv}
}

// client is one reviewer's browser-less client.
type client struct {
	t      testing.TB
	s      *server
	user   string
	c      *http.Client
	csrf   string
	groups string
}

func (s *server) client(t testing.TB, user string) *client {
	jar, _ := cookiejar.New(nil)
	c := &client{t: t, s: s, user: user, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if user != "" {
		resp, body := c.do("GET", "/api/v1/session", "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("session of %s: %d %s", user, resp.StatusCode, body)
		}
		var sess struct {
			CSRF string `json:"csrf_token"`
		}
		json.Unmarshal([]byte(body), &sess)
		c.csrf = sess.CSRF
	}
	return c
}

// do sends a request as the client's reviewer and returns the response
// and its body.
func (c *client) do(method, path, body string, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.user != "" {
		req.Header.Set(userHeader, c.user)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

// decide posts an API decision with the client's token.
func (c *client) decide(id, body string) (*http.Response, string) {
	c.t.Helper()
	return c.do("POST", "/api/v1/approvals/"+url.PathEscape(id)+"/decision", body,
		map[string]string{"Content-Type": "application/json", "X-CSRF-Token": c.csrf})
}

// form posts the decision form with the client's token.
func (c *client) form(id string, v url.Values) (*http.Response, string) {
	c.t.Helper()
	if v.Get("csrf") == "" && c.csrf != "" {
		v.Set("csrf", c.csrf)
	}
	return c.do("POST", "/approvals/"+url.PathEscape(id)+"/decide", v.Encode(),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
}

// doGroups sends a GET as the client's reviewer in the client's groups.
func (c *client) doGroups(method, path string) (*http.Response, string) {
	c.t.Helper()
	return c.do(method, path, "", map[string]string{"X-Test-Groups": c.groups})
}

// decideG posts an API decision as the client's reviewer in its groups.
func (c *client) decideG(id, body string) (*http.Response, string) {
	c.t.Helper()
	return c.do("POST", "/api/v1/approvals/"+url.PathEscape(id)+"/decision", body,
		map[string]string{"Content-Type": "application/json", "X-CSRF-Token": c.csrf, "X-Test-Groups": c.groups})
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func newTestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

// newLocalToken builds a LocalToken; refused options fail the test.
func newLocalToken(t testing.TB, o reviewweb.LocalTokenOptions) *reviewweb.LocalToken {
	t.Helper()
	lt, err := reviewweb.NewLocalToken(o)
	if err != nil {
		t.Fatal(err)
	}
	return lt
}
